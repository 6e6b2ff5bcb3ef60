"""Redis URL parsing (scheduler/stores/urls.py): the Sentinel format and its errors."""

from __future__ import annotations

import pytest

from scheduler.stores.redis.protocol import urls
from scheduler.stores.redis.protocol.urls import RedisURLError, SentinelURL, parse_sentinel


def test_a_full_sentinel_url():
    assert parse_sentinel(
        "redis+sentinel://app:s%40cret@h1:26380,h2,[::1]:26381/prod-cache/3"
        "?sentinel_password=sp&sentinel_username=su"
    ) == SentinelURL(
        sentinels=(("h1", 26380), ("h2", 26379), ("::1", 26381)),
        service="prod-cache",
        db=3,
        username="app",
        password="s@cret",
        sentinel_username="su",
        sentinel_password="sp",
    )


def test_defaults_db_zero_no_auth():
    s = parse_sentinel("redis+sentinel://127.0.0.1:5000/mymaster")
    assert (s.sentinels, s.service, s.db, s.username, s.password) == (
        (("127.0.0.1", 5000),),
        "mymaster",
        0,
        None,
        None,
    )
    assert parse_sentinel("REDIS+SENTINEL://h/m/").db == 0
    assert parse_sentinel("redis+sentinel://:pw@h/m").password == "pw"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel://h1:26379", "service name is missing"),
        ("redis+sentinel://h1:26379/", "service name is missing"),
        ("redis+sentinel://h1:26379/m/x", "database must be a number"),
        ("redis+sentinel://h1:26379/m/0/extra", "too many path parts"),
        ("redis+sentinel://h1:port/m", "not a number from 1 to 65535"),
        ("redis+sentinel://h1:70000/m", "not a number from 1 to 65535"),
        ("redis+sentinel://h1,,h2/m", "empty entry"),
        ("redis+sentinel:///m", "empty entry"),
        ("redis+sentinel://:1/m", "a host is missing"),
        ("redis+sentinel://::1:26379/m", "brackets"),
        ("redis+sentinel://[::1/m", "malformed IPv6"),
        ("redis+sentinel://h/m?timeout=3", "unknown option"),
        ("redis+sentinel://h/m#x", "fragment"),
    ],
)
def test_malformed_sentinel_urls_say_what_is_wrong_and_the_format(url, why):
    with pytest.raises(RedisURLError, match=why) as info:
        parse_sentinel(url)
    assert urls.FORMAT in str(info.value)


def test_errors_never_show_passwords():
    with pytest.raises(RedisURLError) as info:
        parse_sentinel("redis+sentinel://u:topsecret@h/m/x?sentinel_password=alsosecret")
    assert "topsecret" not in str(info.value) and "alsosecret" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
        ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
        ("redis://h:1/0", "redis://h:1/0"),
        (
            "redis+sentinel://u:pw@a:1,b:2/m?sentinel_password=x",
            "redis+sentinel://u:***@a:1,b:2/m?sentinel_password=***",
        ),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),  # not unix:/run/redis.sock
        ("unix:///run/redis.sock?db=2&password=pw", "unix:///run/redis.sock?db=2&password=***"),
        ("unix://:pw@/run/redis.sock", "unix://:***@/run/redis.sock"),
        ("unix://u:pw@/run/redis.sock?db=1", "unix://u:***@/run/redis.sock?db=1"),
    ],
)
def test_safe_hides_passwords(url, shown):
    assert urls.safe(url) == shown


def test_a_unix_socket_url_is_shown_as_given_in_a_message(tmp_path):
    from click.testing import CliRunner

    from scheduler.cli import main

    url = f"unix://{tmp_path}/none.sock?db=1&password=s3cret"  # tmp_path is absolute
    result = CliRunner().invoke(main, ["stats", "--redis", url, "--redis-timeout", "1"])
    assert result.exit_code == 3, result.output
    shown = f"unix://{tmp_path}/none.sock?db=1&password=***"
    assert f"error: cannot reach Redis at {shown}: " in result.stderr, result.stderr
    assert "s3cret" not in result.stderr


def test_unknown_schemes_are_refused_with_the_choices():
    with pytest.raises(
        RedisURLError,
        match=r"unsupported Redis URL scheme http://.*"
        r"redis\+sentinel://",
    ):
        urls.connect("http://h:1/0")
    with pytest.raises(RedisURLError, match=r"scheme \(none\)"):
        urls.connect("//h:1/0")


