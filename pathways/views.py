"""Operator pages of the pathway library."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from core.access import operator_required
from core.actors import actor_for
from pathways.models import MATURE_ACTIVE, MATURE_HIT_COUNT, Pathway
from pathways.services import MIN_CONFIDENCE, read_library_overview
from processors.panels import embedding_processor_badge


@dataclass(frozen=True)
class ModelRow:
    name: str
    embedded: int
    configured: bool


@dataclass(frozen=True)
class TriggerTypeRow:
    trigger_type: str
    active: int
    maturity: str


@dataclass(frozen=True)
class DemotionRow:
    reason: str
    meaning: str
    count: int


def model_rows(by_model: dict[str, int], configured: str) -> list[ModelRow]:
    """The configured model first, listed even before it has embedded anything; then the
    others, most rows first (what the backfill is moving pathways away from)."""
    counts = {configured: 0, **by_model}
    ordered = sorted(counts.items(), key=lambda item: (item[0] != configured, -item[1], item[0]))
    return [ModelRow(name, count, name == configured) for name, count in ordered]


def demotion_meaning(reason: str) -> str:
    if reason == Pathway.DemotionReason.COLD:
        return f"never reused, and older than {settings.PATHWAY_COLD_DAYS} days"
    if reason == Pathway.DemotionReason.STALE:
        return f"not reused in the last {settings.PATHWAY_STALE_DAYS} days"
    return "no reason recorded"


@operator_required
@require_safe
def pathway_library_page(request: HttpRequest) -> HttpResponse:
    """Library health for operators: totals, embedding models and the backfill, demotions,
    the most reused pathways and maturity per trigger type. Audited as a proxied stats read."""
    configured = settings.PATHWAY_EMBEDDING_MODEL
    # Counts only: the page shows refs to the operator, the audit trail does not keep them.
    stats = read_library_overview(actor=actor_for(request), embedding_model=configured)
    context: dict[str, Any] = {
        "stats": stats,
        "configured_model": configured,
        # The processor that receives the embedded texts, and whether it may (processors registry).
        "processor": embedding_processor_badge(configured),
        "models": model_rows(stats["by_model"], configured),
        "trigger_types": [
            TriggerTypeRow(kind, active, stats["maturity_by_trigger_type"][kind])
            for kind, active in stats["by_trigger_type"].items()
        ],
        "demotions": [
            DemotionRow(reason, demotion_meaning(reason), count)
            for reason, count in sorted(stats["demoted"]["by_reason"].items())
        ],
        "mature_active": MATURE_ACTIVE,
        "mature_hit_count": MATURE_HIT_COUNT,
        "min_confidence": MIN_CONFIDENCE,
    }
    return render(request, "pathways/pathway_library.html", context)
