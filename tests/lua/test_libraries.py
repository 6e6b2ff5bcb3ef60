"""The library form of the scripts (protocol/scripts.py, lua/README.md *Two forms*): what
runs once when a library is loaded and what runs on every call, split by the units'
``--@call`` blocks, and the rule that keeps a call from seeing the one before it (no
Redis: text only; the libraries run on every real-server and fakeredis test)."""

from __future__ import annotations

import re

import pytest

from scheduler.stores.redis.protocol import scripts as lua
from tests.lua.luatext import UNIT_FILES, split, top_level_names

_COMMENT = re.compile(r"--\[(=*)\[.*?\]\1\]|--[^\n]*", re.DOTALL)


def call_blocks(text: str) -> str:
    return "".join(m.group(1) for m in lua._CALL_BLOCK.finditer(text))


def filled_by_functions(text: str) -> set[str]:
    """The unit's top-level names that a statement other than their declaration assigns
    or fills (``x = ...``, ``x[k] = ...``, ``x.f = ...``; ``function x.f()`` defines)."""
    code = _COMMENT.sub("", lua._CALL_BLOCK.sub("", text))
    out = set()
    for name in top_level_names(code):
        n = re.escape(name)
        target = re.compile(rf"(?<![\w.]){n}\s*(?:\[[^\]\n]*\]|\.\w+)?\s*(?:,[\w\s.,]*)?=(?!=)")
        for line in code.splitlines():
            for m in target.finditer(line):
                before = line[: m.start()]  # a statement starts there; not a declaration
                if re.fullmatch(r"(?:.*(?:\bthen|\bdo|\belse|;|\)))?\s*(?:[\w.]+\s*,\s*)*", before):
                    out.add(name)
    return out


@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: p.name)
def test_what_a_function_fills_is_made_anew_on_every_call(path):
    """A library's units are defined once and called many times: a top-level table or
    value that a function assigns or fills must be (re)made in a ``--@call`` block, or a
    call would see what the call before it left there."""
    _, _, body = split(path)
    per_call = set(re.findall(r"[A-Za-z_]\w*", call_blocks(body)))
    left = sorted(filled_by_functions(body) - per_call)
    assert not left, (
        f"{path.name}: {left} are filled by its functions but not made in a --@call block "
        "(lua/README.md, Two forms)"
    )


def test_the_fill_rule_can_fail():
    text = "local SEEN = {}\nlocal function f(k) SEEN[k] = true end\nlocal N = 1\n"
    assert filled_by_functions(text) == {"SEEN"}
    assert filled_by_functions("local A, B = 1, 2\nlocal function g() A, B = 3, 4 end\n") == {
        "A",
        "B",
    }
    assert filled_by_functions("local T = {}\nfunction T.f() return 1 end\n") == set()
    assert filled_by_functions("local x = 1\nlocal function h(y) return y == x end\n") == set()
    assert filled_by_functions("local k = 1\nlocal t = {a = k, b = 2}\n") == set()
    assert filled_by_functions("local H\nlocal function w() if not H then H = 1 end end\n") == {"H"}


def test_a_call_block_is_declared_once_and_run_per_call():
    once, per_call = lua.split_calls(
        "local A = 1\n--@call\nlocal P, Q = ARGV[1], {}\nif P == '' then return 1 end\n--@end\n"
        "local function f() return P end\n"
    )
    assert once == "local A = 1\nlocal P, Q\nlocal function f() return P end\n"
    assert per_call == "P, Q = ARGV[1], {}\nif P == '' then return 1 end\n"


def test_an_unclosed_call_block_is_a_clear_error():
    with pytest.raises(lua.IncludeError, match="--@call block without its --@end"):
        lua.split_calls("--@call\nlocal P = 1\n")


@pytest.mark.parametrize("name", lua.SCRIPTS)
def test_each_library_names_one_function_of_its_version_with_the_scripts_flags(name):
    fn, code = lua.library(name)
    first = lua.source(name).split("\n", 1)[0]
    assert re.fullmatch(rf"duetime_{name}_[0-9a-f]{{16}}", fn)
    assert lua.LIBRARY_NAME.match(fn)  # what `duetime libraries ls | prune` take as ours
    assert code.startswith(f"#!lua name={fn}\n")
    assert f"function_name = '{fn}'" in code and code.count("register_function") == 1
    assert ("flags = {'allow-oom'}" in code) == ("allow-oom" in first)
    assert lua.sendable(name).function == fn and lua.sendable(name).script == lua.source(name)
