"""The Lua scripts' sources: read once from lua/, their units inlined, and registered
with a redis-py client as ``Script`` objects (their SHA1 and text). Sending them, and
loading one again after a NOSCRIPT (a Redis restart, SCRIPT FLUSH), is protocol/gateway.py's.

A script (``lua/NAME.lua``) names the units it needs, one ``--@include UNIT`` line each;
units live in ``lua/include/UNIT.lua`` and may include units themselves. ``source(name)``
is the script's shebang line, then every unit it needs, each once, a unit after the units
it includes, then the rest of the script. A missing unit or an include cycle is an
``IncludeError``.
"""

from __future__ import annotations

import pathlib
import re
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
    "reconcile",
    "restore",
    "purge",
    "quarantine",
    "retry",
    "delete",
    "fenced",
    "limit",
    "rule",
)

# Scripts that write the caller's own keys, not a namespace's (workers.effects): their keys
# come as KEYS (KEYS[1] the caller's key), not built from a prefix, and they include no
# unit (core's prefix, layout check and clock are a namespace's). lua/README.md says so.
CALLER_KEYS = frozenset({"fenced"})

INCLUDE_DIR = "include"
_INCLUDE = re.compile(r"^--@include[ \t]+(\S+)[ \t]*$", re.MULTILINE)
_UNIT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class IncludeError(ValueError):
    """A Lua script includes a unit that does not exist, or units include each other."""


def lua_dir() -> pathlib.Path:
    """The packaged copy (scheduler/_lua in a wheel) first, the checkout's lua/ second."""
    here = pathlib.Path(__file__).resolve().parents[3]  # scheduler/
    for candidate in (here / "_lua", here.parent / "lua"):
        if (candidate / "claim.lua").is_file():
            return candidate
    raise FileNotFoundError(
        "duetime's Lua scripts are missing (looked in scheduler/_lua and "
        "lua/); reinstall the package"
    )


def includes(text: str) -> list[str]:
    """The units a Lua text includes directly (its ``--@include UNIT`` lines), in order."""
    return _INCLUDE.findall(text)


@cache
def _unit_text(d: pathlib.Path, name: str) -> str | None:
    path = d / INCLUDE_DIR / f"{name}.lua"
    return path.read_text() if _UNIT_NAME.match(name) and path.is_file() else None


def unit_order(text: str, where: str, d: pathlib.Path | None = None) -> list[str]:
    """Every unit ``text`` (named ``where`` in errors) needs, directly or through other
    units, each once: depth first, in include order, a unit after the units it includes."""
    d = lua_dir() if d is None else d
    order: list[str] = []

    def visit(name: str, chain: list[str]) -> None:
        if name in chain:
            cycle = " -> ".join([*chain[chain.index(name) :], name])
            raise IncludeError(f"include cycle in {where}: {cycle}")
        if name in order:
            return
        unit = _unit_text(d, name)
        if unit is None:
            by = f"{INCLUDE_DIR}/{chain[-1]}.lua" if chain else where
            raise IncludeError(
                f"{by} includes {name!r}, but there is no {d / INCLUDE_DIR}/{name}.lua"
            )
        if unit.startswith("#!"):
            raise IncludeError(f"{INCLUDE_DIR}/{name}.lua is a unit: it must not start with #!")
        for dep in includes(unit):
            visit(dep, [*chain, name])
        order.append(name)

    for name in includes(text):
        visit(name, [])
    return order


def assemble(text: str, where: str, d: pathlib.Path | None = None) -> str:
    """``text`` with the units it needs inlined after its first line (the shebang)."""
    d = lua_dir() if d is None else d
    first, _, rest = text.partition("\n")
    units = [_unit_text(d, name) or "" for name in unit_order(text, where, d)]
    return "\n".join([first, *units, rest])


@cache
def source(name: str) -> str:
    """The full source of one script: its shebang line, its units, then its own text."""
    text = (lua_dir() / f"{name}.lua").read_text()
    if not text.startswith("#!lua"):
        raise ValueError(f"{name}.lua must start with a #!lua shebang")
    return assemble(text, f"{name}.lua")


def register(client: Any) -> dict[str, Any]:
    """redis-py Script objects for every script, keyed by name."""
    return {name: client.register_script(source(name)) for name in SCRIPTS}
