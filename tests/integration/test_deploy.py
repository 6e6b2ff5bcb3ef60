"""deploy/: the files parse and agree with each other, every ``duetime ...`` command line in
them is a valid invocation of the CLI, and the recommended redis.conf + users.acl, loaded
into a real redis-server, let each ACL user do its work and nothing more.

The Redis half runs one private server (module scope) started from a copy of
deploy/redis.conf whose only changes are where it listens and where its files are; its
ACL file is deploy/users.acl with test passwords in place of the placeholders and one
extra ``test-admin`` user that the test inspects the server with. ``ACL LOG`` is the
oracle: after legitimate work by a user it must hold no refusal.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
import subprocess
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
from click.testing import CliRunner

from scheduler.cli import main
from scheduler.embedded import ENV_VAR as SERVER_ENV_VAR
from scheduler.embedded import INSTALL_HINT, EmbeddedRedis, find_server, spawn_tied
from scheduler.model import After, Commit
from tests.helpers import spec
from tests.redis_fixtures import unavailable

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
K8S = DEPLOY / "k8s"
UNIT = DEPLOY / "duetime.service"
DOCKERFILE = DEPLOY / "Dockerfile"
ACL = DEPLOY / "users.acl"
CONF = DEPLOY / "redis.conf"
NS = "demo"  # the namespace of every deploy file; users.acl grants exactly its keys
USERS = ("duetime-replica", "duetime-producer", "duetime-monitor")


# ---- reading the files ------------------------------------------------------------------


def yaml_docs(path: Path) -> list[Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install pyyaml)")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def compose() -> dict[str, Any]:
    (doc,) = yaml_docs(COMPOSE)
    return doc


def k8s(kind: str) -> dict[str, Any]:
    found = [d for p in sorted(K8S.glob("*.yaml")) for d in yaml_docs(p) if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in deploy/k8s, found {len(found)}"
    return found[0]


def dockerfile_instruction(name: str) -> list[str]:
    """The arguments of every ``NAME`` instruction (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [m.group(1).strip() for m in re.finditer(rf"(?m)^{name}\s+(.*)$", text)]


def image_entrypoint_and_cmd() -> tuple[list[str], list[str]]:
    (entry,) = dockerfile_instruction("ENTRYPOINT")
    (cmd,) = dockerfile_instruction("CMD")
    return json.loads(entry), json.loads(cmd)  # exec form: JSON arrays


def unit() -> dict[str, dict[str, list[str]]]:
    """The systemd unit as section -> key -> values (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def acl_users() -> dict[str, list[str]]:
    """users.acl as user name -> rules."""
    users = {}
    for line in ACL.read_text().splitlines():
        words = line.split()
        assert words and words[0] == "user", f"users.acl: not a 'user' line: {line!r}"
        users[words[1]] = words[2:]
    return users


def acl_password(user: str) -> str:
    (password,) = [r[1:] for r in acl_users()[user] if r.startswith(">")]
    return password


def seconds(text: str | int | float) -> float:
    """'45s', '45', 45, '1m30s' (compose and systemd durations) -> seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip())
    assert parts, f"not a duration: {text!r}"
    return sum(float(n) * units[u or "s"] for n, u in parts)


def redis_command(argv: list[str]) -> tuple[str, dict[str, list[str]]]:
    """``redis-server FILE --name value...`` as FILE and {name: values}."""
    assert argv[0] == "redis-server" and not argv[1].startswith("--"), argv
    options: dict[str, list[str]] = {}
    for word in argv[2:]:
        if word.startswith("--"):
            name = word[2:]
            options[name] = []
        else:
            options[name].append(word)
    return argv[1], options


# ---- the command lines ------------------------------------------------------------------


def invocations() -> list[tuple[str, list[str]]]:
    """Every ``duetime ...`` command line of deploy/, as (where, argv)."""
    entry, cmd = image_entrypoint_and_cmd()
    found = [("Dockerfile ENTRYPOINT + CMD", entry + cmd)]
    for name, svc in compose()["services"].items():
        if "build" in svc or str(svc.get("image", "")).startswith("duetime"):
            command = svc.get("command", cmd)
            command = shlex.split(command) if isinstance(command, str) else command
            found.append((f"compose service {name}", svc.get("entrypoint", entry) + command))
    for c in k8s("Deployment")["spec"]["template"]["spec"]["containers"]:
        found.append((f"k8s container {c['name']}", c.get("command", entry) + c.get("args", cmd)))
    for line in unit()["Service"]["ExecStart"]:
        found.append(("duetime.service ExecStart", shlex.split(line.lstrip("-@:+!"))))
    readme = (DEPLOY / "README.md").read_text()
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", readme, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.split(" #")[0].strip().removeprefix("$ "))
            while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value duetime ...
                words.pop(0)
            if words[:1] == ["duetime"]:
                found.append(("deploy/README.md", words))
    return found


