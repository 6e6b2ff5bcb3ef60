"""The documentation stays true to the code: README.md and docs/ name modules, import
paths and files that exist, docs/layout.md lists every module, the Redis key table lists
every key, and nothing names a path of one machine (they must work from any checkout).

The MkDocs build (``mkdocs build --strict``, run by .ci/run) checks the links and anchors
between docs/ pages and the API reference; these tests check what it cannot see.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LAYOUT = DOCS / "layout.md"
PACKAGES = ("scheduler", "workers")
FIRST_PARTY = (*PACKAGES, "tests")

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(FIRST_PARTY) + r")(?:\.[A-Za-z_]\w*)+)")
DASH_M = re.compile(r"python3? -m ([A-Za-z_][\w.]*)")


def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---- docs/layout.md ---------------------------------------------------------------------


def package_modules() -> set[str]:
    return {
        rel(p)
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if "__pycache__" not in p.parts
    }


def layout_modules() -> set[str]:
    return {
        span
        for span in INLINE.findall(LAYOUT.read_text())
        if span.startswith(tuple(f"{p}/" for p in PACKAGES)) and span.endswith(".py")
    }


def test_layout_lists_every_module():
    missing = sorted(package_modules() - layout_modules())
    assert not missing, (
        f"modules missing from docs/layout.md (add one line each, under their folder): {missing}"
    )


def test_layout_names_only_modules_that_exist():
    gone = sorted(m for m in layout_modules() if not (ROOT / m).is_file())
    assert not gone, f"docs/layout.md names modules that do not exist: {gone}"


def test_layout_finds_the_modules():  # the two checks above are not vacuous
    assert "scheduler/stores/redis/store.py" in package_modules()
    assert len(layout_modules()) >= 40


# ---- import paths named by the docs -----------------------------------------------------


def python_blocks(text: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang in ("python", "py", "pycon")]


def without_fences(text: str) -> str:
    return FENCE.sub("", text)


def import_statements() -> list[tuple[str, str, list[str]]]:
    """Every first-party ``from X import a, b`` / ``import X`` in a Python code block, as
    (where, module, names)."""
    found = []
    for page in doc_pages():
        for block in python_blocks(page.read_text()):
            try:
                nodes = list(ast.walk(ast.parse(block)))
            except SyntaxError as exc:
                pytest.fail(f"{rel(page)}: a python code block does not parse: {exc}")
            for node in nodes:
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [a.name for a in node.names]
                    found.append((rel(page), node.module, names))
                elif isinstance(node, ast.Import):
                    found.extend((rel(page), a.name, []) for a in node.names)
    return [f for f in found if f[1].split(".")[0] in FIRST_PARTY]


def dotted_references() -> list[tuple[str, str]]:
    """Every first-party dotted path in inline code (``scheduler.stores.redis.RedisStore``)
    and in mkdocstrings directives (``::: scheduler.Client``), as (where, path)."""
    found = []
    for page in doc_pages():
        text = without_fences(page.read_text())
        spans = INLINE.findall(text)
        spans += re.findall(r"(?m)^:::\s*(\S+)", text)
        for span in spans:
            span = DASH_M.sub("", span)  # `python -m X`: a module to run, checked below
            found.extend((rel(page), path) for path in DOTTED.findall(span))
    return sorted(set(found))


def run_modules() -> list[tuple[str, str]]:
    """Every first-party module of a ``python -m X`` command, in code blocks or inline."""
    found = {
        (rel(page), module)
        for page in doc_pages()
        for module in DASH_M.findall(page.read_text())
        if module.split(".")[0] in FIRST_PARTY
    }
    return sorted(found)


def resolve(path: str) -> Any:
    """Import the longest module prefix of ``path``, then get the rest as attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
                continue  # that prefix is not a module: the rest are attributes
            raise
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module in {path!r}", name=parts[0])


