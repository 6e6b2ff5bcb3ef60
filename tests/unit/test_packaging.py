"""The wheel ships both packages, the Lua scripts and the console script."""

from __future__ import annotations

import pathlib
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
