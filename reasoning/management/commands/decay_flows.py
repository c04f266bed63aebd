"""Run the flow decay job now: abort flows active longer than FLOW_DECAY_HOURS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from reasoning.jobs import decay_stale_flows


class Command(BaseCommand):
    help = "Abort flows left active longer than FLOW_DECAY_HOURS (default 24) with reason 'timeout'."

    def handle(self, *args: Any, **options: Any) -> None:
        aborted = decay_stale_flows()
        self.stdout.write(f"aborted {aborted} stale flow(s)")