@pytest.mark.parametrize(("where", "module", "names"), import_statements())
def test_code_block_imports_work(where, module, names):
    mod = importlib.import_module(module)
    for name in names:
        if name != "*" and not hasattr(mod, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, or the error


@pytest.mark.parametrize(("where", "path"), dotted_references())
def test_dotted_references_resolve(where, path):
    resolve(path)


@pytest.mark.parametrize(("where", "module"), run_modules())
def test_run_modules_exist(where, module):
    assert importlib.util.find_spec(module) is not None, f"{where}: python -m {module}"


def test_the_scans_find_something():  # the three tests above are not vacuous
    assert any(m == "scheduler.testing" for _, m, _ in import_statements())
    assert ("docs/api.md", "scheduler.stores.redis.open_store") in dotted_references()
    assert any(m == "tests.faults.figures" for _, m in run_modules())


def test_resolve_rejects_stale_paths():
    with pytest.raises((ModuleNotFoundError, AttributeError)):
        resolve("scheduler.stores.sharded.ShardedStore")  # moved to scheduler.stores.redis
    with pytest.raises(AttributeError):
        resolve("scheduler.stores.redis.NoSuchStore")


# ---- repository paths named by the docs -------------------------------------------------

REPO_PATH = re.compile(r"(?<![\w./{-])((?:scheduler|workers|tests|lua|deploy|docs)/[\w./*-]*)")


def repository_paths() -> list[tuple[str, str]]:
    """Every path into the repository the docs name (``scheduler/stores/redis/protocol/urls.py``,
    ``tests/bench/results-failover.txt``, ``lua/*.lua``), in prose or code."""
    return sorted(
        {
            (rel(page), path.rstrip("."))
            for page in doc_pages()
            for path in REPO_PATH.findall(page.read_text())
        }
    )


def test_repository_paths_exist():
    paths = repository_paths()
    assert len(paths) >= 50
    gone = [
        f"{where}: {path}"
        for where, path in paths
        if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists())
    ]
    assert not gone, f"the docs name paths that do not exist: {gone}"


# ---- links out of README.md -------------------------------------------------------------


def slug(heading: str) -> str:
    """The anchor python-markdown's toc extension (MkDocs) gives a heading."""
    text = re.sub(r"[`*_]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", without_fences(page.read_text()))}


