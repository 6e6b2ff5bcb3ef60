"""Static checks of lua/*.lua (no Redis): every script's header documents its guarantee,
KEYS, ARGV and return values, and the header agrees with the body.

A header is the comment block right after the ``#!lua`` shebang; the body is the rest. The
assembled source (``scripts.source``) is the shebang, the units of lua/include/ the script
includes, then the header and body: what a script can produce is checked on its code.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from scheduler.stores.redis import keys as keys_mod
from scheduler.stores.redis import scripts as lua

LUA = pathlib.Path(__file__).resolve().parents[2] / "lua"
CORE = (LUA / "include" / "core.lua").read_text()  # the only unit that reads ARGV
SCRIPT_FILES = sorted(LUA.glob("*.lua"))
LUA_FILES = sorted(LUA.rglob("*.lua"))  # scripts and units


def code_of(path: pathlib.Path) -> str:
    """The code a script runs: the units it includes, then its body (no header)."""
    units = lua.unit_order(path.read_text(), path.name)
    return "\n".join([*((LUA / "include" / f"{u}.lua").read_text() for u in units), split(path)[2]])


ARGV_NUM = re.compile(r"ARGV\[(\d+)\]")  # ARGV[3]
ARGV_DYNAMIC = re.compile(r"ARGV\[(?!\d+\])[^\]]+\]")  # ARGV[i], ARGV[i + 1]
ARGV_DOC = re.compile(r"ARGV\[(\d+)(\.\.)?\]")  # ARGV[3] or ARGV[6..]
QUOTED_WORD = re.compile(r'"([a-z_]+)"')  # "ok", "lease_lost", ...
ALTERNATIVES = re.compile(r"\b[a-z_]+(?: \| [a-z_]+)+\b")  # created | replaced | unchanged


def split(path: pathlib.Path) -> tuple[str, list[str], str]:
    """(shebang, header comment lines without the '-- ', body)."""
    shebang, _, rest = path.read_text().partition("\n")
    lines = rest.split("\n")
    n = 0
    while n < len(lines) and lines[n].startswith("--"):
        n += 1
    header = [re.sub(r"^-- ?", "", line) for line in lines[:n]]
    return shebang, header, "\n".join(lines[n:])


def returns_block(header: list[str]) -> str:
    """The ``Returns:`` line and its indented continuation lines."""
    for i, line in enumerate(header):
        if line.startswith("Returns:"):
            block = [line]
            block += [x for x in header[i + 1 :] if x.startswith(" ")]
            return "\n".join(block)
    raise AssertionError("no Returns: line")


def string_literal(word: str, text: str) -> bool:
    return f"'{word}'" in text or f'"{word}"' in text


scripts = pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.stem)


def test_there_are_scripts():
    assert len(SCRIPT_FILES) >= 9


def test_the_loader_registers_exactly_the_script_files():
    assert set(lua.SCRIPTS) == {p.stem for p in SCRIPT_FILES}
    assert len(set(lua.SCRIPTS)) == len(lua.SCRIPTS)


@scripts
def test_starts_with_a_lua_shebang(path):
    assert path.read_text().startswith("#!lua")


@scripts
def test_header_states_the_guarantee_keys_argv_and_returns(path):
    _, header, _ = split(path)
    assert header, f"{path.name} has no header comment"
    first = header[0]
    assert first.startswith(f"{path.name}: "), f"first header line must be '{path.name}: ...'"
    paragraph = " ".join(header[: header.index("") if "" in header else len(header)])
    assert len(paragraph.split()) >= 6 and "." in paragraph, "no guarantee sentence"
    text = "\n".join(header)
    assert any(line.startswith("KEYS[1]: any key of the namespace") for line in header)
    assert "ARGV[1]" in text and "ARGV[2]" in text
    assert any(line.startswith("Returns:") for line in header)


@scripts
def test_keys_only_route_the_call(path):
    """KEYS[1] is passed for Redis Cluster's routing only (RedisStore._call); every key a
    script touches is built from the prefix ARGV[1], so the body never reads KEYS."""
    assert "KEYS" not in code_of(path)


@scripts
def test_every_argv_the_body_uses_is_documented(path):
    _, header, body = split(path)
    documented = {int(n) for n, _ in ARGV_DOC.findall("\n".join(header))}
    used = {int(n) for n in ARGV_NUM.findall(body)}
    assert used - documented == set(), f"undocumented ARGV in {path.name}"
    if ARGV_DYNAMIC.search(body):  # ARGV[i] in a loop: the header must say "ARGV[n..]"
        assert any(dots for _, dots in ARGV_DOC.findall("\n".join(header))), (
            f"{path.name} indexes ARGV dynamically but documents no open range ARGV[n..]"
        )


@scripts
def test_every_documented_argv_is_used(path):
    _, header, body = split(path)
    lib_used = {int(n) for n in ARGV_NUM.findall(CORE)}
    assert lib_used == {1, 2}
    for n, dots in ARGV_DOC.findall("\n".join(header)):
        n = int(n)
        if dots:
            assert ARGV_DYNAMIC.search(body) and "#ARGV" in body, (
                f"{path.name} documents ARGV[{n}..] but never loops over ARGV"
            )
            assert re.search(rf"=\s*{n}\s*,\s*#ARGV", body), (
                f"{path.name}: the ARGV loop does not start at {n}"
            )
        else:
            assert n in lib_used or f"ARGV[{n}]" in body, f"ARGV[{n}] of {path.name} is unused"


@scripts
def test_documented_return_codes_appear_in_the_body(path):
    _, header, _ = split(path)
    code = code_of(path)
    block = returns_block(header)
    codes = set(QUOTED_WORD.findall(block))
    for alternatives in ALTERNATIVES.findall(block):
        codes |= set(alternatives.split(" | "))
    for word in codes:
        # a JSON reply's field names ("next") are table keys of the encoded reply
        assert string_literal(word, code) or re.search(rf"\b{word}\s*=", code), (
            f'"{word}" of {path.name} is never produced'
        )


def test_claim_reply_fields_match_the_header():
    _, header, _ = split(LUA / "claim.lua")
    body = code_of(LUA / "claim.lua")
    block = returns_block(header)
    shape = re.sub(r"\([^)]*\)", "", block.split("JSON", 1)[1].split("\n")[0])
    fields = set(re.findall(r"[a-z]+", shape))  # {now, next, claims: [{j, s, ...}]}
    assert {"now", "next", "claims", "j", "s", "a", "t", "f", "l", "g", "def"} <= fields
    for field in fields:
        assert re.search(rf"\b{field}\s*=", body), f"claim.lua's reply lacks {field!r}"


@scripts
def test_error_replies_are_duetime_bad_input(path):
    _, _, body = split(path)
    for reply in re.findall(r"redis\.error_reply\(([^)]*)\)", body):
        assert reply.startswith("'ERR duetime bad-input "), reply


def test_times_are_never_formatted_with_tostring():
    for path in LUA_FILES:
        assert "tostring(" not in path.read_text(), f"{path.name}: use fmt() / %d, not tostring"


def test_the_shebang_stays_the_first_line_and_the_units_come_next():
    for name in lua.SCRIPTS:
        text = (LUA / f"{name}.lua").read_text()
        shebang, _, rest = text.partition("\n")
        units = [(LUA / "include" / f"{u}.lua").read_text() for u in lua.unit_order(text, name)]
        assert units and units[0] == CORE, f"{name}.lua must include core first"
        assert lua.source(name) == "\n".join([shebang, *units, rest])


def _documented_key_names() -> set[str]:
    k = keys_mod.Keys("ns")
    names = {
        v[len(k.prefix) :]
        for v in vars(k).values()
        if isinstance(v, str) and v.startswith(k.prefix) and v != k.prefix
    }
    methods = [
        m for name, m in vars(keys_mod.Keys).items() if callable(m) and not name.startswith("_")
    ]
    names |= {m(k, "x")[len(k.prefix) : -1] for m in methods}
    return names


def test_every_key_a_script_builds_is_listed_in_keys_py():
    used = set()
    for path in LUA_FILES:
        used |= set(re.findall(r"P \.\. '([a-z_]+:?)'", path.read_text()))
    assert used - _documented_key_names() == set()
