"""A task that only some replicas have (``--import tests.faults.witness_new``): the code a
rolling deploy adds. Its runs are recorded by the witness like every witness task."""

from __future__ import annotations

from scheduler import task
from tests.faults.witness import _record


@task("witness.new")
def new() -> None:
    _record()
