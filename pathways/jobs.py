"""Scheduled work of the pathway library (schedules created by ``setup_schedules``)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from audit.services import job_run
from pathways.embeddings import EmbeddingClient, build_embedding_client, pathway_text
from pathways.models import Pathway
from pathways.services import demote_batch, store_embeddings

logger = logging.getLogger(__name__)

DECAY_ACTOR = "system:pathway_decay"
BACKFILL_ACTOR = "system:pathway_embedding_backfill"

SCHEDULES = [
    {"name": "pathways.embedding_backfill", "func": "pathways.jobs.backfill_embeddings", "schedule_type": "H"},
    {"name": "pathways.decay", "func": "pathways.jobs.decay_pathways", "schedule_type": "D"},
]


def decay_pathways(now: datetime | None = None) -> dict[str, int]:
    """Demote cold and stale pathways, non-destructively (``demoted_at`` + reason).

    cold: never reused and older than PATHWAY_COLD_DAYS (30); stale: last reused more
    than PATHWAY_STALE_DAYS (90) ago. Batches of 500, each demoted by
    ``services.demote_batch`` in its own transaction, with one ``reasoning.pathway.demoted``
    audit per row (counts and labels only). Idempotent: demoted rows are not touched again.
    """
    now = now or timezone.now()
    rules = [
        (Pathway.DemotionReason.COLD, Pathway.objects.cold(now - timedelta(days=settings.PATHWAY_COLD_DAYS))),
        (Pathway.DemotionReason.STALE, Pathway.objects.stale(now - timedelta(days=settings.PATHWAY_STALE_DAYS))),
    ]
    thresholds = {"cold_days": settings.PATHWAY_COLD_DAYS, "stale_days": settings.PATHWAY_STALE_DAYS}
    with job_run("pathway_decay", actor=DECAY_ACTOR, payload=thresholds) as counts:
        counts.update({str(reason): 0 for reason, _ in rules})
        for reason, candidates in rules:
            while ids := list(candidates.values_list("pk", flat=True)[:500]):
                counts[str(reason)] += demote_batch(candidates, ids, reason, now, actor=DECAY_ACTOR)
    return counts


def backfill_embeddings(client: EmbeddingClient | None = None, *, batch_size: int = 100) -> int:
    """Embed active pathways that have no vector or one from another model; idempotent.

    The embedding call (possibly a vendor HTTP request) runs outside any transaction;
    each batch is then written in one short transaction with its audit event
    (``services.store_embeddings``). Returns the number embedded.
    """
    client = client or build_embedding_client()
    with job_run("pathway_embedding_backfill", actor=BACKFILL_ACTOR, payload={"model": client.model_name}) as counts:
        counts.update(model=client.model_name, embedded=0)
        while batch := list(
            Pathway.objects.needing_embedding(client.model_name)
            .order_by("created_at")
            .values_list("pk", "trigger_type", "trigger_ref")[:batch_size]
        ):
            vectors = client.embed([pathway_text(kind, ref) for _, kind, ref in batch])
            counts["embedded"] += store_embeddings(
                [(pk, vector) for (pk, _, _), vector in zip(batch, vectors, strict=True)],
                model_name=client.model_name,
                actor=BACKFILL_ACTOR,
            )
    embedded: int = counts["embedded"]
    logger.info("pathway embedding backfill: %d embedded with %s", embedded, client.model_name)
    return embedded
