"""Static checks of lua/ (no Redis): every script's header documents its guarantee, the key
families it touches, KEYS, ARGV and return values, and every unit's header what it provides
and the key families it touches; each header agrees with the code.

A header is the comment block right after a script's ``#!lua`` shebang (a unit's first
lines); the body is the rest. What a script can touch or answer is read from the code it
runs: the units it includes (lua/include/, inlined by ``scripts.source``), then its body.
"""

from __future__ import annotations

import re

import pytest

from scheduler.stores.redis.protocol import scripts as lua
from tests.lua.luatext import (
    LUA,
    LUA_FILES,
    SCRIPT_FILES,
    UNIT_FILES,
    UNITS,
    closure_code,
    families_built,
    key_families,
    labelled,
    split,
    top_level_names,
    units_of,
)

CORE = split(UNITS / "core.lua")[2]  # the only unit that reads ARGV

ARGV_NUM = re.compile(r"ARGV\[(\d+)\]")  # ARGV[3]
ARGV_DYNAMIC = re.compile(r"ARGV\[(?!\d+\])[^\]]+\]")  # ARGV[i], ARGV[i + 1]
ARGV_DOC = re.compile(r"ARGV\[(\d+)(\.\.)?\]")  # ARGV[3] or ARGV[6..]
QUOTED_WORD = re.compile(r'"([a-z_]+)"')  # "ok", "lease_lost", ...
ALTERNATIVES = re.compile(r"\b[a-z_]+(?: \| [a-z_]+)+\b")  # created | replaced | unchanged


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


def header_families(header: list[str], name: str) -> set[str]:
    """The key families a header's ``Key families:`` line names, as keys.py spells them
    (``job:<job_id>``, ``lease``); "none" for none."""
    listed = labelled(header, "Key families")
    assert listed is not None, f"{name}: no 'Key families:' line in the header"
    if listed.strip() == "none":
        return set()
    return {item.strip() for item in listed.split(",")}


scripts = pytest.mark.parametrize("path", SCRIPT_FILES, ids=lambda p: p.stem)
units = pytest.mark.parametrize("path", UNIT_FILES, ids=lambda p: p.stem)
lua_files = pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.stem)


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
    keys1 = "the caller's key" if path.stem in lua.CALLER_KEYS else "any key of the namespace"
    assert any(line.startswith(f"KEYS[1]: {keys1}") for line in header)
    assert "ARGV[1]" in text and "ARGV[2]" in text
    assert any(line.startswith("Returns:") for line in header)


@lua_files
def test_header_names_exactly_the_key_families_the_code_touches(path):
    """A script's header names every key family its code can read or write, its units'
    included; a unit's, every family it and the units it includes can touch."""
    _, header, _ = split(path)
    families = key_families()
    named = header_families(header, path.name)
    assert named <= set(families.values()), (
        f"{path.name} names key families keys.py does not have (or spells them other than "
        f"{sorted(families.values())}): {sorted(named - set(families.values()))}"
    )
    used = {families.get(f, f"{f} (not in keys.py)") for f in families_built(closure_code(path))}
    assert sorted(named) == sorted(used), (
        f"{path.name}: missing from the header {sorted(used - named)}, "
        f"named but never touched {sorted(named - used)}"
    )


@scripts
def test_keys_only_route_the_call(path):
    """KEYS[1] is passed for Redis Cluster's routing only (RedisStore.call_script); every
    key a script touches is built from the prefix ARGV[1], so no code it runs reads KEYS.
    A script of the caller's keys (``CALLER_KEYS``) is the other way round: it touches
    only KEYS, builds no key from a prefix and includes no unit."""
    if path.stem in lua.CALLER_KEYS:
        code = closure_code(path)
        assert units_of(path) == [] and "P .." not in code and "KEYS[" in code
        return
    assert "KEYS" not in closure_code(path)


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


