"""Run the TTL purge now (the scheduled job runs it daily)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from research_backlog.jobs import purge_expired


class Command(BaseCommand):
    help = "Delete completed and failed research requests older than BACKLOG_TTL_DAYS (by completed_at)."

    def handle(self, *args: Any, **options: Any) -> None:
        counts = purge_expired()
        self.stdout.write(f"deleted={counts['deleted']}")
