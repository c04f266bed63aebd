"""Run the pathway embedding backfill now (the hourly job)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from pathways.jobs import backfill_embeddings


class Command(BaseCommand):
    help = "Embed active pathways without a vector (or with another model's) using PATHWAY_EMBEDDING_MODEL."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"embedded {backfill_embeddings()} pathway(s)")