def parse(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """Parse a duetime command line with click, as the CLI would, without running it.
    Unknown options, bad values and missing arguments raise click.UsageError."""
    assert Path(argv[0]).name == "duetime", f"not a duetime command: {argv}"
    group_ctx = main.make_context("duetime", list(argv[1:]))
    name = argv[1]
    command = main.get_command(group_ctx, name)
    if command is None:
        raise click.UsageError(f"no such command {name!r}")
    ctx = command.make_context(name, list(argv[2:]), parent=group_ctx)
    return name, ctx.params


def replica_shutdown_timeouts() -> list[tuple[str, float]]:
    return [
        (where, parse(argv)[1]["shutdown_timeout"])
        for where, argv in invocations()
        if argv[1] == "run"
    ]


# ---- files: parse and agree -------------------------------------------------------------


def test_deploy_has_every_file():
    for name in (
        "Dockerfile",
        "docker-compose.yml",
        "duetime.service",
        "redis.conf",
        "users.acl",
        "README.md",
        "k8s/deployment.yaml",
        "k8s/configmap.yaml",
        "k8s/secret.example.yaml",
        "k8s/pdb.yaml",
    ):
        assert (DEPLOY / name).is_file(), name


def test_every_yaml_file_parses():
    paths = sorted(DEPLOY.rglob("*.y*ml"))
    assert len(paths) >= 5
    for path in paths:
        assert yaml_docs(path), f"{path} is empty"


def test_compose_has_redis_three_replicas_and_a_producer():
    services = compose()["services"]
    commands = {name: svc.get("command", []) for name, svc in services.items()}
    replicas = sorted(n for n, c in commands.items() if c[:1] == ["run"])
    producers = sorted(n for n, c in commands.items() if c[:1] == ["enqueue"])
    assert replicas == ["replica-1", "replica-2", "replica-3"]
    assert producers == ["producer"]
    redis = services["redis"]
    assert str(redis["image"]).startswith("redis:7")
    # the command names redis.conf, users.acl and the data volume where they are mounted
    mounts = {src: dst.split(":")[0] for src, dst in (v.split(":", 1) for v in redis["volumes"])}
    conf, options = redis_command(redis["command"])
    assert conf == mounts["./redis.conf"]
    assert options["aclfile"] == [mounts["./users.acl"]]
    assert options["dir"] == [mounts["redis-data"]]
    assert options["bind"] == ["*", "-::*"]  # the compose network reaches it
    assert "healthcheck" in redis
    for name in replicas + producers:
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_credentials_match_users_acl():
    services = compose()["services"]
    expected = {
        "replica-1": "duetime-replica",
        "replica-2": "duetime-replica",
        "replica-3": "duetime-replica",
        "producer": "duetime-producer",
    }
    for name, user in expected.items():
        env = services[name]["environment"]
        url = urlsplit(env["DUETIME_REDIS_URL"])
        assert (url.username, url.password) == (user, acl_password(user)), name
        assert (url.hostname, url.port) == ("redis", 6379)
        assert env["DUETIME_NAMESPACE"] == NS
    health = services["redis"]["healthcheck"]["test"]
    user = health[health.index("--user") + 1]
    assert health[health.index("--pass") + 1] == acl_password(user)
    assert "+ping" in acl_users()[user]


def test_grace_periods_outlast_the_shutdown_timeout():
    """Every supervisor waits longer than a replica's --shutdown-timeout before SIGKILL."""
    timeouts = dict(replica_shutdown_timeouts())
    services = compose()["services"]
    for where, timeout in timeouts.items():
        if where.startswith("compose service "):
            svc = services[where.removeprefix("compose service ")]
            assert seconds(svc["stop_grace_period"]) > timeout, where
        elif where.startswith("k8s "):
            grace = k8s("Deployment")["spec"]["template"]["spec"]
            assert grace["terminationGracePeriodSeconds"] > timeout, where
        elif where.startswith("duetime.service"):
            (stop,) = unit()["Service"]["TimeoutStopSec"]
            assert seconds(stop) > timeout, where
    assert len(timeouts) >= 5  # Dockerfile, 3 compose replicas, k8s, systemd (some share)


def test_k8s_deployment_pdb_configmap_secret():
    deployment, pdb = k8s("Deployment"), k8s("PodDisruptionBudget")
    configmap, secret = k8s("ConfigMap"), k8s("Secret")
    assert deployment["spec"]["replicas"] == 3
    assert pdb["spec"]["minAvailable"] == 2
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (deployment["spec"]["selector"], pdb["spec"]["selector"]):
        assert selector["matchLabels"].items() <= pod_labels.items()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    ref = env["DUETIME_REDIS_URL"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    ref = env["DUETIME_NAMESPACE"]["configMapKeyRef"]
    assert ref["name"] == configmap["metadata"]["name"] and ref["key"] in configmap["data"]
    assert configmap["data"][ref["key"]] == NS
    url = urlsplit(secret["stringData"]["DUETIME_REDIS_URL"])
    assert url.username == "duetime-replica"
    assert {"requests", "limits"} <= container["resources"].keys()
    # runs as the image's unprivileged user
    (user,) = dockerfile_instruction("USER")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert str(pod["securityContext"]["runAsUser"]) == user.split(":")[0]
    # no probe that only proves Python starts
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        command = container.get(probe, {}).get("exec", {}).get("command", [])
        assert not {"--help", "-h", "--version"} & set(command), probe


def test_k8s_probes_use_the_health_endpoints():
    """Liveness on /healthz, readiness on /readyz, both on the port the replica serves
    (--metrics-port, exposed as a named containerPort), bound where the kubelet reaches it."""
    (container,) = k8s("Deployment")["spec"]["template"]["spec"]["containers"]
    entry, _ = image_entrypoint_and_cmd()
    _, params = parse(entry + container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == params["metrics_port"]
    assert params["metrics_host"] not in ("127.0.0.1", "localhost", "::1")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports.get(get["port"], get["port"]) == params["metrics_port"], probe


def test_replicas_that_serve_metrics_bind_an_address_scrapers_reach():
    """--metrics-host defaults to 127.0.0.1; every deploy file that serves the endpoint
    (for an outside scraper or the kubelet) says where it binds."""
    serving = []
    for where, argv in invocations():
        name, params = parse(argv)
        if name == "run" and params["metrics_port"] is not None:
            serving.append(where)
            assert params["metrics_host"] == "0.0.0.0", where
    assert sum(w.startswith("compose service replica-") for w in serving) == 3
    assert any(w.startswith("k8s") for w in serving)
    assert any(w.startswith("duetime.service") for w in serving)
    assert "prometheus-client" in (ROOT / "pyproject.toml").read_text()


def test_systemd_unit():
    service = unit()["Service"]
    assert service["Restart"] == ["on-failure"]
    assert service["KillSignal"] == ["SIGTERM"]
    assert service["EnvironmentFile"] == ["/etc/duetime/env"]
    assert service.get("DynamicUser") == ["yes"] or "User" in service
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["ProtectSystem"] == ["strict"]
    assert "WantedBy" in unit()["Install"]


def test_systemd_analyze_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # verify wants ExecStart's binary to exist: point it at one that does
    text = UNIT.read_text().replace("/opt/duetime/venv/bin/duetime", shutil.which("true") or "")
    copy = tmp_path / "duetime.service"
    copy.write_text(text)
    out = subprocess.run([tool, "verify", str(copy)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and str(copy) not in out.stderr, out.stderr


def test_dockerfile():
    (base,) = dockerfile_instruction("FROM")
    assert base == "python:3.11-slim"
    assert "EXTRAS=redis,metrics" in dockerfile_instruction("ARG")  # the k8s probes need it
    assert any('pip install ".[${EXTRAS}]"' in r for r in dockerfile_instruction("RUN"))
    (user,) = dockerfile_instruction("USER")
    assert user.split(":")[0] not in ("0", "root")
    assert dockerfile_instruction("HEALTHCHECK") == ["NONE"]
    entry, _ = image_entrypoint_and_cmd()
    assert entry == ["duetime"]
    for copy in dockerfile_instruction("COPY"):  # the build context is the repository root
        *sources, _dest = [w for w in copy.split() if not w.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for copy in dockerfile_instruction("COPY"):
        *sources, _dest = copy.split()
        for source in sources:
            assert f"!{source}" in ignore, f"{source} is filtered out of the build context"


def test_every_duetime_command_line_is_a_valid_invocation():
    found = invocations()
    wheres = [w for w, _ in found]
    assert sum(w.startswith("compose service replica-") for w in wheres) == 3
    for source in ("Dockerfile", "compose service producer", "k8s container", "duetime.service"):
        assert any(w.startswith(source) for w in wheres), f"no duetime command in {source}"
    readme = sorted(argv[1] for w, argv in found if w == "deploy/README.md")
    assert readme == ["enqueue", "libraries", "run"]
    for where, argv in found:
        try:
            name, params = parse(argv)
        except click.ClickException as exc:
            pytest.fail(f"{where}: {shlex.join(argv)}: {exc.format_message()}")
        if name == "run":
            for module in params["imports"]:  # importable from the image's PYTHONPATH
                path = DEPLOY / "example" / (module.replace(".", "/") + ".py")
                assert path.is_file(), f"{where}: --import {module}: no {path}"
        if name == "enqueue":
            json.loads(params["kwargs_json"])


def test_the_parser_refuses_what_the_cli_refuses():
    """The check above can fail: unknown options and bad values are errors."""
    for argv in (
        ["duetime", "run", "--no-such-option"],
        ["duetime", "run", "--workers", "x"],
        ["duetime", "enqueue"],
        ["duetime", "no-such-command"],
    ):
        with pytest.raises(click.UsageError):
            parse(argv)


def test_every_duetime_env_var_named_in_deploy_is_read_by_the_cli():
    known = {SERVER_ENV_VAR}
    for command in main.commands.values():
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            known.update([envvar] if isinstance(envvar, str) else envvar or [])
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        for name in set(re.findall(r"\bDUETIME_[A-Z_]+\b", path.read_text())):
            assert name in known, f"{path.relative_to(ROOT)}: the CLI does not read ${name}"


# ---- redis.conf runs where it is -------------------------------------------------------

PATH_DIRECTIVES = ("dir", "aclfile", "include", "logfile", "pidfile", "unixsocket",
                   "dbfilename", "appenddirname", "tls-cert-file", "tls-key-file",
                   "tls-ca-cert-file")  # fmt: skip


def test_redis_conf_names_no_absolute_path():
    """An absolute ``dir`` is applied while the file is read (a chdir), before any
    command-line option, so a path that exists only in a container stops redis-server
    anywhere else: every path in the file is relative to its working directory."""
    found = {}
    for line in CONF.read_text().splitlines():
        words = line.split()
        if words and words[0] in PATH_DIRECTIVES:
            found[words[0]] = " ".join(words[1:]).strip('"')
    assert found["dir"] == "./" and found["aclfile"] == "users.acl"
    absolute = {k: v for k, v in found.items() if v.startswith(("/", "~"))}
    assert not absolute, f"redis.conf names absolute paths: {absolute}"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_from(argv: list[str], cwd: Path) -> Iterator[int]:
    """``argv`` (a redis-server command line) run in ``cwd`` on a free port, until it
    answers as duetime-monitor (with the placeholder password of users.acl)."""
    import redis

    binary = find_server()
    if binary is None:
        unavailable(f"no redis-server found: {INSTALL_HINT}")
    port = free_port()
    log = cwd / "redis.log"
    with open(log, "wb") as out:
        proc = spawn_tied(
            [binary, *argv[1:], "--port", str(port), "--logfile", ""],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    client = redis.Redis(
        port=port, username="duetime-monitor", password=acl_password("duetime-monitor")
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.poll() is None, f"redis-server exited: {log.read_text()[-2000:]}"
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.02)
        yield port
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def logs_in_as_every_user(port: int) -> None:
    """Every user of deploy/users.acl logs in with its password; the default user and a
    wrong password are refused."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    for user in USERS:
        r = redis.Redis(port=port, username=user, password=acl_password(user))
        assert r.time()  # logged in (each user may run TIME, none may run ACL WHOAMI)
        r.close()
    replica = redis.Redis(
        port=port, username="duetime-replica", password=acl_password("duetime-replica")
    )
    assert replica.info("persistence")["aof_enabled"] == 1  # the file's settings apply
    replica.close()
    for kwargs in ({}, {"username": "duetime-replica", "password": "wrong"}):
        r = redis.Redis(port=port, retry=Retry(NoBackoff(), 0), **kwargs)
        with pytest.raises((redis.AuthenticationError, redis.ResponseError)):
            r.ping()
        r.close()


@pytest.mark.redis
def test_redis_conf_runs_outside_a_container_as_the_docs_say(tmp_path):
    """deploy/README.md's recipe, from a temporary directory: users.acl copied into the
    working directory, ``redis-server path/to/deploy/redis.conf`` (the test only adds a
    free port). The data lands in the working directory."""
    guide = (DEPLOY / "README.md").read_text()
    section = guide[guide.index("### Redis outside a container") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert "mkdir -p /var/lib/duetime-redis && cp deploy/users.acl /var/lib/duetime-redis/" in lines
    assert "cd /var/lib/duetime-redis && redis-server /path/to/duetime/deploy/redis.conf" in lines
    shutil.copy(ACL, tmp_path / "users.acl")
    elsewhere = tmp_path / "not-the-data-dir"  # where the shell was: irrelevant once cd'd
    elsewhere.mkdir()
    with redis_from(["redis-server", str(CONF)], cwd=tmp_path) as port:
        logs_in_as_every_user(port)
        assert (tmp_path / "appendonlydir").is_dir()
    assert not list(elsewhere.iterdir())


@pytest.mark.redis
def test_the_compose_redis_command_runs_with_its_mounts(tmp_path):
    """docker-compose.yml's redis command on a real redis-server, each mount mapped to
    its source (the volume to a temporary directory), run from another directory like
    the image's: --dir, --aclfile and --bind override the file. Only the bind is changed
    afterwards (last wins), to loopback."""
    redis = compose()["services"]["redis"]
    data = tmp_path / "volume"
    data.mkdir()
    sources = {}
    for volume in redis["volumes"]:
        src, dst = volume.split(":")[:2]
        sources[dst] = data if src == "redis-data" else (DEPLOY / src).resolve()
    argv = [str(sources.get(word, word)) for word in redis["command"]]
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    with redis_from([*argv, "--bind", "127.0.0.1"], cwd=workdir) as port:
        logs_in_as_every_user(port)
    assert (data / "appendonlydir").is_dir() and not (workdir / "appendonlydir").exists()


# ---- a real redis-server from redis.conf + users.acl ------------------------------------

ADMIN = "test-admin"


def _bootstrap(acl: str) -> str:
    """EmbeddedRedis checks that its server is up with an unauthenticated PING + INFO, which
    the real file's disabled default user refuses; it starts with this copy, then the real
    file is loaded with ACL LOAD (the same parser, all or nothing)."""
    return re.sub(r"(?m)^user default .*$", "user default on nopass -@all +ping +info", acl)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[types.SimpleNamespace]:
    if find_server() is None:
        unavailable(f"no redis-server found: {INSTALL_HINT}")
    import redis

    tmp = tmp_path_factory.mktemp("deploy-redis")
    passwords = {user: f"test-{user}-pw" for user in (*USERS, ADMIN)}
    acl_text = ACL.read_text()
    for user in USERS:
        acl_text = acl_text.replace(f">{acl_password(user)}", f">{passwords[user]}")
    acl_text += f"user {ADMIN} on >{passwords[ADMIN]} ~* &* +@all\n"
    acl_path = tmp / "users.acl"
    acl_path.write_text(_bootstrap(acl_text))
    # the recommended file, minus where it listens and keeps its files (EmbeddedRedis
    # passes those) and with this copy of the ACL file
    conf = re.sub(r"(?m)^(bind|port|dir|logfile|daemonize)\s.*$", "", CONF.read_text())
    conf, n = re.subn(r"(?m)^aclfile\s.*$", f"aclfile {acl_path}", conf)
    assert n == 1
    conf_path = tmp / "redis.conf"
    conf_path.write_text(conf)
    # the settings under test are first set to their opposites, so only redis.conf (loaded
    # last, through --include) can be what makes them right
    server = EmbeddedRedis(
        data_dir=str(tmp / "data"),
        extra_args=[
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "allkeys-lru",
            "--save",
            "3600 1",
            "--hash-max-listpack-entries",
            "1",
            "--include",
            str(conf_path),
        ],
    )
    server.start()
    try:
        admin = redis.Redis(
            port=server.port, username=ADMIN, password=passwords[ADMIN], decode_responses=True
        )
        acl_path.write_text(acl_text)
        assert admin.execute_command("ACL", "LOAD") in ("OK", b"OK", True)
        # ACL LOAD closes the connections of the users it reloads, this one's too: the next
        # command must not meet that socket (redis-py before 6 does not retry by default)
        admin.connection_pool.disconnect()

        def url(user: str, password: str | None = None) -> str:
            return f"redis://{user}:{password or passwords[user]}@127.0.0.1:{server.port}/0"

        # the libraries, loaded by an administrator as deploy/README.md says
        from click.testing import CliRunner

        from scheduler.cli import main

        loaded = CliRunner().invoke(main, ["libraries", "load", "--redis", url(ADMIN)])
        assert loaded.exit_code == 0 and "23 loaded" in loaded.output, loaded.output

        yield types.SimpleNamespace(
            port=server.port,
            admin=admin,
            url=url,
            conf=conf_path,
            acl=acl_path,
            passwords=passwords,
        )
        admin.close()
    finally:
        server.stop()


def refusals(admin: Any) -> list[str]:
    """ACL LOG entries as 'user: object (reason)', then cleared. redis-py sends CLIENT
    SETINFO on connect (and ignores a refusal); Redis >= 7.2 logs it, 7.0 does not know
    the subcommand, and an ACL file naming it would not load on 7.0, so it is not granted."""
    entries = admin.execute_command("ACL", "LOG")
    admin.execute_command("ACL", "LOG", "RESET")
    out = []
    for entry in entries:
        e = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=True))
        e = {str(k): v.decode() if isinstance(v, bytes) else v for k, v in e.items()}
        if e.get("object") != "client|setinfo":
            out.append(f"{e.get('username')}: {e.get('object')} ({e.get('reason')})")
    return out


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


@pytest.mark.redis
def test_redis_conf_settings_take_effect(server):
    got = {
        k: server.admin.config_get(k)[k]
        for k in (
            "appendonly",
            "appendfsync",
            "maxmemory-policy",
            "save",
            "no-appendfsync-on-rewrite",
            "hash-max-listpack-entries",
            "hash-max-listpack-value",
            "zset-max-listpack-entries",
            "zset-max-listpack-value",
            "protected-mode",
            "aclfile",
        )
    }
    assert got == {
        "appendonly": "yes",
        "appendfsync": "always",
        "maxmemory-policy": "noeviction",
        "save": "",
        "no-appendfsync-on-rewrite": "no",
        "hash-max-listpack-entries": "512",
        "hash-max-listpack-value": "128",
        "zset-max-listpack-entries": "128",
        "zset-max-listpack-value": "64",
        "protected-mode": "yes",
        "aclfile": str(server.acl),
    }
    assert server.admin.info("persistence")["aof_enabled"] == 1


@pytest.mark.redis
def test_replica_user_runs_a_replica(server):
    """Every script and every direct command of a replica, under duetime-replica."""
    from scheduler.stores.redis import RedisStore

    refusals(server.admin)
    store = RedisStore(server.url("duetime-replica"), NS)
    try:
        assert store.check_server() == []  # INFO, the epoch key; AOF on: no warning
        woken: list[float | None] = []
        unsubscribe = store.subscribe(woken.append)
        # it pokes once when subscribed, then once per wake-up published by a script
        assert wait_for(lambda: len(woken) >= 1), refusals(server.admin)
        assert store.add(spec("d-ok", After(0))).outcome
        assert wait_for(lambda: len(woken) >= 2), refusals(server.admin)
        store.add(spec("d-fail", After(0)))
        store.add(spec("d-release", After(0)))
        batch = store.claim_due({"default": 10}, 30.0, "replica-a")
        claims = {c.job_id: c for c in batch.claims}
        assert set(claims) == {"d-ok", "d-fail", "d-release"}
        assert store.renew(list(claims.values()), 30.0) == [Commit.OK] * 3
        assert store.complete(claims["d-ok"], "done") == Commit.OK
        assert store.fail(claims["d-fail"], "boom", None) == Commit.OK
        assert store.release(claims["d-release"]) == Commit.OK
        assert store.get("d-ok").runs == 1
        assert store.get("d-fail").failures == 1
        kinds = [e.kind for e in store.events(50)]
        assert {"scheduled", "claimed", "succeeded", "failed"} <= set(kinds)
        assert store.next_id() >= 1
        assert "d-release" in {j.job_id for j in store.jobs()}
        unsubscribe()
    finally:
        store.close()
    assert refusals(server.admin) == []


@pytest.mark.redis
def test_without_the_libraries_a_user_sends_scripts(server):
    """A new version's libraries not loaded yet: the user may call them but not load them,
    so its client sends scripts (one refusal in ACL LOG), and every call works."""
    from scheduler.cli.libraries import ours
    from scheduler.stores.redis import RedisStore

    refusals(server.admin)
    server.admin.function_flush()
    store = RedisStore(server.url("duetime-replica"), NS)
    try:
        assert store.add(spec("s-ok", After(0))).outcome
        claims = {c.job_id: c for c in store.claim_due({"default": 100}, 30.0, "s").claims}
        assert store.complete(claims.pop("s-ok"), "done") == Commit.OK
        assert all(store.release(c) == Commit.OK for c in claims.values())  # others' jobs
        assert refusals(server.admin) == ["duetime-replica: function|load (command)"]
    finally:
        store.close()
        for code in ours().values():
            server.admin.function_load(code)


@pytest.mark.redis
def test_replica_engine_runs_the_example_task(server):
    """The compose demo's flow without Docker: a producer enqueues myapp.hello, an engine
    with the replica's credentials runs it (claim, heartbeat, complete, shutdown)."""
    import importlib.util

    from scheduler import Client, Scheduler
    from scheduler.stores.redis import RedisStore

    path = DEPLOY / "example" / "myapp" / "tasks.py"
    module_spec = importlib.util.spec_from_file_location("deploy_example_myapp_tasks", path)
    assert module_spec is not None and module_spec.loader is not None
    module_spec.loader.exec_module(importlib.util.module_from_spec(module_spec))  # registers

    refusals(server.admin)
    with (
        Scheduler(2, store=RedisStore(server.url("duetime-replica"), NS)),
        Client(server.url("duetime-producer"), namespace=NS) as client,
    ):
        client.enqueue("myapp.hello", kwargs={"name": "deploy"}, job_id="e2e-hello")
        assert wait_for(lambda: client.get("e2e-hello").runs == 1)
        info = client.get("e2e-hello")
        assert info.failures == 0 and "hello, deploy" in str(info.last_result)
    assert refusals(server.admin) == []


@pytest.mark.redis
def test_compose_replica_command_runs_under_its_acl(server, tmp_path):
    """replica-1's exact command line as a real process (the image's PYTHONPATH, the
    credentials of its compose environment): it runs a job, a Prometheus scrape (which
    reads the namespace from Redis) works under the same user, and SIGTERM stops it
    cleanly."""
    import importlib.util
    import os
    import signal
    import socket
    import sys
    import urllib.request

    from scheduler import Client

    replica = compose()["services"]["replica-1"]
    command = list(replica["command"])
    for option in ("--metrics-port", "--metrics-host"):  # the test's own, below
        if option in command:
            del command[command.index(option) : command.index(option) + 2]
    metrics_port = None
    if importlib.util.find_spec("prometheus_client") is not None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            metrics_port = sock.getsockname()[1]
        command += ["--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1"]
    user = urlsplit(replica["environment"]["DUETIME_REDIS_URL"]).username
    env = {
        **os.environ,
        "DUETIME_REDIS_URL": server.url(user),
        "DUETIME_NAMESPACE": replica["environment"]["DUETIME_NAMESPACE"],
        "PYTHONPATH": os.pathsep.join([str(DEPLOY / "example"), str(ROOT)]),
    }
    refusals(server.admin)
    with Client(server.url("duetime-producer"), namespace=NS) as client:
        client.enqueue("myapp.hello", kwargs={"name": "process"}, job_id="cli-hello")
        log = tmp_path / "replica.log"
        with open(log, "wb") as out:
            proc = spawn_tied(
                [sys.executable, "-m", "scheduler", *command],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            ran = wait_for(lambda: client.get("cli-hello").runs == 1, timeout=10)
            assert ran, log.read_text()
            if metrics_port is not None:
                url = f"http://127.0.0.1:{metrics_port}/metrics"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    assert "duetime_queue_depth" in reply.read().decode()  # the leader
                url = f"http://127.0.0.1:{metrics_port}/readyz"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    assert reply.status == 200
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "hello, process" in log.read_text()
    assert refusals(server.admin) == []


@pytest.mark.redis
def test_producer_user_enqueues_cancels_and_inspects(server):
    from scheduler import Client

    refusals(server.admin)
    with Client(server.url("duetime-producer"), namespace=NS) as client:
        job = client.enqueue("myapp.hello", kwargs={"name": "p"}, every=3600, job_id="p-1")
        assert client.pause(job) and client.resume(job)
        assert client.get(job).state == "scheduled"
        assert job in {j.job_id for j in client.jobs()}
        assert client.events(10)
        assert client.cancel(job) is True
        assert client.get(job).state == "cancelled"
        for state in ("scheduled", "running", "paused", "cancelled", "dead", "all", "live"):
            client.list_jobs(state)
        assert job in {i.job_id for i in client.list_jobs("cancelled").jobs}
        with pytest.raises(ValueError, match="no dead letter"):
            client.retry(job)
        assert client.delete(job) is True
        store: Any = client.store
        assert store.redis.xread({store.keys.events: "0-0"}, count=1)  # events --follow
    assert refusals(server.admin) == []


@pytest.mark.redis
def test_compose_producer_command_runs_under_its_acl(server):
    """The compose producer's exact command line, pointed at this server, then the
    inspection commands of the CLI (those that exist) with the same credentials."""
    producer = compose()["services"]["producer"]
    url = urlsplit(producer["environment"]["DUETIME_REDIS_URL"])
    env = {
        "DUETIME_NAMESPACE": producer["environment"]["DUETIME_NAMESPACE"],
        "DUETIME_REDIS_URL": server.url(url.username),
    }
    refusals(server.admin)
    runner = CliRunner()
    result = runner.invoke(main, producer["command"], env=env)
    assert result.exit_code == 0, result.output
    job_id = producer["command"][producer["command"].index("--id") + 1]
    assert result.output.strip().splitlines()[-1] == job_id
    for argv in (["ls"], ["ls", "--state", "dead"], ["stats"], ["events"], ["show", job_id]):
        if argv[0] in main.commands:
            result = runner.invoke(main, argv, env=env)
            assert result.exit_code == 0, (argv, result.output)
    assert refusals(server.admin) == []


@pytest.mark.redis
def test_monitor_user_reads_and_cannot_write(server):
    """The README's redis-cli monitor commands work as duetime-monitor; writes do not."""
    import redis

    from scheduler import Client

    with Client(server.url("duetime-producer"), namespace=NS) as producer:
        producer.enqueue("myapp.hello", every=3600, job_id="hourly-report")
    readme = (ROOT / "README.md").read_text()
    heading = re.search(r"(?m)^#+ Monitor with redis-cli$", readme)
    assert heading is not None, "README.md has no 'Monitor with redis-cli' section"
    section = readme[heading.start() :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    refusals(server.admin)
    r = redis.Redis.from_url(server.url("duetime-monitor"), decode_responses=True)
    for line in block.group(1).splitlines():
        argv = shlex.split(line.split("|")[0].split("#")[0].replace("{prod}", "{" + NS + "}"))
        assert argv and argv[0] == "redis-cli"
        if argv[1] == "--scan":  # redis-cli's own option: SCAN underneath
            r.execute_command("SCAN", 0, "MATCH", argv[argv.index("--pattern") + 1])
        else:
            r.execute_command(*argv[1:])
    with Client(server.url("duetime-monitor"), namespace=NS) as monitor:
        assert monitor.get("hourly-report").state == "scheduled"
        for state in ("scheduled", "running", "paused", "failed", "dead", "all"):
            monitor.list_jobs(state)  # ls --state reads only
        assert refusals(server.admin) == []
        with pytest.raises(redis.exceptions.NoPermissionError):
            monitor.enqueue("myapp.hello", job_id="not-allowed")
        with pytest.raises(redis.exceptions.NoPermissionError):
            monitor.cancel("hourly-report")
    for command in (
        ("SET", f"duetime:{{{NS}}}:x", "1"),
        ("DEL", f"duetime:{{{NS}}}:lease"),
        ("PUBLISH", f"duetime:{{{NS}}}:wake", "0"),
        ("INFO",),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.execute_command(*command)
    r.close()
    refusals(server.admin)


FORBIDDEN = [
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"),
    ("CONFIG", "GET", "*"),
    ("KEYS", "*"),
    ("KEYS", "duetime:*"),
    ("SHUTDOWN", "NOSAVE"),
    ("GET", "other-app:secret"),
    ("SET", "other-app:secret", "x"),
    ("GET", "duetime:{other}:epoch"),
    ("DEL", "duetime:{other}:lease"),  # another namespace
    ("PUBLISH", "other-app:events", "x"),
    ("PUBLISH", "duetime:{other}:wake", "0"),
    ("EVAL", "return 1", "0"),
    ("SCRIPT", "FLUSH"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() return 1 end)"),
    ("FUNCTION", "DELETE", "x"),
    ("ACL", "LIST"),
    ("ACL", "SETUSER", "x", "on"),
    ("CLIENT", "LIST"),
    ("CLIENT", "KILL", "127.0.0.1:1"),
    ("MONITOR",),
    ("SELECT", "1"),
    ("RENAME", "duetime:{demo}:seq", "x"),
    ("SWAPDB", "0", "1"),
    ("BGSAVE",),
    ("BGREWRITEAOF",),
    ("REPLICAOF", "127.0.0.1", "1"),
]


@pytest.mark.redis
@pytest.mark.parametrize("user", ["duetime-replica", "duetime-producer"])
def test_what_the_users_may_not_do(server, user):
    import redis

    r = redis.Redis.from_url(server.url(user), decode_responses=True)
    try:
        for command in FORBIDDEN:
            with pytest.raises(redis.exceptions.NoPermissionError):
                r.execute_command(*command)
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.execute_command("SUBSCRIBE", "other-app:events")
        # a script runs with its caller's rights: loading one is allowed, what it does is not
        for body in ("return redis.call('FLUSHALL')", "return redis.call('GET', 'other')"):
            sha = r.script_load(body)
            refused = "The user executing the script can't"  # NOPERM, reported by the script
            with pytest.raises(redis.exceptions.ResponseError, match=refused):
                r.evalsha(sha, 0)
        assert r.ping()
    finally:
        r.close()
    assert server.admin.dbsize() > 0  # nothing above emptied anything
    refusals(server.admin)


@pytest.mark.redis
def test_what_acl_cannot_separate(server):
    """ACL grants commands, keys and channels, not scripts: duetime-producer may not
    SUBSCRIBE (the one thing only a replica does), but it can run claim.lua, because every
    command that script calls is one enqueue or cancel also call. users.acl gives both users
    the same script-side rights on purpose: a narrower producer would not be prevented
    from claiming, it would fail in the middle of a script (scripts do not roll back).
    And SCAN, which listing jobs needs, shows the names (not the values) of all keys."""
    import redis

    from scheduler.stores.redis import RedisStore

    r = redis.Redis.from_url(server.url("duetime-producer"), decode_responses=True)
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.execute_command("SUBSCRIBE", f"duetime:{{{NS}}}:wake")
    # SCAN (which listing jobs needs) has no key argument: it shows every key's name
    server.admin.set("other-app:payroll", "secret")
    assert list(r.scan_iter(match="other-app:*")) == ["other-app:payroll"]
    with pytest.raises(redis.exceptions.NoPermissionError):
        r.get("other-app:payroll")  # ...but not its value
    r.close()
    store = RedisStore(server.url("duetime-producer"), NS)
    try:
        store.add(spec("claimed-by-a-producer", After(0)))
        claims = store.claim_due({"default": 100}, 30.0, "not-a-replica").claims
        assert "claimed-by-a-producer" in {c.job_id for c in claims}
        for claim in claims:
            store.release(claim)
    finally:
        store.close()
    refusals(server.admin)


@pytest.mark.redis
def test_default_user_and_wrong_passwords_are_refused_clearly(server):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from scheduler import Client
    from scheduler.stores.redis import RedisStore, StoreUnavailableError

    for kwargs in ({}, {"username": "default", "password": "anything"}):
        # no retries: redis.Redis() retries a refused login for ~4 s by default
        r = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0), **kwargs)
        with pytest.raises(redis.exceptions.AuthenticationError):
            r.ping()
        r.close()
    wrong = "not-the-password-4711"
    with (
        pytest.raises(StoreUnavailableError) as caught,
        Client(server.url("duetime-producer", wrong), namespace=NS) as client,
    ):
        client.enqueue("myapp.hello", job_id="never")
    message = str(caught.value)
    assert "invalid username-password pair" in message and wrong not in message
    assert "duetime-producer:***@" in message
    with pytest.raises(StoreUnavailableError, match="invalid username-password pair"):
        RedisStore(server.url("duetime-replica", wrong), NS).check_server()  # `run`: exit 3
    result = CliRunner().invoke(
        main,
        ["enqueue", "myapp.hello"],
        env={"DUETIME_REDIS_URL": server.url("duetime-producer", wrong), "DUETIME_NAMESPACE": NS},
    )
    assert result.exit_code == 3
    assert "invalid username-password pair" in result.output and wrong not in result.output
    refusals(server.admin)


@pytest.mark.redis
def test_monitor_user_serves_the_web_consoles_read_pages(server):
    """``duetime web`` as duetime-monitor: every read page renders and nothing it reads is
    refused (ACL LOG stays empty); an action is refused by Redis and shown in one line."""
    pytest.importorskip("starlette", reason="the web extra is not installed")
    import time

    from starlette.testclient import TestClient

    from scheduler import Client
    from scheduler.stores.redis import open_store
    from scheduler.stores.redis.protocol import urls
    from scheduler.stores.redis.reading import console_history
    from scheduler.web import Console, create_app
    from scheduler.web.auth import Auth

    with Client(server.url("duetime-producer"), namespace=NS) as producer:
        producer.enqueue("myapp.hello", every=3600, job_id="hourly-report")
    replica = open_store(server.url("duetime-replica"), NS)
    now = time.time()
    info = {"version": "0", "host": "h", "pid": 1, "started": now, "heartbeat": now}
    console_history.record(
        replica, "r1", int(now // 60), {"claims": 1}, {"lag_p50": 1.0}, info, 0.0
    )
    replica.close()
    refusals(server.admin)
    store = open_store(server.url("duetime-monitor"), NS)
    store.url = urls.safe(server.url("duetime-monitor"))
    console = Console({NS: store}, url=store.url, auth=Auth(actions=True, token="t"))
    web = TestClient(create_app(console))
    for page in ("", "jobs", "job/hourly-report", "running", "failed", "recurring", "events"):
        assert web.get(f"/ns/{NS}/{page}").status_code == 200, page
    assert web.get(f"/api/ns/{NS}/overview").json()["replicas"][0]["id"] == "r1"
    assert refusals(server.admin) == []
    r = web.post(
        f"/api/ns/{NS}/act/pause",
        data={"job": "hourly-report"},
        headers={"Authorization": "Bearer t"},
    )
    assert r.status_code == 503 and "may not do this" in r.json()["error"]
    store.close()
    refusals(server.admin)
