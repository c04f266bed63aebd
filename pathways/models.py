"""Pathways: reusable decision templates extracted from high-confidence completed flows.

The pgvector extension is created by this app's first migration.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Count, Q
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from pathways.embeddings import EMBEDDING_DIMENSIONS


def parent_ref(ref: str) -> str:
    ref = ref.rstrip("/")
    return ref.rsplit("/", 1)[0] if "/" in ref else ""


class PathwayQuerySet(models.QuerySet["Pathway"]):
    def active(self) -> PathwayQuerySet:
        return self.filter(demoted_at__isnull=True)

    def needing_embedding(self, model_name: str) -> PathwayQuerySet:
        """Active pathways with no vector, or a vector from another model."""
        return self.active().filter(Q(embedding__isnull=True) | ~Q(embedding_model=model_name))

    def cold(self, created_before: datetime) -> PathwayQuerySet:
        """Never reused and older than the cut-off."""
        return self.active().filter(hit_count=0, created_at__lt=created_before)

    def stale(self, last_hit_before: datetime) -> PathwayQuerySet:
        """Reused once, but not since the cut-off."""
        return self.active().filter(last_hit_at__lt=last_hit_before)

    def counts_by_trigger_type(self) -> dict[str, dict[str, int]]:
        """Per trigger type: active pathways, and active ones with hit_count >= 3."""
        rows = self.values("trigger_type").annotate(
            active=Count("id", filter=Q(demoted_at__isnull=True)),
            high_hit=Count("id", filter=Q(demoted_at__isnull=True, hit_count__gte=MATURE_HIT_COUNT)),
        )
        return {row["trigger_type"]: {"active": row["active"], "high_hit": row["high_hit"]} for row in rows}


MATURE_ACTIVE = 5
MATURE_HIT_COUNT = 3


class Maturity(models.TextChoices):
    """How well the library covers a trigger family (a family property, not a column)."""

    MATURE = "mature"
    GROWING = "growing"
    SPARSE = "sparse"


def maturity(active: int, high_hit: int) -> Maturity:
    """mature: >= 5 active and >= 1 reused 3+ times; growing: >= 1 active; sparse: none active."""
    if active >= MATURE_ACTIVE and high_hit >= 1:
        return Maturity.MATURE
    if active >= 1:
        return Maturity.GROWING
    return Maturity.SPARSE


class Pathway(models.Model):
    class DemotionReason(models.TextChoices):
        COLD = "cold_no_hits_30d"
        STALE = "stale_no_recent_hits_90d"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    trigger_type = models.CharField(max_length=100)
    trigger_ref = models.CharField(max_length=500, blank=True, default="")
    # trigger_ref without its last path segment ("bp/visit/3" -> "bp/visit"): siblings
    # share it, so the matcher finds prefix_ref candidates with one index range.
    parent_ref = models.CharField(max_length=500, blank=True, default="", editable=False)
    step_kinds = ArrayField(models.CharField(max_length=64), default=list)
    agents = ArrayField(models.CharField(max_length=100), default=list)
    # One pathway per flow: extraction is idempotent.
    seed_flow = models.OneToOneField(
        "reasoning.ReasoningFlow", on_delete=models.PROTECT, related_name="pathway", editable=False
    )
    confidence = models.FloatField()
    hit_count = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=64, blank=True, default="")
    demoted_at = models.DateTimeField(null=True, blank=True)
    demotion_reason = models.CharField(max_length=64, choices=DemotionReason.choices, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    objects = PathwayQuerySet.as_manager()

    class Meta:
        db_table = "pathways_pathway"
        indexes = [
            # Semantic candidates: cosine HNSW; trigger_type/model/demoted filters run with
            # hnsw.iterative_scan so filtered queries still return full result lists.
            HnswIndex(
                name="pathways_pathway_embed_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            # Structural candidates: exact and prefix refs within a trigger type (prefix via LIKE 'x%').
            models.Index(
                fields=["trigger_type", "trigger_ref"],
                name="pathways_pathway_type_ref",
                opclasses=["varchar_pattern_ops", "varchar_pattern_ops"],
                condition=Q(demoted_at__isnull=True),
            ),
            # Structural candidates: siblings and children of a ref, most reused first.
            models.Index(
                fields=["trigger_type", "parent_ref", "-hit_count"],
                name="pathways_pathway_type_parent",
                condition=Q(demoted_at__isnull=True),
            ),
            # Structural candidates: the most reused pathways of a trigger type.
            models.Index(
                fields=["trigger_type", "-hit_count"],
                name="pathways_pathway_type_hits",
                condition=Q(demoted_at__isnull=True),
            ),
            # The decay job's cold rule: active pathways never hit, by age.
            models.Index(
                fields=["created_at"], name="pathways_pathway_cold", condition=Q(demoted_at__isnull=True, hit_count=0)
            ),
            # The decay job's stale rule: active pathways by last hit.
            models.Index(fields=["last_hit_at"], name="pathways_pathway_stale", condition=Q(demoted_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"{self.trigger_type} pathway {self.id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.parent_ref = parent_ref(self.trigger_ref)  # derived, never set by hand
        super().save(*args, **kwargs)


class PathwayHit(models.Model):
    """A reuse an operator recorded from the Research Console, kept so that it can be undone.

    Undoing sets ``undone_at`` (the row stays, so a second undo is told it was already
    undone) and takes the hit back from the pathway: ``hit_count`` down by one, and
    ``last_hit_at`` back to ``previous_last_hit_at`` when this was the latest hit.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    pathway = models.ForeignKey(Pathway, on_delete=models.CASCADE, related_name="hits", db_index=False)
    actor = models.CharField(max_length=200)
    # The pathway's last_hit_at before this hit: what an undo restores.
    previous_last_hit_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    undone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "pathways_pathway_hit"
        indexes = [
            # An undo re-links the pathway's later hits (previous_last_hit_at = this hit's time),
            # and the console finds an operator's undoable hits among its candidates.
            models.Index(fields=["pathway", "created_at"], name="pathways_pathway_hit_pathway"),
        ]

    def __str__(self) -> str:
        return f"hit on {self.pathway_id} by {self.actor}"
