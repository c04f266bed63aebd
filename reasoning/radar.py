"""Gathering a flow's Decision Dimensions inputs (the formulas are in ``reasoning.dimensions``).

What the pathway library knows about a flow (its trigger family's maturity, the reuse
of the pathway it seeded) comes through ``register_library_facts``: the pathways app
registers its provider at start-up, so ``reasoning`` never imports it. Without one,
the library contributes nothing (sparse family, no hits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from reasoning.dimensions import LOW_CONFIDENCE, DimensionInputs, radar
from reasoning.models import ReasoningFlow, ReasoningStep

VERDICT_KIND = "verdict"


@dataclass(frozen=True)
class LibraryFacts:
    family_maturity: str = "sparse"
    hit_count: int = 0
    demoted: bool = False


_library_facts: Callable[[ReasoningFlow], LibraryFacts] | None = None


def register_library_facts(provider: Callable[[ReasoningFlow], LibraryFacts] | None) -> None:
    global _library_facts
    _library_facts = provider


def verdicts_of(verdict_steps: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """The last verdict of each agent, from ``(agent, outputs)`` of verdict steps in order.

    The label is ``outputs["verdict"]`` when the agent recorded one, else "concluded"
    (the step concluded the flow's outcome).
    """
    verdicts: dict[str, str] = {}
    for agent, outputs in verdict_steps:
        label = outputs.get("verdict") if isinstance(outputs, dict) else None
        verdicts[agent] = label if isinstance(label, str) and label else "concluded"
    return verdicts


def evidence_hits_of(metrics: Any) -> int | None:
    hits = metrics.get("evidence_hits") if isinstance(metrics, dict) else None
    return hits if isinstance(hits, int) and not isinstance(hits, bool) else None


def aborted_siblings(flow: ReasoningFlow) -> int:
    return (
        ReasoningFlow.objects.filter(
            trigger_type=flow.trigger_type, trigger_ref=flow.trigger_ref, flow_state=ReasoningFlow.State.ABORTED
        )
        .exclude(pk=flow.pk)
        .count()
    )


def flow_inputs(flow: ReasoningFlow, *, now: datetime | None = None) -> DimensionInputs:
    now = now or timezone.now()
    steps = list(ReasoningStep.objects.filter(flow_id=flow.pk).order_by("position").values_list("kind", "confidence"))
    verdict_steps = (
        ReasoningStep.objects.filter(flow_id=flow.pk, kind=VERDICT_KIND)
        .order_by("position")
        .values_list("agent", "outputs")
    )
    confidences = [confidence for _, confidence in steps if confidence is not None]
    facts = _library_facts(flow) if _library_facts else LibraryFacts()
    decided_at = flow.closed_at or flow.created_at
    return DimensionInputs(
        step_confidences=confidences,
        evidence_hits=evidence_hits_of(flow.outcome_metrics),
        distinct_step_kinds=len({kind for kind, _ in steps}),
        hit_count=facts.hit_count,
        family_maturity=facts.family_maturity,
        age_days=max(0.0, (now - decided_at).total_seconds() / 86400),
        verdicts=verdicts_of(verdict_steps),
        aborted_siblings=aborted_siblings(flow),
        demoted=facts.demoted,
        low_confidence_steps=sum(1 for c in confidences if c < LOW_CONFIDENCE),
        guard_failed=flow.patient_safe_summary is False,
    )


def flow_radar(flow: ReasoningFlow, *, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    return radar(flow_inputs(flow, now=now))
