"""Cluster URLs and shard counts (scheduler/stores/urls.py, shards.py, keys.py): no server."""

from __future__ import annotations

import zlib

import pytest

from scheduler.stores.redis.protocol import urls
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.urls import (
    ClusterURL,
    RedisURLError,
    parse_cluster,
    split_shards,
)
from scheduler.stores.redis.sharding.shards import shard_count, shard_of


def test_a_full_cluster_url():
    assert parse_cluster(
        "redis+cluster://app:s%40cret@h1:7000,h2,[::1]:7002/?shards=16"
    ) == ClusterURL(
        nodes=(("h1", 7000), ("h2", 6379), ("::1", 7002)), username="app", password="s@cret"
    )
    assert parse_cluster("REDIS+CLUSTER://h1").nodes == (("h1", 6379),)
    assert urls.is_cluster("redis+cluster://h") and not urls.is_cluster("redis://h")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+cluster://h1:7000/0", "no database number"),
        ("redis+cluster://h1,,h2", "empty entry"),
        ("redis+cluster://h1:port", "not a number from 1 to 65535"),
        ("redis+cluster://h1?timeout=3", "unknown option"),
        ("redis+cluster://h1#x", "fragment"),
        ("redis+cluster://[::1", "malformed IPv6"),
    ],
)
def test_bad_cluster_urls_say_what_is_wrong_and_show_the_format(url, why):
    with pytest.raises(RedisURLError, match=why) as err:
        parse_cluster(url)
    assert urls.CLUSTER_FORMAT in str(err.value)


def test_the_shard_count_is_taken_off_any_url():
    assert split_shards("redis://h:1/0?shards=4") == ("redis://h:1/0", 4)
    assert split_shards("redis://h:1/0?ssl_cert_reqs=none&shards=2") == (
        "redis://h:1/0?ssl_cert_reqs=none",
        2,
    )
    assert split_shards("redis://h:1/0") == ("redis://h:1/0", None)
    for bad in ("0", "x", "1025", "-1"):
        with pytest.raises(RedisURLError, match="integer from 1 to 1024"):
            split_shards(f"redis://h/0?shards={bad}")


def test_the_password_is_hidden_in_cluster_urls():
    assert (
        urls.safe("redis+cluster://u:pw@h1:7000,h2:7001") == "redis+cluster://u:***@h1:7000,h2:7001"
    )


def test_unsupported_schemes_name_the_cluster_format_too():
    with pytest.raises(RedisURLError, match="redis\\+cluster://"):
        urls.connect("http://h")


def test_a_job_shard_is_crc32_of_its_id_and_stable():
    assert shard_of("job-1", 16) == zlib.crc32(b"job-1") % 16
    assert shard_of("anything", 1) == 0
    counts = [0] * 16
    for i in range(16_000):
        counts[shard_of(f"j{i}", 16)] += 1
    assert min(counts) > 800 and max(counts) < 1200  # an even spread


def test_shard_zero_keeps_the_unsharded_layout_and_others_get_their_own_tag():
    assert Keys("ns").prefix == Keys("ns", 0, 16).prefix == "duetime:{ns}:"
    assert Keys("ns", 3, 16).prefix == "duetime:{ns#3}:"
    assert Keys("ns", 3, 16).epoch == "duetime:{ns#3}:epoch"
    with pytest.raises(ValueError, match="not one of 4"):
        Keys("ns", 4, 4)


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, True, "4"])
def test_shard_counts_are_checked(bad):
    with pytest.raises(ValueError, match="integer from 1 to 1024"):
        shard_count(bad)
