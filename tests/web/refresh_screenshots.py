"""Refresh the web console's screenshots the docs use (docs/img/web-*.png).

    PYTHONPATH=. python tests/web/refresh_screenshots.py

Runs the browser tests (tests/web/test_browser.py) with ``DUETIME_SCREENSHOTS`` set to a
fresh temporary folder, then copies the pages docs/web.md shows into docs/img/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["overview", "jobs", "job", "running", "failed", "events", "refused-by-redis"]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="duetime-screenshots-") as folder:
        env = {**os.environ, "DUETIME_SCREENSHOTS": folder, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "pytest", "-q", "tests/web/test_browser.py"]
        done = subprocess.run(argv, cwd=ROOT, env=env)
        if done.returncode != 0:
            print("the browser tests failed: no screenshot was copied", file=sys.stderr)
            return done.returncode
        for name in DOCS:
            target = ROOT / "docs" / "img" / f"web-{name}.png"
            shutil.copyfile(Path(folder) / f"{name}.png", target)
            print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
