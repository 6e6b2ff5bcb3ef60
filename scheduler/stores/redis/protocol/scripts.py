"""The Lua scripts' sources: read once from lua/, their units inlined, each in two forms:
a script (``source``: run by its SHA1) and a Redis Functions library (``library``: its
function called, Redis 7 and later), as one ``gateway.Lua`` (``sendable``). Sending
them, and loading one again when the server lacks it, is protocol/gateway.py's.

A script (``lua/NAME.lua``) names the units it needs, one ``--@include UNIT`` line each;
units live in ``lua/include/UNIT.lua`` and may include units themselves. ``source(name)``
is the script's shebang line, then every unit it needs, each once, a unit after the units
it includes, then the rest of the script. A missing unit or an include cycle is an
``IncludeError``.

The library runs the same text, split by when it runs: the units' definitions once, when
the library is loaded, and, on every call, the script's own text and what the units mark
as per call (a ``--@call`` ... ``--@end`` block: the call's arguments, caches, tallies,
checks that may answer an error; lua/README.md). A ``local`` statement in such a block is
declared where it stands and assigned per call, so the functions after it see each call's
value. Run as a script, every line runs on each call and the markers are comments: the
two forms behave alike, the library without rebuilding the units' functions per call.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
from functools import cache

from scheduler.stores.redis.protocol.gateway import Lua

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
    "progress",
)

# Scripts that write the caller's own keys, not a namespace's (workers.effects): their keys
# come as KEYS (KEYS[1] the caller's key), not built from a prefix, and they include no
# unit (core's prefix, layout check and clock are a namespace's). lua/README.md says so.
CALLER_KEYS = frozenset({"fenced"})

INCLUDE_DIR = "include"
_INCLUDE = re.compile(r"^--@include[ \t]+(\S+)[ \t]*$", re.MULTILINE)
_UNIT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_CALL_BLOCK = re.compile(r"^--@call\n(.*?)^--@end\n", re.MULTILINE | re.DOTALL)
_LOCAL = re.compile(r"^local ((?:[A-Za-z_]\w*)(?:, *[A-Za-z_]\w*)*) = ", re.MULTILINE)
_FLAGS = re.compile(r"^#!lua(?: flags=([a-z,-]+))?$")


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


def split_calls(text: str) -> tuple[str, str]:
    """``text`` (units) as what runs once (its ``--@call`` blocks left out, each ``local``
    of one declared in its place) and what runs per call (those blocks' statements, in
    order, a ``local`` one as an assignment)."""
    per_call: list[str] = []

    def hoist(block: re.Match[str]) -> str:
        body = block.group(1)
        per_call.append(_LOCAL.sub(lambda m: f"{m.group(1)} = ", body))
        return "".join(f"local {m.group(1)}\n" for m in _LOCAL.finditer(body))

    once = _CALL_BLOCK.sub(hoist, text)
    if "--@call" in once or "--@end" in once:
        raise IncludeError("a --@call block without its --@end, or an --@end without one")
    return once, "".join(per_call)


# The names library_of gives: duetime_<script>_<16 hex digits of the script's SHA1>
LIBRARY_NAME = re.compile(r"^duetime_[a-z][a-z0-9_]*_[0-9a-f]{16}$")


@cache
def library(name: str) -> tuple[str, str]:
    """Script ``name`` as a Redis Functions library: its function's name (``duetime_<name>_``
    and 16 hex digits of the script's SHA1: a changed script is another function, so
    replicas of two versions never run each other's) and the library's code (``FUNCTION
    LOAD``; the function takes the script's KEYS and ARGV and declares its shebang's flags)."""
    return library_of(name, lua_dir())


def library_of(name: str, d: pathlib.Path) -> tuple[str, str]:
    """``library(name)`` built from the scripts in directory ``d`` (a benchmark's cut copies)."""
    text = (d / f"{name}.lua").read_text()
    first, _, rest = text.partition("\n")
    flags = _FLAGS.match(first)
    if flags is None:
        raise ValueError(f"{name}.lua must start with a #!lua shebang (flags=... optional)")
    units = "\n".join(_unit_text(d, u) or "" for u in unit_order(text, f"{name}.lua", d))
    once, per_call = split_calls(units)
    whole = assemble(text, f"{name}.lua", d)
    fn = f"duetime_{name}_{hashlib.sha1(whole.encode()).hexdigest()[:16]}"
    declared = ", ".join(f"'{f}'" for f in (flags.group(1) or "").split(",") if f)
    code = "\n".join(
        [
            f"#!lua name={fn}",
            "local KEYS, ARGV",
            once,
            f"redis.register_function{{function_name = '{fn}', flags = {{{declared}}},",
            "  callback = function(keys, args)",
            "KEYS, ARGV = keys, args",
            per_call,
            rest,
            "end}",
        ]
    )
    return fn, code


@cache
def sendable(name: str) -> Lua:
    """Script ``name`` as the gateway sends it: its source and SHA1, and its library (where
    the server has Redis Functions)."""
    fn, code = library(name)
    return Lua(source(name), function=fn, library=code)
