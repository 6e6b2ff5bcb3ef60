"""Rules that keep the architecture true (STYLE §3) and SPEC §5's "never pickle"."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "scheduler", ROOT / "workers"]
MODULES = sorted(p for pkg in PACKAGES for p in pkg.rglob("*.py"))
FORBIDDEN_IMPORTS = {"pickle", "marshal", "dill", "cloudpickle", "shelve"}
# the composition roots (and the package's public surface) may meet workers/
MAY_IMPORT_WORKERS = {"engine.py", "cli.py", "__init__.py"}


def imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pickle_marshal_eval_or_exec(path):
    tree = ast.parse(path.read_text(), str(path))
    bad = {m.split(".")[0] for m in imports(path)} & FORBIDDEN_IMPORTS
    assert not bad, f"{path}: imports {bad}"
    calls = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in {"eval", "exec", "__import__"}
    ]
    assert not calls, f"{path}: calls {calls}"


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in MODULES
        if p.is_relative_to(ROOT / "scheduler") and p.name not in MAY_IMPORT_WORKERS
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_scheduler_does_not_import_workers(path):
    assert not {m for m in imports(path) if m.split(".")[0] == "workers"}


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if p.is_relative_to(ROOT / "workers")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_workers_use_only_the_narrow_scheduler_surface(path):
    allowed = {
        "scheduler",
        "scheduler.model",
        "scheduler.errors",
        "scheduler.clock",
        "scheduler.stores.base",
        "scheduler.validation",
        "scheduler.metrics",
    }
    used = {m for m in imports(path) if m.split(".")[0] == "scheduler"}
    assert used <= allowed, used - allowed


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path):
    assert len(path.read_text().splitlines()) <= 450
