"""Run the stale sweep now (the scheduled job runs it every 5 minutes)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from research_backlog.jobs import sweep_stale


class Command(BaseCommand):
    help = "Return research requests stuck in 'dispatched' to the queue, or fail them at the retry cap."

    def handle(self, *args: Any, **options: Any) -> None:
        counts = sweep_stale()
        self.stdout.write(f"recovered={counts['recovered']} failed_after_retries={counts['failed_after_retries']}")