@units
def test_only_core_reads_argv(path):
    """Units get their input as arguments; ARGV[1] and ARGV[2] are core's conventions."""
    if path.stem != "core":
        assert "ARGV" not in split(path)[2], f"{path.name} reads ARGV"


@scripts
def test_documented_return_codes_appear_in_the_code(path):
    _, header, _ = split(path)
    code = closure_code(path)
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
    """The flat reply's header line and per-claim records name, in order, as many fields
    as claim.lua and include/issue.lua format (claiming/claim_reply.py, claim_reply, reads
    that order)."""
    _, header, _ = split(LUA / "claim.lua")
    code = closure_code(LUA / "claim.lua")
    fields = re.findall(r"<([a-z ]+)>", returns_block(header))
    fields = fields[fields.index("request id") :]
    head = [
        "request id",
        "now",
        "next",
        "fence",
        "lease until",
        "claims",
        "plans",
        "epoch bytes",
        "now us",
    ]
    assert fields[: len(head)] == head
    line = re.search(r"string\.format\('%s\\n((?:%d ?)+)(%s)?\\n'", code)
    assert line and len(line.group(1).split()) == len(head) - 1
    # then, as one %s, the fences of the claims a rate counted
    assert line.group(2) and fields[len(head)] == "fence"
    assert "<now us> [<fence>...]" in returns_block(header)
    i = fields.index("sched")
    record = ["sched", "attempt", "fence", "gen", "ready", "job bytes", "def bytes", "job", "def"]
    assert fields[i : i + len(record)] == record
    # issue()'s record: its numbers, formatted once each, joined by spaces, then a newline
    claim = re.search(r"c\[#c \+ 1\] = (s \.\. ' ' \.\.[^\n]*\n[^\n]*)'\\n'", code)
    assert claim and claim.group(1).count("' '") == len(record) - 3


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
        included = [(UNITS / f"{u}.lua").read_text() for u in lua.unit_order(text, name)]
        if name in lua.CALLER_KEYS:  # no namespace: no core (test_keys_only_route_the_call)
            assert included == [] and lua.source(name) == "\n".join([shebang, rest])
            continue
        assert included and included[0] == (UNITS / "core.lua").read_text(), (
            f"{name}.lua must include core first: its checks run before anything else"
        )
        assert lua.source(name) == "\n".join([shebang, *included, rest])
        assert lua.source(name).count("#!") == 1


def test_every_key_a_script_builds_is_listed_in_keys_py():
    used = set()
    for path in LUA_FILES:
        used |= families_built(path.read_text())
    assert used - set(key_families()) == set()


# ---- units --------------------------------------------------------------------------------


@units
def test_unit_header_says_what_it_provides(path):
    """First line ``include/NAME.lua: <what it is for>``, then ``Provides:`` with exactly the
    names it declares at its top level."""
    shebang, header, body = split(path)
    assert shebang == "", f"{path.name}: a unit has no shebang (the script's stays first)"
    assert header and header[0].startswith(f"include/{path.name}: "), (
        f"first header line must be 'include/{path.name}: ...'"
    )
    provides = labelled(header, "Provides")
    assert provides is not None, f"{path.name}: no 'Provides:' line"
    assert [x.strip() for x in provides.split(",")] == top_level_names(body)


def test_units_declare_distinct_names():
    """No unit redefines (and so silently shadows) a name another unit provides."""
    seen: dict[str, str] = {}
    for path in UNIT_FILES:
        for name in top_level_names(split(path)[2]):
            assert name not in seen, f"{name} is declared by {seen[name]} and {path.name}"
            seen[name] = path.name


@scripts
def test_a_script_declares_no_name_of_its_units(path):
    provided = {n for u in units_of(path) for n in top_level_names(split(UNITS / f"{u}.lua")[2])}
    clash = provided & set(top_level_names(split(path)[2]))
    assert not clash, f"{path.name} redeclares {sorted(clash)} of its units"
