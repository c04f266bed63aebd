"""Scheduled work of the pathway library (schedules created by ``setup_schedules``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from audit.actions import Action
from audit.services import job_run, record
from pathways.embeddings import EmbeddingClient, build_embedding_client, pathway_text
from pathways.models import Pathway

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
    than PATHWAY_STALE_DAYS (90) ago. One ``reasoning.pathway.demoted`` audit per row
    (counts and labels only). Idempotent: demoted rows are not touched again.
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
                counts[str(reason)] += _demote(candidates, ids, reason, now)
    return counts


@transaction.atomic
def _demote(rule: QuerySet[Pathway], ids: Sequence[object], reason: str, now: datetime) -> int:
    # Lock the rows and re-check the rule: a pathway reused (or demoted) by someone else
    # since it was picked waits for that commit, then drops out here.
    rows = list(rule.filter(pk__in=ids).select_for_update().values("pk", "hit_count", "created_at", "trigger_type"))
    Pathway.objects.filter(pk__in=[row["pk"] for row in rows]).update(demoted_at=now, demotion_reason=reason)
    for row in rows:
        record(
            Action.PATHWAY_DEMOTED,
            actor=DECAY_ACTOR,
            target=("pathways.pathway", row["pk"]),
            payload={
                "pathway_id": str(row["pk"]),
                "reason": reason,
                "hit_count": row["hit_count"],
                "age_days": (now - row["created_at"]).days,
                "trigger_type": row["trigger_type"],
            },
        )
    return len(rows)


def backfill_embeddings(client: EmbeddingClient | None = None, *, batch_size: int = 100) -> int:
    """Embed active pathways that have no vector or one from another model; idempotent.

    The embedding call (possibly a vendor HTTP request) runs outside any transaction;
    each batch is then written in one short transaction. Returns the number embedded.
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
            with transaction.atomic():
                for (pk, _, _), vector in zip(batch, vectors, strict=True):
                    Pathway.objects.filter(pk=pk).update(embedding=vector, embedding_model=client.model_name)
            counts["embedded"] += len(batch)
    embedded: int = counts["embedded"]
    logger.info("pathway embedding backfill: %d embedded with %s", embedded, client.model_name)
    return embedded
