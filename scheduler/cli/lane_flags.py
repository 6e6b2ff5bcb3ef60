"""``duetime run --lane``: the flag's text read as a lane's size and kind (a ``Lane``,
docs/lanes.md), each lane named once, refused in one line (exit 2) when it is not one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click


def parse(texts: Iterable[str]) -> dict[str, Any]:
    """Every ``--lane``: name -> size (threads) or ``Lane``. A lane named twice, or the
    default lane given a thread count (``--workers`` is its size), is refused."""
    sizes: dict[str, Any] = {}
    for text in texts:
        name, lane = one(text)
        if name in sizes:
            raise click.BadParameter(f"lane {name!r} is given twice", param_hint="'--lane'")
        if name == "default" and isinstance(lane, int):
            raise click.BadParameter(
                "the default lane's size is --workers (give --workers N instead)",
                param_hint="'--lane'",
            )
        sizes[name] = lane
    return sizes


def one(text: str) -> tuple[str, Any]:
    """``NAME=SIZE`` (threads) or ``NAME=SIZE:process[,OPTION=VALUE...]`` (a ``Lane``)."""
    name, _, rest = text.partition("=")
    size, colon, kind = rest.partition(":")
    if not name or not size.isdigit() or int(size) < 1:
        raise click.BadParameter(
            f"expected NAME=SIZE or NAME=SIZE:process with SIZE >= 1, got {text!r}",
            param_hint="'--lane'",
        )
    if not colon:
        return name, int(size)
    isolation, *options = kind.split(",")
    if isolation not in ("process", "thread"):
        raise click.BadParameter(
            f"lane {name!r}: expected ':process' after the size, got {':' + kind!r}",
            param_hint="'--lane'",
        )
    from scheduler.lane import Lane

    given: dict[str, Any] = {}
    for option in options:
        key, _, value = option.partition("=")
        if key in given:
            raise click.BadParameter(f"lane {name!r}: {key} is given twice", param_hint="'--lane'")
        if key not in _LANE_OPTIONS or not value:
            raise click.BadParameter(
                f"lane {name!r}: unknown option {option!r}; a process lane takes "
                f"{', '.join(f'{k}=N' for k in _LANE_OPTIONS)}",
                param_hint="'--lane'",
            )
        try:
            given[key] = _LANE_OPTIONS[key](value)
        except ValueError:
            raise click.BadParameter(
                f"lane {name!r}: {key} must be a number, got {value!r}", param_hint="'--lane'"
            ) from None
    try:
        return name, Lane(int(size), "process" if isolation == "process" else "thread", **given)
    except ValueError as exc:
        raise click.BadParameter(f"lane {name!r}: {exc}", param_hint="'--lane'") from None


_LANE_OPTIONS: dict[str, Any] = {"max_jobs": int, "max_memory_mb": float, "kill_grace": float}


def shown(served: dict[str, int], sizes: dict[str, Any]) -> dict[str, Any]:
    """The lanes as the start line shows them: a process lane as ``"2:process"``."""
    lanes = {k: f"{v.workers}:{v.isolation}" for k, v in sizes.items() if not isinstance(v, int)}
    return {**served, **lanes}


def served(workers: int, sizes: dict[str, Any]) -> dict[str, int]:
    """Each lane's worker count, as the engine counts them (``--workers``: the default's)."""
    return {"default": workers, **{k: size(v) for k, v in sizes.items()}}


def size(lane: Any) -> int:
    return lane if isinstance(lane, int) else int(lane.workers)