def test_readme_links_resolve():
    text = without_fences(README.read_text())
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) >= 10
    broken = []
    for link in links:
        if re.match(r"^[a-z]+:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        path = (ROOT / target) if target else README
        if not path.exists():
            broken.append(f"{link}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{link}: no heading with anchor #{anchor} in {target}")
    assert not broken, f"README.md: broken links: {broken}"


def test_readme_stays_a_front_door():
    size = len(README.read_bytes())
    assert size <= 16_000, f"README.md is {size} bytes: move detail into docs/, link to it"


def test_readme_monitor_section():
    assert re.search(r"(?m)^#+ Monitor with redis-cli$", README.read_text())


# ---- the Redis key table ----------------------------------------------------------------


def key_table() -> set[str]:
    """Key suffixes named in the first column of docs/shared-mode.md's key table:
    ``duetime:{prod}:due:<lane>`` -> ``due:``; a bare ``fence`` -> ``fence``."""
    text = (DOCS / "shared-mode.md").read_text()
    section = text[text.index("Key layout") :]
    names = set()
    for row in re.findall(r"(?m)^\| (`duetime:.*?) \| ", section):
        for span in INLINE.findall(row):
            span = span.removeprefix("duetime:{prod}:")
            names.add(re.sub(r"<[^>]+>$", "", span))
    return names


def code_keys() -> set[str]:
    from scheduler.stores.redis.protocol.keys import Keys

    keys = Keys("prod")
    found = {
        v.removeprefix(keys.prefix)
        for name, v in vars(keys).items()
        if isinstance(v, str) and name != "prefix"
    }
    for name, fn in vars(Keys).items():  # every key family keys.py builds from an argument
        if callable(fn) and not name.startswith("_"):
            found.add(getattr(keys, name)("X").removeprefix(keys.prefix).removesuffix("X"))
    return found


def test_key_table_matches_keys_py():
    table, code = key_table(), code_keys()
    assert len(code) >= 20
    assert not code - table, f"keys built by keys.py but not in the table: {code - table}"
    assert not table - code, f"keys in the table that keys.py does not build: {table - code}"


# ---- no machine-specific paths ----------------------------------------------------------

MACHINE_PATHS = [
    (re.compile(r"(?<![\w.~-])/(?:work|root|home)/"), "an absolute path of one machine"),
    (re.compile(r"(?<![\w.~-])/tmp/\S"), "a /tmp path (use a relative path or $(mktemp -d))"),
    (re.compile(r"(?:^|[\s'\"`(=:])(?:~|/)[^\s'\"`)]*\.venv"), "a virtualenv outside the repo"),
]


def portable_files() -> list[Path]:
    deploy = [p for p in (ROOT / "deploy").rglob("*") if p.is_file()]
    return [*doc_pages(), *sorted(deploy)]


def test_no_machine_specific_paths():
    found = []
    for path in portable_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue  # an image
        for n, line in enumerate(text.splitlines(), 1):
            for pattern, what in MACHINE_PATHS:
                if pattern.search(line):
                    found.append(f"{rel(path)}:{n}: {what}: {line.strip()}")
    assert not found, "use repository-relative paths:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "PYTHONPATH=/work/main python x.py",
        ". /root/venv/bin/activate",
        "cd /home/me/duetime",
        "mkdocs build -d /tmp/site",
        "/opt/envs/.venv/bin/python -m pytest",
        "source ~/.venv/bin/activate",
    ],
)
def test_machine_paths_are_caught(line):
    assert any(p.search(line) for p, _ in MACHINE_PATHS)


@pytest.mark.parametrize(
    "line",
    [
        ". .venv/bin/activate",
        "PYTHONPATH=. .venv-bench/bin/python tests/bench/bench_inprocess.py",
        "mountPath: /tmp",
        "tmpfs: [/tmp]",
        "WorkingDirectory=/srv/duetime",
    ],
)
def test_portable_paths_pass(line):
    assert not any(p.search(line) for p, _ in MACHINE_PATHS)


# The team's own contracts (SPEC.md, RELIABILITY.md, STYLE.md) are not in this repository:
# code and docs cite the project's pages instead, which a reader has.
_TEAM_CITATION = re.compile(r"\b(?:SPEC|RELIABILITY|STYLE)(?:\.md|\s*§)")


def _cited_files() -> list[Path]:
    kinds = ("*.py", "*.lua", "*.md", "*.toml", "*.yml", "*.yaml")
    roots = [ROOT / d for d in ("scheduler", "workers", "lua", "tests", "docs", "deploy")]
    found = [p for r in roots for k in kinds for p in r.rglob(k)]
    return [README, ROOT / "pyproject.toml", *found]


def test_nothing_cites_the_teams_private_contracts():
    cited = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in _cited_files()
        if p.name != "test_docs.py"
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if _TEAM_CITATION.search(line)
    ]
    assert cited == [], "cite docs/ pages instead:\n" + "\n".join(cited)
    assert _TEAM_CITATION.search("as SPEC §4 says") and _TEAM_CITATION.search("RELIABILITY.md")


def test_the_api_reference_covers_every_public_name():
    """docs/api.md renders each name ``scheduler`` exports (mkdocstrings, built strict in
    CI): a directive of its own, or the module that defines it (``scheduler.errors``)."""
    import scheduler

    text = (DOCS / "api.md").read_text()
    shown = set(re.findall(r"^::: ([\w.]+)", text, re.M))
    missing = [
        name
        for name in scheduler.__all__
        if f"scheduler.{name}" not in shown and getattr(scheduler, name).__module__ not in shown
    ]
    assert missing == [], f"docs/api.md lacks {missing}"
