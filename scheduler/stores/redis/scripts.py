"""Load the Lua scripts once: shebang + lib.lua + body, registered with redis-py (which
re-loads a script on NOSCRIPT, e.g. after a Redis restart or SCRIPT FLUSH)."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from functools import cache
from typing import Any

SCRIPTS = (
    "add",
    "claim",
    "renew",
    "complete",
    "complete_many",
    "fail",
    "release",
    "cancel",
    "pause",
    "resume",
    "trigger",
    "plan",
    "backfill",
)


def lua_dir() -> pathlib.Path:
    """The packaged copy (scheduler/_lua in a wheel) first, the checkout's lua/ second."""
    here = pathlib.Path(__file__).resolve().parents[2]  # scheduler/
    for candidate in (here / "_lua", here.parent / "lua"):
        if (candidate / "lib.lua").is_file():
            return candidate
    raise FileNotFoundError(
        "duetime's Lua scripts are missing (looked in scheduler/_lua and "
        "lua/); reinstall the package"
    )


@cache
def source(name: str) -> str:
    """The full source of one script: its shebang line, then lib.lua, then its body."""
    d = lua_dir()
    text = (d / f"{name}.lua").read_text()
    shebang, _, body = text.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"{name}.lua must start with a #!lua shebang")
    return f"{shebang}\n{(d / 'lib.lua').read_text()}\n{body}"


def pipelined(
    client: Any,
    script: Any,
    keys: Sequence[str],
    argvs: Sequence[Sequence[Any]],
    wait_replicas: int = 0,
    wait_timeout_ms: int = 0,
) -> list[Any]:
    """Run ``script`` once per argument list in one pipeline (then ``WAIT``, if
    ``wait_replicas``); the replies. A cluster pipeline refuses redis-py's Script objects,
    so there the calls go as plain EVALSHA, after the script is loaded on every primary
    (again after a NOSCRIPT, then the batch is sent again: callers send idempotent
    scripts, e.g. add.lua, an upsert)."""
    import redis
    from redis.cluster import RedisCluster

    cluster = isinstance(client, RedisCluster)
    for attempt in (0, 1):
        with client.pipeline(transaction=False) as pipe:
            for argv in argvs:
                if cluster:
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *argv)
                else:
                    script(keys=keys, args=argv, client=pipe)
            if wait_replicas:  # WAIT covers every write sent before it on this connection
                pipe.execute_command("WAIT", wait_replicas, wait_timeout_ms)
            try:
                return list(pipe.execute())
            except redis.exceptions.NoScriptError:
                if not cluster or attempt:
                    raise
                client.script_load(script.script)
    raise AssertionError("unreachable")


def register(client: Any) -> dict[str, Any]:
    """redis-py Script objects for every script, keyed by name."""
    return {name: client.register_script(source(name)) for name in SCRIPTS}
