"""The wheel ships both packages, the Lua scripts and the console script."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("hatchling")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (path,) = out.glob("duetime-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_contains_packages_and_every_lua_file(wheel):
    names = set(wheel.namelist())
    assert "scheduler/__init__.py" in names and "workers/__init__.py" in names
    assert "scheduler/py.typed" in names
    lua_files = [f for f in (ROOT / "lua").rglob("*") if f.is_file()]
    assert any(f.parent.name == "include" for f in lua_files)
    for f in lua_files:
        assert f"scheduler/_lua/{f.relative_to(ROOT / 'lua').as_posix()}" in names


def test_wheel_contains_the_web_consoles_templates_and_static_files(wheel):
    """``duetime web`` loads nothing from the internet: its templates, CSS, JavaScript and
    the vendored uPlot (with its license) ship in the wheel."""
    names = set(wheel.namelist())
    web = ROOT / "scheduler" / "web"
    files = [f for d in ("templates", "static") for f in (web / d).iterdir()]
    assert len(files) >= 15
    for f in files:
        assert f"scheduler/web/{f.relative_to(web).as_posix()}" in names
    assert "scheduler/web/static/uPlot.LICENSE" in names


def test_wheel_declares_the_console_script(wheel):
    (ep,) = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "duetime = scheduler.cli:main" in wheel.read(ep).decode()


def test_python_dash_m_scheduler_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "scheduler", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "demo" in out.stdout


def test_the_wheel_installs_and_runs_as_the_readme_says(wheel, tmp_path):
    """README, Install: a wheel built from the checkout installs and works from where it
    was installed (scheduler, workers and the Lua scripts; the extras it declares)."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(target), wheel.filename],
        check=True,
    )  # fmt: skip
    code = (
        "import scheduler, workers\n"
        "from scheduler.stores.redis.protocol import scripts\n"
        "print(scheduler.__file__); print(workers.__file__); print(scripts.lua_dir())\n"
        "print(len(scripts.source('claim')) > 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert all(line.startswith(str(target)) for line in lines[:3]), lines
    assert lines[2].endswith("_lua") and lines[3] == "True"
    version = subprocess.run(
        [sys.executable, "-m", "scheduler", "--version"], cwd=tmp_path, env=env,
        capture_output=True, text=True,
    )  # fmt: skip
    assert version.returncode == 0 and "0.1.0" in version.stdout
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    extras = set(re.findall(r"(?m)^Provides-Extra: (\S+)$", wheel.read(meta).decode()))
    assert {"redis", "metrics", "embedded"} <= extras
    readme = (ROOT / "README.md").read_text()
    install = readme[readme.index("## Install") :]
    named = {e for group in re.findall(r"\.whl\)\[([\w,]+)\]|'\.\[([\w,]+)\]'", install)
             for part in group for e in part.split(",") if e}  # fmt: skip
    assert named and named <= extras, named - extras


REGISTRY_LINE = re.compile(r"pip install [\"']?duetime\[")
NOT_YET: set[str] = set()  # files allowed a bare registry line (none)


def test_registry_install_lines_say_once_published():
    """Nothing is published under the name duetime yet: every `pip install 'duetime[...]'`
    the docs, the deploy files or the code show says so (on its line or the one before)."""
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    files += [p for p in (ROOT / "deploy").rglob("*") if p.is_file()]
    files += [p for pkg in ("scheduler", "workers") for p in (ROOT / pkg).rglob("*.py")]
    found, bare = 0, []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if REGISTRY_LINE.search(line):
                found += 1
                context = " ".join(lines[max(0, i - 1) : i + 1])
                if "once" not in context or "published" not in context:
                    bare.append(f"{rel}:{i + 1}: {line.strip()}")
    assert found >= 3  # README, deploy/README.md, duetime.service
    assert all(b.split(":")[0] in NOT_YET for b in bare), bare


@pytest.mark.parametrize("extra", ["redis", "embedded", "web"])
def test_an_extra_that_talks_to_redis_brings_the_client(extra):
    """`pip install 'duetime[embedded]'` then `duetime demo` ended in "the Redis client is
    not installed": the server came without the client that talks to it."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(req.replace(" ", "").startswith("redis[hiredis]") for req in extras[extra])


def test_a_projects_own_workers_package_is_named_not_a_deep_import_error(tmp_path):
    """duetime's import names are scheduler and workers: a project's ``workers/`` found
    first on sys.path hid duetime's, and ``from scheduler import JobScheduler`` failed with
    "No module named 'workers.acks'". Now one line names both."""
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "__init__.py").write_text("send_email = None\n")
    code = "from scheduler import JobScheduler"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: duetime's package 'workers'")
    assert f"is hidden by {tmp_path / 'workers'}" in last and "rename yours" in last
    ok = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True)
    assert ok.returncode == 0, ok.stderr
