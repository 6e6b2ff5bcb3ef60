"""Lua a reader can hold in mind (no Redis): small files and functions, and units included
where they are used, with the loader that inlines them (``--@include UNIT``).

Limits: no Lua file (script or unit) over MAX_FILE_LINES lines, no function over
MAX_FUNCTION_LINES lines (from its ``function`` to its ``end``, found by tokenizing).
"""

from __future__ import annotations

import pathlib

import pytest

from scheduler.stores.redis.protocol import scripts as lua
from tests.lua.luatext import (
    LUA_FILES,
    SCRIPT_FILES,
    UNIT_FILES,
    UNITS,
    functions,
    split,
    tokens,
    top_level_names,
    units_of,
)

MAX_FILE_LINES = 120
MAX_FUNCTION_LINES = 40

# The first line of every shipped script: `#!lua` (so an out-of-memory Redis rejects it
# whole), with allow-oom on what frees memory or drains what is stored: the commit path,
# claim (with its reaper), plan, reconcile, cancel, delete, purge (lua/README.md).
SHEBANGS = {
    "add": "#!lua",
    "backfill": "#!lua",
    "cancel": "#!lua flags=allow-oom",
    "claim": "#!lua flags=allow-oom",
    "complete": "#!lua flags=allow-oom",
    "complete_many": "#!lua flags=allow-oom",
    "fail": "#!lua flags=allow-oom",
    "pause": "#!lua",
    "plan": "#!lua flags=allow-oom",
    "purge": "#!lua flags=allow-oom",
    "reconcile": "#!lua flags=allow-oom",
    "quarantine": "#!lua flags=allow-oom",
    "release": "#!lua flags=allow-oom",
    "renew": "#!lua flags=allow-oom",
    "restore": "#!lua",
    "resume": "#!lua",
    "trigger": "#!lua",
    "retry": "#!lua",
    "delete": "#!lua flags=allow-oom",  # freeing memory must work when it is full
    "fenced": "#!lua",  # the caller's own keys: a job's effect adds data
    "limit": "#!lua flags=allow-oom",  # steering the drain of a full Redis (one hash field)
    "rule": "#!lua",  # a key rule serves jobs added later, which a full Redis refuses
    "progress": "#!lua",  # a running job's progress: not worth writing into a full Redis
}

lua_files = pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)


def too_long(text: str) -> list[str]:
    """The functions of a Lua text over the limit, as 'name (lines n-m): k lines'."""
    return [
        f"{f.name or 'anonymous function'} (lines {f.first}-{f.last}): {f.lines} lines"
        for f in functions(text)
        if f.lines > MAX_FUNCTION_LINES
    ]


