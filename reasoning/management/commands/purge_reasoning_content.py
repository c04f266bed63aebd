"""Run the reasoning-content retention job now."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from reasoning.jobs import purge_reasoning_content


class Command(BaseCommand):
    help = "Delete raw chain-of-thought older than REASONING_CONTENT_RETENTION_DAYS (default 30); keeps char counts."

    def handle(self, *args: Any, **options: Any) -> None:
        purged = purge_reasoning_content()
        days = settings.REASONING_CONTENT_RETENTION_DAYS
        self.stdout.write(f"purged raw reasoning from {purged} step(s) older than {days} days")
