"""Drain the research backlog once now, whatever BACKLOG_CONSUMER_ENABLED says."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from research_backlog.jobs import consume


class Command(BaseCommand):
    help = (
        "Pull up to --limit pending research requests and hand each to the configured dispatcher "
        "(RESEARCH_DISPATCHER_URL). With none configured every pulled row fails with no_dispatcher_configured, "
        "so this asks for --yes in that case."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit", type=int, default=None, help="At most this many (default BACKLOG_CONSUMER_BATCH)."
        )
        parser.add_argument(
            "--yes", action="store_true", help="Run even without a dispatcher (fails every pulled row)."
        )

    def handle(self, *args: Any, limit: int | None, yes: bool, **options: Any) -> None:
        if limit is not None and limit < 1:
            raise CommandError("--limit must be at least 1")
        if not settings.RESEARCH_DISPATCHER_URL and not yes:
            raise CommandError(
                "no dispatcher configured (RESEARCH_DISPATCHER_URL): every pulled row would fail with "
                "no_dispatcher_configured; pass --yes to do that anyway"
            )
        counts = consume(limit=limit)
        self.stdout.write(" ".join(f"{key}={value}" for key, value in counts.items()))
