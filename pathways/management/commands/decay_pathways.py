"""Run the pathway decay job now (the daily job)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from pathways.jobs import decay_pathways


class Command(BaseCommand):
    help = "Demote cold (no hits, older than PATHWAY_COLD_DAYS) and stale (no hit in PATHWAY_STALE_DAYS) pathways."

    def handle(self, *args: Any, **options: Any) -> None:
        counts = decay_pathways()
        self.stdout.write(", ".join(f"{reason}: {n}" for reason, n in counts.items()))
