"""Structured logs: one line per state change, with job id, invocation, attempt, lane and
replica as fields (``--log-format json`` prints them as one JSON object per line).

Levels: a job's routine lines (a first attempt ``started``, ``succeeded``) are DEBUG, so
a replica at its default level (INFO) writes no line per successful job; INFO and above
keep what an operator acts on: failures (ERROR), retries and lost leases (WARNING), a
later attempt's start (a retry or a takeover, INFO) and the replica's summary of each
period (INFO, ``scheduler.signals``)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

FIELDS = ("event", "job_id", "invocation", "attempt", "lane", "replica", "summary")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup(level: str = "INFO", fmt: str = "text") -> None:
    """Configure the root logger for a replica process."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
