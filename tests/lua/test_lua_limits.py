"""Lua 5.1's compile-time limits, held by every assembled script (units inlined).

Redis runs Lua 5.1: a function may have at most 200 active locals (``LUAI_MAXVARS``)
and 60 upvalues (``LUAI_MAXUPVALUES``); past either, the script does not load at all
("main function has more than 200 local variables"), so every call of it fails. The
units are inlined into one chunk, so the main chunk's locals grow with every unit a
script includes. The static counts here are upper bounds (every local of the main chunk
at any depth; every main-chunk local a function's body names); the last test shows the
limits are the real server's.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.lua.luatext import SCRIPT_FILES, closure_code, main_chunk_locals, upvalues

MAX_LOCALS = 200  # Lua 5.1's LUAI_MAXVARS
MAX_UPVALUES = 60  # Lua 5.1's LUAI_MAXUPVALUES


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.stem)
def test_the_main_chunk_stays_under_luas_local_limit(path: pathlib.Path) -> None:
    names = main_chunk_locals(closure_code(path))
    assert len(names) < MAX_LOCALS, (
        f"{path.name} declares {len(names)} locals in its main chunk (units inlined); Lua "
        f"5.1 refuses to load a function with more than {MAX_LOCALS}: fold a unit's helpers "
        "into a table of functions, or include fewer units"
    )


@pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.stem)
def test_each_function_stays_under_luas_upvalue_limit(path: pathlib.Path) -> None:
    worst = max(upvalues(closure_code(path)).items(), key=lambda kv: len(kv[1]))
    assert len(worst[1]) <= MAX_UPVALUES, (
        f"{path.name}: function {worst[0]} names {len(worst[1])} locals of the main chunk; "
        f"Lua 5.1 allows {MAX_UPVALUES} upvalues per function"
    )


def test_the_counts_see_blocks_loops_and_functions() -> None:
    text = (
        "local a, b = 1, 2\nlocal function f() local inner = a return b end\n"
        "if a then local c = 3 end\nfor i, v in pairs({}) do local d end\n"
        "do local e end\nlocal g = function() return f end\n"
    )
    assert main_chunk_locals(text) == ["a", "b", "f", "c", "i", "v", "d", "e", "g"]
    assert upvalues(text) == {"f": {"a", "b"}, "line 6": {"f"}}


def _chunk(locals_: int) -> str:
    return "\n".join(f"local v{i} = {i}" for i in range(locals_)) + "\nreturn 1"


def _function_naming(upvalues_: int) -> str:
    names = [f"u{i}" for i in range(upvalues_)]
    body = " + ".join(names)
    return "\n".join(f"local {n} = 1" for n in names) + f"\nreturn (function() return {body} end)()"


@pytest.mark.redis
def test_the_limits_are_the_servers(redis_client) -> None:  # type: ignore[no-untyped-def]
    import redis

    assert redis_client.eval(_chunk(MAX_LOCALS - 1), 0) == 1
    with pytest.raises(redis.ResponseError, match="more than 200 local variables"):
        redis_client.eval(_chunk(MAX_LOCALS + 1), 0)
    assert redis_client.eval(_function_naming(MAX_UPVALUES), 0) == MAX_UPVALUES
    with pytest.raises(redis.ResponseError, match="upvalues"):
        redis_client.eval(_function_naming(MAX_UPVALUES + 1), 0)
