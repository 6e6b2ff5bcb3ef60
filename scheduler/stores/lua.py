"""Load the Lua scripts once: shebang + lib.lua + body, registered with redis-py (which
re-loads a script on NOSCRIPT, e.g. after a Redis restart or SCRIPT FLUSH)."""
from __future__ import annotations

import pathlib
from functools import cache
from typing import Any

SCRIPTS = ("add", "claim", "renew", "complete", "complete_many", "fail", "release", "cancel",
           "pause", "resume", "trigger", "plan", "backfill")


def lua_dir() -> pathlib.Path:
    """The packaged copy (scheduler/_lua in a wheel) first, the checkout's lua/ second."""
    here = pathlib.Path(__file__).resolve().parent.parent
    for candidate in (here / "_lua", here.parent / "lua"):
        if (candidate / "lib.lua").is_file():
            return candidate
    raise FileNotFoundError("duetime's Lua scripts are missing (looked in scheduler/_lua and "
                            "lua/); reinstall the package")


@cache
def source(name: str) -> str:
    """The full source of one script: its shebang line, then lib.lua, then its body."""
    d = lua_dir()
    text = (d / f"{name}.lua").read_text()
    shebang, _, body = text.partition("\n")
    if not shebang.startswith("#!lua"):
        raise ValueError(f"{name}.lua must start with a #!lua shebang")
    return f"{shebang}\n{(d / 'lib.lua').read_text()}\n{body}"


def register(client: Any) -> dict[str, Any]:
    """redis-py Script objects for every script, keyed by name."""
    return {name: client.register_script(source(name)) for name in SCRIPTS}