@lua_files
def test_no_lua_file_is_longer_than_the_limit(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_FILE_LINES, f"{path.name} has {n} lines (at most {MAX_FILE_LINES}): split it"


@lua_files
def test_no_lua_function_is_longer_than_the_limit(path):
    assert too_long(path.read_text()) == [], f"{path.name}: split these functions"


def test_the_function_limit_can_fail():
    body = "\n".join(f"  x = x + {i}" for i in range(MAX_FUNCTION_LINES))
    text = f"local function short() return 1 end\nlocal function long(x)\n{body}\n  return x\nend\n"
    n = MAX_FUNCTION_LINES + 3  # its header, the body, return, end
    assert too_long(text) == [f"long (lines 2-{n + 1}): {n} lines"]


def test_functions_are_found_through_blocks_strings_and_comments():
    text = (
        "local function f(s)\n"
        "  if s == 'end' then return [[\nfunction]] end  -- end end\n"
        "  for i = 1, 2 do repeat local g = function() end until true end\n"
        "  --[[ function\n  ]]\n"
        "  while false do end\n"
        "end\n"
    )
    found = {(f.name, f.first, f.last) for f in functions(text)}
    assert found == {("f", 1, 8), ("", 4, 4)}


def test_every_shipped_script_keeps_its_shebang_first():
    assert set(SHEBANGS) == set(lua.SCRIPTS)
    for name, shebang in SHEBANGS.items():
        assert lua.source(name).split("\n", 1)[0] == shebang


# ---- includes ----------------------------------------------------------------------------


def provided(unit: str) -> set[str]:
    return set(top_level_names(split(UNITS / f"{unit}.lua")[2]))


def names_used(text: str) -> set[str]:
    """Names a Lua text refers to, table fields (`b.plans`, `x:y`, `{k = v}`) aside."""
    toks = tokens(text)
    return {
        t.text
        for i, t in enumerate(toks)
        if t.kind == "name"
        and not (i and toks[i - 1].text in (".", ":"))
        and not (toks[i - 1].text in ("{", ",") and toks[i + 1].text == "=")
    }


def names_declared(text: str) -> set[str]:
    """Every name a Lua text declares: locals, functions, parameters, loop variables."""
    toks = tokens(text)
    out = set()
    for i, t in enumerate(toks):
        if t.text in ("local", "for", "function") or (t.text == "(" and toks[i - 1].kind == "name"):
            j = i + 1
            while j < len(toks) and toks[j].kind == "name" and toks[j].text != "function":
                out.add(toks[j].text)
                if toks[j + 1].text != ",":
                    break
                j += 2
    return out


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_each_include_is_used_by_the_file_that_names_it(path):
    body = split(path)[2]
    used = names_used(body)
    for unit in lua.includes(path.read_text()):
        assert provided(unit) & used, f"{path.name} includes {unit} but uses none of it"


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_every_unit_name_a_file_uses_is_included(path):
    """What a file uses of any unit comes from the units it needs (else Redis would fail
    at run time on an undefined global, in whichever branch calls it)."""
    body = split(path)[2]
    mine = set(units_of(path)) | ({path.stem} if path.parent == UNITS else set())
    available = set().union(*(provided(u) for u in mine))
    elsewhere = set().union(*(provided(p.stem) for p in UNIT_FILES)) - available
    missing = (names_used(body) - names_declared(body)) & elsewhere
    assert not missing, f"{path.name} uses {sorted(missing)} without including their units"


def test_complete_does_not_carry_the_claim_machinery():
    complete = set(units_of(next(p for p in SCRIPT_FILES if p.stem == "complete")))
    assert complete == {"core", "st", "job", "events", "tokens", "due", "retire", "settle"} | {
        "utf8",  # the checks before the first write: RUNNING entries, job ids, definitions
        "check",
        "rules",  # check's field rules
        "interval",  # check's rule for a fixed-rate job's interval field
        "aside",
        "commit",
        "history",  # a recurring job's recent runs
        "reruns",  # due's re-runs listed in the job (a queued occurrence released by settle)
        "flow",  # due's pushes into flow queues (a queued occurrence's turn)
        "limits",  # an ended keyed invocation frees its key's slot
        "told",  # a handle waiting for the job is told (results)
        "plain",  # a plain one-off's only run read the short way
    }
    assert {"admit", "issue", "reap", "grid", "calendar"} & complete == set()


# ---- the loader ----------------------------------------------------------------------------


def write(d: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    return d


def test_the_loader_inlines_each_unit_once_after_the_units_it_includes(tmp_path):
    d = write(
        tmp_path,
        {
            "include/a.lua": "--@include b\n--@include c\nA\n",
            "include/b.lua": "--@include c\nB\n",
            "include/c.lua": "C\n",
        },
    )
    text = "#!lua flags=allow-oom\n-- s.lua: a script\n--@include a\n--@include c\nbody\n"
    assert lua.unit_order(text, "s.lua", d) == ["c", "b", "a"]
    assembled = lua.assemble(text, "s.lua", d)
    assert assembled.split("\n", 1)[0] == "#!lua flags=allow-oom"
    assert [x for x in assembled.split("\n") if x in "ABC" and x] == ["C", "B", "A"]
    assert assembled.endswith("--@include c\nbody\n")


def test_a_missing_unit_is_a_clear_error(tmp_path):
    d = write(tmp_path, {"include/a.lua": "--@include nope\n"})
    with pytest.raises(lua.IncludeError, match=r"include/a\.lua includes 'nope', but there is no"):
        lua.unit_order("#!lua\n--@include a\n", "s.lua", d)
    with pytest.raises(lua.IncludeError, match=r"^s\.lua includes 'Bad\.Name'"):
        lua.unit_order("#!lua\n--@include Bad.Name\n", "s.lua", d)


def test_an_include_cycle_is_a_clear_error(tmp_path):
    d = write(
        tmp_path,
        {
            "include/a.lua": "--@include b\n",
            "include/b.lua": "--@include c\n",
            "include/c.lua": "--@include a\n",
        },
    )
    with pytest.raises(lua.IncludeError, match=r"include cycle in s\.lua: a -> b -> c -> a"):
        lua.unit_order("#!lua\n--@include a\n", "s.lua", d)
    write(tmp_path, {"include/self.lua": "--@include self\n"})
    with pytest.raises(lua.IncludeError, match="self -> self"):
        lua.unit_order("#!lua\n--@include self\n", "s.lua", d)


def test_a_unit_with_a_shebang_is_refused(tmp_path):
    d = write(tmp_path, {"include/a.lua": "#!lua\nA\n"})
    with pytest.raises(lua.IncludeError, match="must not start with #!"):
        lua.unit_order("#!lua\n--@include a\n", "s.lua", d)


def _readme_table(heading: str) -> list[list[str]]:
    """The rows of the first table under ``heading`` in lua/README.md, as cells."""
    text = (UNITS.parent / "README.md").read_text()
    lines = text.split(heading, 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first + 2 :]:  # past the header row and its |---| line
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_readme_names_every_unit():
    named = {
        name.strip("`")
        for row in _readme_table("## Units and `--@include`")
        for name in row[0].split(", ")
    }
    assert named == {p.stem for p in UNIT_FILES}


def test_the_readme_says_which_scripts_run_on_a_full_redis():
    runs, refused = set(), set()
    for row in _readme_table("## A full Redis"):
        names = {n.split(" ")[0].strip("`") for n in row[0].split(", ")}
        (runs if row[1] in ("runs", "run") else refused).update(names)
    shebangs = {p.stem: split(p)[0] for p in SCRIPT_FILES}
    assert runs == {n for n, line in shebangs.items() if "allow-oom" in line}
    assert refused == {n for n, line in shebangs.items() if "allow-oom" not in line}