def test_connect_builds_a_sentinel_client_without_network():
    client = urls.connect("redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc/2", decode_responses=True)
    pool = client.connection_pool
    assert pool.service_name == "svc" and pool.connection_kwargs["db"] == 2
    assert [
        s.connection_pool.connection_kwargs["port"] for s in pool.sentinel_manager.sentinels
    ] == [1, 2]
    assert urls.primary_address(client) is None  # nothing connected yet
    urls.close(client)
    plain = urls.connect("redis://127.0.0.1:1/0")
    assert urls.primary_address(plain) is None
    urls.close(plain)


@pytest.mark.parametrize("aio", [False, True])
def test_dead_sentinels_fail_at_once_in_one_line_without_client_reprs(aio):
    """Every sentinel refuses the connection: one try each (redis-py's default of 3 retries
    with backoff per sentinel took ~8 s), and the error names the service and each
    sentinel's error, not redis-py's client reprs."""
    import asyncio
    import time

    from scheduler import AsyncClient, Client
    from scheduler.stores.redis import StoreUnavailableError

    url = "redis+sentinel://127.0.0.1:1,127.0.0.1:2/orders"

    async def enqueue_async() -> None:
        async with AsyncClient(url) as client:
            await client.enqueue("t.x", delay=1)

    t0 = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        if aio:
            asyncio.run(enqueue_async())
        else:
            Client(url).enqueue("t.x", delay=1)
    assert time.monotonic() - t0 < 3.0
    text = str(caught.value)
    assert "no sentinel of redis+sentinel://127.0.0.1:1,127.0.0.1:2/orders" in text, text
    assert "'orders'" in text and "ConnectionError" in text and "<redis." not in text, text


def test_no_primary_reads_as_a_failover_in_progress_first_then_what_to_check():
    """During a failover the sentinels know no primary for a few seconds: the line must
    not read as a configuration error only (an operator watching a failover saw that)."""
    text = "No master found for 'mymaster' : {Sentinel<...>: ConnectionError('refused')}"
    line = urls.no_primary(text, "redis+sentinel://h:26379/mymaster")
    assert line.startswith("no sentinel of redis+sentinel://h:26379/mymaster knows a primary")
    assert "'mymaster' just now" in line and "during a failover" in line
    assert "if it lasts, check that the sentinels run" in line and "Sentinel<" not in line


def test_a_url_redis_py_cannot_read_names_the_url_and_the_form():
    """redis-py said only "Port could not be cast to integer value as 'notaport'"."""
    with pytest.raises(RedisURLError) as err:
        urls.connect("redis://:secret@127.0.0.1:notaport/0")
    text = str(err.value)
    assert text.startswith("bad Redis URL 'redis://:***@127.0.0.1:notaport/0': ")
    assert "secret" not in text and "Port could not be cast" in text and "expected redis://" in text


@pytest.mark.parametrize("aio", [False, True])
def test_a_url_option_redis_py_does_not_take_is_named_when_the_client_is_made(aio):
    """It was redis-py's "AbstractConnection.__init__() got an unexpected keyword argument
    'foo'", at the first command."""
    with pytest.raises(RedisURLError) as err:
        urls.connect("redis://:secret@127.0.0.1:6390/0?foo=bar", aio=aio)
    text = str(err.value)
    assert text.startswith("bad Redis URL 'redis://:***@127.0.0.1:6390/0?foo=bar': no option foo=")
    assert "secret" not in text and "__init__" not in text
    good = urls.connect("redis://127.0.0.1:6390/0?socket_timeout=2", aio=aio)  # not connected
    assert good.connection_pool.connection_kwargs["socket_timeout"] == 2.0


@pytest.mark.parametrize("url", ["redis://", "redis:///0", "rediss://:secret@/1", "redis://:6379"])
def test_a_url_with_no_host_is_refused_not_taken_for_localhost(url):
    """redis-py read "redis://" (an empty $HOST, say) as localhost:6379: someone else's."""
    with pytest.raises(RedisURLError, match="names no host: give redis://host") as err:
        urls.connect(url)
    assert "secret" not in str(err.value)
