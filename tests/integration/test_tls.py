"""TLS through the URL (docs/operating.md): a throwaway CA on loopback. The right CA works;
no CA, or plaintext to the TLS port, fails with a clear error."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from scheduler import Client
from scheduler.embedded import EmbeddedRedis
from scheduler.model import After
from scheduler.stores.redis import RedisStore, StoreUnavailableError
from tests.helpers import spec

pytestmark = pytest.mark.redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=duetime test CA",
        # what Python >= 3.13 requires of a CA by default (ssl.VERIFY_X509_STRICT)
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    ssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    )
    (d / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "authorityKeyIdentifier=keyid,issuer\n"  # required by VERIFY_X509_STRICT too
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    )
    port = _free_port()
    server = EmbeddedRedis(
        extra_args=[
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(d / "server.crt"),
            "--tls-key-file",
            str(d / "server.key"),
            "--tls-ca-cert-file",
            str(d / "ca.crt"),
            "--tls-auth-clients",
            "no",
        ]
    )
    server.start()
    yield port, d / "ca.crt"
    server.stop()


def test_the_right_ca_works(tls_server, redis_ns, clock):
    port, ca = tls_server
    url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}"
    store = RedisStore(url, redis_ns, clock=clock)
    store.add(spec("a", After(0)))
    (claim,) = store.claim_due({"default": 1}, 30, "o").claims
    assert store.complete(claim, None).value == "ok"
    with Client(url, namespace=redis_ns) as client:
        assert client.get("a").state == "succeeded"
    store.close()


def test_no_ca_fails_clearly(tls_server, redis_ns):
    port, _ = tls_server
    store = RedisStore(f"rediss://127.0.0.1:{port}/0", redis_ns)
    with pytest.raises(StoreUnavailableError, match=r"cannot reach Redis at rediss://.*(?i:cert)"):
        store.cancel("x")


def test_a_refused_certificate_says_to_give_its_ca_not_is_it_running(tls_server):
    """It said "is it running, and is the URL right?" of a server that answered."""
    from click.testing import CliRunner

    from scheduler.cli import main

    port, _ = tls_server
    r = CliRunner().invoke(main, ["ls", "--redis", f"rediss://127.0.0.1:{port}/0"])
    assert r.exit_code == 3, r.output
    assert "is the CA that signed it given in the URL (?ssl_ca_certs=" in r.output
    assert "is it running" not in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "why",
    [
        "CA cert does not include key usage extension",
        "Missing Authority Key Identifier",
        "Basic Constraints of CA cert not marked critical",
    ],
)
def test_python_313s_strict_verification_is_named(why):
    """Python >= 3.13 refuses such chains by default (ssl.VERIFY_X509_STRICT): a CA that
    worked with 3.12 then fails, and the error says why and what to reissue."""
    import redis

    from scheduler.stores.redis.integrity.server_checks import tls_refused, unreachable

    text = f"Error 1 connecting to h:6379. [SSL: CERTIFICATE_VERIFY_FAILED] {why} (_ssl.c:1020)."
    message = str(unreachable(redis.ConnectionError(text), "rediss://h:6379/0"))
    assert "ssl.VERIFY_X509_STRICT" in message and "keyUsage" in message
    assert "is it running" not in message
    assert tls_refused("Connection refused") is None


def test_plaintext_to_the_tls_port_fails(tls_server, redis_ns):
    port, _ = tls_server
    store = RedisStore(f"redis://127.0.0.1:{port}/0", redis_ns)
    with pytest.raises(StoreUnavailableError, match="cannot reach Redis"):
        store.cancel("x")
