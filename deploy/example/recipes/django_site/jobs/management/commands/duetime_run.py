"""``python -m django duetime_run``: a duetime replica for the site's namespace, with
Django set up (tasks may use the ORM). The same as ``duetime run`` with the settings'
URL, namespace and task modules; SIGTERM/SIGINT stop it cleanly (docs/operating.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run a duetime replica for settings.DUETIME (URL, namespace, task modules)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workers", type=int, default=None)
        parser.add_argument("--log-level", default="INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        from scheduler.cli import main

        cfg = settings.DUETIME
        argv = ["run", "--redis", cfg["REDIS_URL"], "--namespace", cfg["NAMESPACE"]]
        for module in cfg["TASKS"]:
            argv += ["--import", module]
        argv += ["--workers", str(options["workers"] or cfg.get("WORKERS", 4))]
        argv += ["--log-level", options["log_level"]]
        main.main(args=argv, prog_name="duetime_run")  # exits with duetime's exit code
