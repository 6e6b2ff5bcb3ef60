"""Tasks of the web console's tests (the browser tests' replicas import this module)."""

from __future__ import annotations

from scheduler import current_invocation, task


@task("tests.web.boom")
def boom(**kwargs: object) -> None:
    raise RuntimeError("boom <b>not bold</b>")


@task("tests.web.ok")
def ok(**kwargs: object) -> dict[str, int]:
    return {"n": 1}


@task("tests.web.slow")
def slow(seconds: float = 30.0, **kwargs: object) -> None:
    current_invocation().token.wait(seconds)  # ends early when stopped from the console


@task("tests.web.leak")
def leak(card: str = "", **kwargs: object) -> None:
    raise RuntimeError(f"could not charge card {card}\nretry with {card}")
