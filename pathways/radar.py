"""Decision Dimensions for pathways: every match candidate's radar, and what the library
tells a flow's radar (registered with ``reasoning.radar`` at start-up).

A candidate's inputs: its seed flow's weakest-step confidence, the seed's evidence hits
and the pathway's distinct step kinds (Coverage), its hit count and its trigger family's
maturity (Maturity), days since the last reuse or creation (Recency), the seed flow's
verdicts (Consensus), and demotion plus aborted flows with the same trigger (Risk).
Candidates are scored in four queries, whatever their number.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from pathways.models import MATURE_ACTIVE, MATURE_HIT_COUNT, Pathway, maturity
from reasoning.dimensions import LOW_CONFIDENCE, DimensionInputs, radar
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.radar import VERDICT_KIND, LibraryFacts, evidence_hits_of, verdicts_of


def family_maturity(trigger_types: Sequence[str]) -> dict[str, str]:
    """Maturity of each trigger family, in one query whose probes stop early: it counts at
    most MATURE_ACTIVE active pathways and asks whether one was reused MATURE_HIT_COUNT
    times (both walk the (trigger_type, -hit_count) index of active pathways), so a
    family of 10,000 pathways costs what a family of 5 does."""
    types = sorted(set(trigger_types))
    if not types:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT t.kind,
                   (SELECT count(*) FROM (SELECT 1 FROM pathways_pathway p
                                          WHERE p.trigger_type = t.kind AND p.demoted_at IS NULL LIMIT %s) s),
                   EXISTS (SELECT 1 FROM pathways_pathway p
                           WHERE p.trigger_type = t.kind AND p.demoted_at IS NULL AND p.hit_count >= %s)
            FROM unnest(%s::text[]) AS t(kind)
            """,
            [MATURE_ACTIVE, MATURE_HIT_COUNT, types],
        )
        return {kind: maturity(active, int(high_hit)) for kind, active, high_hit in cursor.fetchall()}


# A radar's inputs, loaded for the final candidates in one query (with the seed flow's metrics).
RADAR_FIELDS = (
    "id",
    "trigger_type",
    "trigger_ref",
    "hit_count",
    "confidence",
    "step_kinds",
    "last_hit_at",
    "created_at",
    "demoted_at",
    "seed_flow_id",
    "seed_flow__outcome_metrics",
)
RADAR_ATTRIBUTES = [name for name in RADAR_FIELDS if "__" not in name and name != "id"]


def library_facts(flow: ReasoningFlow) -> LibraryFacts:
    """The flow's trigger family's maturity and the pathway it seeded, if any."""
    seeded = Pathway.objects.filter(seed_flow_id=flow.pk).values("hit_count", "demoted_at").first()
    return LibraryFacts(
        family_maturity=family_maturity([flow.trigger_type]).get(flow.trigger_type, "sparse"),
        hit_count=seeded["hit_count"] if seeded else 0,
        demoted=bool(seeded and seeded["demoted_at"]),
    )


def candidate_radars(pathways: Sequence[Pathway], *, now: datetime | None = None) -> list[dict[str, dict[str, Any]]]:
    """One radar per pathway, in order, in four queries whatever their number: the radar
    fields with the seed flows' metrics, the families' maturity, the seeds' verdict
    steps, and the aborted flows sharing their triggers. The given pathways get the
    radar fields filled in."""
    if not pathways:
        return []
    now = now or timezone.now()
    loaded = Pathway.objects.select_related("seed_flow").only(*RADAR_FIELDS).in_bulk([p.pk for p in pathways])
    for given in pathways:
        # The matcher loads a few fields only; fill in the rest so callers that show them
        # (last_hit_at, step_kinds) do not fetch them one pathway at a time.
        for name in RADAR_ATTRIBUTES:
            setattr(given, name, getattr(loaded[given.pk], name))
    pathways = [loaded[p.pk] for p in pathways]
    families = family_maturity([p.trigger_type for p in pathways])
    seed_ids = {p.seed_flow_id for p in pathways if p.seed_flow_id}
    metrics = {p.seed_flow_id: p.seed_flow.outcome_metrics for p in pathways if p.seed_flow_id and p.seed_flow}
    verdict_rows: dict[Any, list[tuple[str, Any]]] = {}
    for flow_id, agent, outputs in (
        ReasoningStep.objects.filter(flow_id__in=seed_ids, kind=VERDICT_KIND)
        .order_by("flow_id", "position")
        .values_list("flow_id", "agent", "outputs")
    ):
        verdict_rows.setdefault(flow_id, []).append((agent, outputs))
    triggers = Q()
    for p in pathways:
        triggers |= Q(trigger_type=p.trigger_type, trigger_ref=p.trigger_ref)
    aborted = {
        (row["trigger_type"], row["trigger_ref"]): row["n"]
        for row in ReasoningFlow.objects.filter(triggers, flow_state=ReasoningFlow.State.ABORTED)
        .values("trigger_type", "trigger_ref")
        .annotate(n=Count("pk"))
        .order_by()
    }
    radars = []
    for p in pathways:
        last_used = p.last_hit_at or p.created_at
        radars.append(
            radar(
                DimensionInputs(
                    step_confidences=[p.confidence],
                    evidence_hits=evidence_hits_of(metrics.get(p.seed_flow_id)),
                    distinct_step_kinds=len(set(p.step_kinds)),
                    hit_count=p.hit_count,
                    family_maturity=families.get(p.trigger_type, "sparse"),
                    age_days=max(0.0, (now - last_used).total_seconds() / 86400),
                    verdicts=verdicts_of(verdict_rows.get(p.seed_flow_id, [])),
                    aborted_siblings=aborted.get((p.trigger_type, p.trigger_ref), 0),
                    demoted=p.demoted_at is not None,
                    low_confidence_steps=int(p.confidence < LOW_CONFIDENCE),
                    guard_failed=False,  # only guard-passed flows seed pathways
                )
            )
        )
    return radars
