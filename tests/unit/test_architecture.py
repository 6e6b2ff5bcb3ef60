"""Rules that keep the architecture true (docs/layout.md) and bad input's
"never pickle". Each rule reads the code itself (ast) or imports it in a fresh interpreter,
so a change that breaks a rule fails here, whatever the rest of the suite imports first."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "scheduler", ROOT / "workers"]
MODULES = sorted(p for pkg in PACKAGES for p in pkg.rglob("*.py"))
FORBIDDEN_IMPORTS = {"pickle", "marshal", "dill", "cloudpickle", "shelve"}
REDIS_WING = ROOT / "scheduler" / "stores" / "redis"


def dotted(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


DOTTED = {dotted(p): p for p in MODULES}


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imported_modules(path: pathlib.Path, *, runtime_only: bool = False) -> set[str]:
    """Every module ``path`` imports (anywhere in it, at module level or in a function);
    ``from pkg import name`` counts as ``pkg.name`` when that is a module of ours.
    ``runtime_only`` leaves out imports under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if runtime_only and _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names} & DOTTED.keys()
            found |= subs or {node.module}
            if len(subs) < len(node.names):
                found.add(node.module)
    return found


def ids(p: pathlib.Path) -> str:
    return str(p.relative_to(ROOT))


# ---- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MODULES, ids=ids)
def test_no_pickle_marshal_eval_or_exec(path):
    tree = ast.parse(path.read_text(), str(path))
    bad = {m.split(".")[0] for m in imported_modules(path)} & FORBIDDEN_IMPORTS
    assert not bad, f"{path}: imports {bad}"
    calls = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in {"eval", "exec", "__import__"}
    ]
    assert not calls, f"{path}: calls {calls}"


# ---- each module imports alone ---------------------------------------------------------------


