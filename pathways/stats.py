"""Library statistics for operators: counts only (no refs, no text)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TypedDict

from django.db.models import Count, Q

from pathways.models import Maturity, Pathway, maturity

TOP_HITS = 5


class Demoted(TypedDict):
    total: int
    by_reason: dict[str, int]


class TopHit(TypedDict):
    id: uuid.UUID
    trigger_type: str
    hit_count: int


class LibraryCounts(TypedDict):
    total: int
    active: int
    embedded: int
    by_model: dict[str, int]
    by_trigger_type: dict[str, int]
    maturity_by_trigger_type: dict[str, Maturity]
    demoted: Demoted


class PathwayStats(LibraryCounts):
    """The API's published shape (``PathwayStatsSerializer``)."""

    top_hits: list[TopHit]


class LibraryTopHit(TopHit):
    trigger_ref: str
    last_hit_at: datetime | None


class LibraryOverview(LibraryCounts):
    """What the library page reads: the API's counts, the backfill's remaining work, and
    the top hits with their refs."""

    needing_embedding: int
    top_hits: list[LibraryTopHit]


def pathway_stats() -> PathwayStats:
    totals = Pathway.objects.aggregate(
        total=Count("id"),
        active=Count("id", filter=Q(demoted_at__isnull=True)),
        embedded=Count("id", filter=Q(embedding_model__gt="")),
        demoted=Count("id", filter=Q(demoted_at__isnull=False)),
    )
    by_model = dict(
        Pathway.objects.filter(embedding_model__gt="").values_list("embedding_model").annotate(n=Count("id")).order_by()
    )
    per_type = Pathway.objects.counts_by_trigger_type()
    by_trigger_type = {kind: counts["active"] for kind, counts in sorted(per_type.items())}
    maturity_by_trigger_type = {
        kind: maturity(counts["active"], counts["high_hit"]) for kind, counts in sorted(per_type.items())
    }
    demoted_by_reason = dict(
        Pathway.objects.filter(demoted_at__isnull=False)
        .values_list("demotion_reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    top_hits: list[TopHit] = [
        {"id": pk, "trigger_type": kind, "hit_count": hits}
        for pk, kind, hits in Pathway.objects.active()
        .filter(hit_count__gt=0)
        .order_by("-hit_count", "created_at")
        .values_list("id", "trigger_type", "hit_count")[:TOP_HITS]
    ]
    return {
        "total": totals["total"],
        "active": totals["active"],
        "embedded": totals["embedded"],
        "by_model": by_model,
        "by_trigger_type": by_trigger_type,
        "maturity_by_trigger_type": maturity_by_trigger_type,
        "demoted": {"total": totals["demoted"], "by_reason": demoted_by_reason},
        "top_hits": top_hits,
    }


def library_overview(embedding_model: str) -> LibraryOverview:
    """What the operator's library page shows: ``pathway_stats()`` plus two things the API
    leaves out (its output is a published contract, so it is extended here, not there).

    - ``needing_embedding``: active pathways with no vector from ``embedding_model`` (the
      embedding backfill's remaining work; 0 once it has converged);
    - ``top_hits`` rows gain ``trigger_ref`` and ``last_hit_at``; the ranking is the API's.

    Seven queries whatever the library's size: pathway_stats()'s five, the backfill count,
    and the top hits' refs (none when there are no top hits).
    """
    stats = pathway_stats()
    needing_embedding = Pathway.objects.needing_embedding(embedding_model).count()
    ranked = stats["top_hits"]
    details = {
        row["id"]: row
        for row in Pathway.objects.filter(pk__in=[row["id"] for row in ranked]).values(
            "id", "trigger_ref", "last_hit_at"
        )
    }
    # A pathway deleted between the two reads drops out rather than showing half a row.
    top_hits: list[LibraryTopHit] = [
        {
            **row,
            "trigger_ref": details[row["id"]]["trigger_ref"],
            "last_hit_at": details[row["id"]]["last_hit_at"],
        }
        for row in ranked
        if row["id"] in details
    ]
    return {**stats, "needing_embedding": needing_embedding, "top_hits": top_hits}