@pytest.mark.parametrize("module", sorted(set(DOTTED) - {"scheduler.__main__"}), ids=str)
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    """No module depends on another having been imported first (an import cycle that the
    test suite's own import order would hide fails here)."""
    out = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_leaf_module_does_not_load_the_engine():
    code = (
        "import sys, scheduler.clock, workers.timers\n"
        "print(sorted(m for m in sys.modules if m.startswith(('scheduler', 'workers'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    loaded = set(ast.literal_eval(out.stdout))
    assert loaded == {"scheduler", "scheduler.clock", "workers", "workers.timers"}


def test_the_public_names_are_unchanged_and_resolve():
    import scheduler

    assert sorted(scheduler.__all__) == sorted(
        [
            "Ambiguous",
            "AsyncClient",  # issue 14; the rest as before the house moved (issue 11)
            "AsyncJobHandle",  # results (issue 34): what enqueue returns, and its errors
            "JobFailed",
            "JobHandle",
            "ResultTimeoutError",
            "Client",
            "ClientClosedError",  # use after close() (eighth session)
            "Clock",
            "Cron",
            "current_invocation",
            "Delivery",
            "DuetimeError",
            "InvocationContext",
            "InvocationTimeout",
            "JobInfo",
            "JobNotFoundError",
            "JobScheduler",
            "Lane",  # issue 34: a lane's workers and isolation (threads or processes)
            "MemoryStore",
            "Misfire",
            "Missing",
            "MonotonicClock",
            "Overlap",
            "PayloadError",
            "RecurringJobScheduler",
            "RedisStore",
            "RetryPolicy",
            "Scheduler",
            "SchedulerClosedError",
            "task",
            "TaskNotRegisteredError",
        ]
    )
    for name in scheduler.__all__:
        assert getattr(scheduler, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        scheduler.Nope  # noqa: B018


# ---- no import cycle -------------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    return {
        name: {m for m in imported_modules(path, runtime_only=True) if m in DOTTED} - {name}
        for name, path in DOTTED.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle():
    """Function-level imports count too: a cycle deferred into a function is still two
    rooms that need each other."""
    assert cycles(import_graph()) == []


# ---- who may use whom ------------------------------------------------------------------------


def declared_surface() -> set[str]:
    doc = ast.get_docstring(ast.parse((ROOT / "workers" / "__init__.py").read_text())) or ""
    block = doc.split("may use", 1)[1].split("Only the engine", 1)[0]
    return set(re.findall(r"scheduler(?:\.\w+)+", block))


@pytest.mark.parametrize(
    "path", [p for p in MODULES if p.is_relative_to(ROOT / "workers")], ids=ids
)
def test_workers_use_only_the_scheduler_surface_they_declare(path):
    surface = declared_surface()
    assert "scheduler.stores.base" in surface and "scheduler.engine" not in surface
    used = {m for m in imported_modules(path) if m.split(".")[0] == "scheduler"}
    assert used <= surface, used - surface


def test_only_the_redis_effects_use_the_redis_wing():
    """The surface names one module of the Redis wing, for workers/effects/redis.py alone
    (fenced writes to the user's keys are a script, and only the wing sends scripts)."""
    wing = "scheduler.stores.redis"
    users = sorted(
        ids(p)
        for p in MODULES
        if p.is_relative_to(ROOT / "workers")
        and any(m.startswith(wing) for m in imported_modules(p))
    )
    assert users == ["workers/effects/redis.py"]


def may_import_workers(path: pathlib.Path) -> bool:
    rel = ids(path)
    return rel in {"scheduler/engine.py", "scheduler/__init__.py"} or rel.startswith(
        "scheduler/cli/"
    )


@pytest.mark.parametrize(
    "path", [p for p in MODULES if p.is_relative_to(ROOT / "scheduler")], ids=ids
)
def test_only_the_engine_and_the_cli_import_workers(path):
    if may_import_workers(path):
        return
    assert not {m for m in imported_modules(path) if m.split(".")[0] == "workers"}


def test_scheduler_init_imports_workers_lazily_only():
    runtime = imported_modules(ROOT / "scheduler" / "__init__.py", runtime_only=True)
    assert not {m for m in runtime if m.split(".")[0] in {"workers", "scheduler"}}


# matches a Redis key of the layout or an entry format, written out by hand
KEY_LAYOUT = re.compile(r"duetime:\{|:(?:job|due|running|lease|events|replica|stats):|\w\|\w")


@pytest.mark.parametrize("path", [p for p in MODULES if not p.is_relative_to(REDIS_WING)], ids=ids)
def test_only_the_redis_wing_knows_the_key_layout_and_entry_formats(path):
    """Key names come from ``stores/redis/protocol/keys.py``, entries are parsed by
    ``stores/redis/protocol/records.py``: no other module spells a key or splits an entry."""
    tree = ast.parse(path.read_text(), str(path))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith(("\n", " ")) or node.value.count(" ") > 2:
                continue  # prose: a docstring or a message
            if KEY_LAYOUT.search(node.value):
                bad.append(node.value)
    assert not bad, f"{ids(path)} spells Redis keys or entry formats: {bad}"


def test_the_key_layout_rule_can_fail():
    assert KEY_LAYOUT.search("duetime:{ns}:running")
    assert KEY_LAYOUT.search("gen|sched")
    assert not KEY_LAYOUT.search("demo:log")


def test_one_parser_per_entry_format():
    """The RUNNING entry and the event stream are parsed in protocol/records.py only."""
    for path in MODULES:
        text = path.read_text()
        if path.name == "records.py" and path.parent.name == "protocol":
            continue
        assert 'split("|"' not in text, ids(path)
        assert not re.search(r"""(\.get\(|\w\[)["'](kind|sched)["']""", text), ids(path)


def test_every_event_kind_recorded_is_listed():
    """``EVENT_KINDS`` (what ``duetime events --kind`` and the console's filter accept)
    names every kind a script or a store records: a kind missing from it could not be
    filtered on."""
    from scheduler.model import EVENT_KINDS

    lua_kinds = set()
    for path in (ROOT / "lua").rglob("*.lua"):
        lua_kinds |= set(re.findall(r"event\([^,()]+(?:\(\))?, '([a-z_]+)'", path.read_text()))
    py_kinds = set()
    for path in MODULES:
        text = path.read_text()
        py_kinds |= set(re.findall(r"_event_locked\(\s*[^,]+,\s*\"([a-z_]+)\"", text))
        py_kinds |= set(re.findall(r"(?:_record|event_fields)\(\s*\"([a-z_]+)\"", text))
        py_kinds |= set(re.findall(r"Event\(\s*now,\s*\"([a-z_]+)\"", text))
    assert len(lua_kinds) >= 18 and len(py_kinds) >= 10  # the patterns still find them
    assert lua_kinds | py_kinds <= set(EVENT_KINDS), (lua_kinds | py_kinds) - set(EVENT_KINDS)


# the commands that run a cached script or a library's function, or redis-py's methods
SCRIPT_SENDING = re.compile(r"evalsha|fcall", re.IGNORECASE)
GATEWAY = REDIS_WING / "protocol" / "gateway.py"


@pytest.mark.parametrize("path", [p for p in MODULES if p != GATEWAY], ids=ids)
def test_only_the_gateway_sends_scripts(path):
    """Every Lua script call goes through ``stores/redis/protocol/gateway.py`` (NOSCRIPT reloads,
    pipelines, WAIT: one set of rules for the sync and async stores): no other module
    names EVALSHA or FCALL, in code or in prose."""
    found = [
        n for n, line in enumerate(path.read_text().splitlines(), 1) if SCRIPT_SENDING.search(line)
    ]
    assert not found, f"{ids(path)} sends scripts itself (lines {found}): use gateway.py"


def test_the_gateway_rule_can_fail():
    assert GATEWAY.is_file() and SCRIPT_SENDING.search(GATEWAY.read_text())
    assert SCRIPT_SENDING.search("pipe.evalsha(sha, 1, key)")
    assert SCRIPT_SENDING.search('client.execute_command("FCALL", name, 0)')
    assert not SCRIPT_SENDING.search("gateway.call(client, script, route, argv)")


# ---- sizes -----------------------------------------------------------------------------------


# Caps in lines as ``ruff format`` lays the code out (it made the same code ~10 % longer
# than the hand-wrapped style the old cap of 450 was set for).
MODULE_LINES, FUNCTION_LINES = 500, 80


@pytest.mark.parametrize("path", MODULES, ids=ids)
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= MODULE_LINES


@pytest.mark.parametrize("path", MODULES, ids=ids)
def test_functions_stay_short(path):
    tree = ast.parse(path.read_text(), str(path))
    long = [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno - n.lineno + 1 > FUNCTION_LINES
    ]
    assert not long, long


def test_duetimes_errors_live_in_one_module():
    """Every error class of duetime's own (a subclass of one in scheduler/errors.py) is
    defined there, whatever module re-exports it."""
    ours = {
        n.name
        for n in ast.walk(ast.parse((ROOT / "scheduler" / "errors.py").read_text()))
        if isinstance(n, ast.ClassDef)
    }
    elsewhere = [
        f"{path.relative_to(ROOT)}: {node.name}"
        for path in sorted((ROOT / "scheduler").rglob("*.py"))
        if path.name != "errors.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Name) and b.id in ours for b in node.bases)
    ]
    assert elsewhere == [] and "StoreFullError" in ours


# ---- no module reaches into another's underscore names ----------------------------------

#: Underscore names of other code that a module may use: namedtuple's API is spelled so
#: (``_replace``, ``_make``, ``_asdict``, ``_fields``), ``os._exit`` ends a forked child
#: at once, and ``asyncio.events._set_running_loop`` lets a job's coroutine start on a
#: worker thread's own loop (workers/coroutines.py says why).
FOREIGN_PRIVATE_OK = {"_replace", "_make", "_asdict", "_fields", "_exit", "_set_running_loop"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _own_names(tree: ast.AST) -> set[str]:
    """The names a module defines itself: functions, classes, assigned names and
    attributes (``self._x = ...``), annotated fields."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name):
                    own.add(sub.id)
                elif isinstance(sub, ast.Attribute):
                    own.add(sub.attr)
    return own


def reach_ins(text: str) -> list[str]:
    """Where ``text`` uses an underscore name that another module defines: imported, or
    read off an object that is not ``self``, ``cls`` or ``super()`` (a name the module
    defines itself is its own business)."""
    tree = ast.parse(text)
    own, found = _own_names(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and ast.unparse(base.func) == "super":
                continue
            if node.attr not in own and node.attr not in FOREIGN_PRIVATE_OK:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=ids)
def test_no_module_reaches_into_anothers_private_names(path):
    """A module uses another's public surface only: what it needs is named without an
    underscore there (or passed in), so a module's underscore names can change freely."""
    found = reach_ins(path.read_text())
    assert not found, f"{ids(path)} uses another module's private names: {found}"


def test_the_reach_in_rule_can_fail():
    text = "from m import _x\n\ndef f(store):\n    return store._r, self._own, store._mine\n"
    text += "\n_mine = 1\n"
    assert reach_ins(text) == ["1: import _x", "4: store._r"]
