"""Gathering a flow's Decision Dimensions inputs (the formulas are in ``reasoning.dimensions``).

What the pathway library knows about a flow (its trigger family's maturity, the reuse
of the pathway it seeded) comes through ``register_library_facts``: the pathways app
registers its provider at start-up, so ``reasoning`` never imports it. The provider also
counts the flow's aborted siblings in its statement (one round trip a close). Without one,
the library contributes nothing (sparse family, no hits) and the siblings are counted here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from core.bulk import bound_cursor, opaque_array, sql_constant, text_array, uuid_array
from core.replica import reading_connection
from reasoning.dimensions import LOW_CONFIDENCE, DimensionInputs, radar
from reasoning.models import ReasoningFlow, ReasoningStep

VERDICT_KIND = "verdict"


@dataclass(init=False)
class LibraryFacts:
    family_maturity: str
    hit_count: int
    demoted: bool
    # The aborted flows with the flow's trigger, itself excluded, when the provider counted them in
    # its own statement (one round trip for the close's radar); None: ``aborted_siblings_of`` counts.
    aborted_siblings: int | None

    # An explicit __init__ (the dataclass makes __eq__ and __repr__): compiled (core.compiled), it is a
    # native call, where a generated one runs as Python (a frozen one through object.__setattr__).
    def __init__(
        self,
        family_maturity: str = "sparse",
        hit_count: int = 0,
        demoted: bool = False,
        aborted_siblings: int | None = None,
    ) -> None:
        self.family_maturity = family_maturity
        self.hit_count = hit_count
        self.demoted = demoted
        self.aborted_siblings = aborted_siblings


# Given the flows (and which of them are being created, so no pathway can name them yet),
# their facts by flow id (flows the library knows nothing about may be left out).
LibraryFactsProvider = Callable[[Sequence[ReasoningFlow], Collection[uuid.UUID]], Mapping[uuid.UUID, LibraryFacts]]
_library_facts: LibraryFactsProvider | None = None


def register_library_facts(provider: LibraryFactsProvider | None) -> None:
    global _library_facts
    _library_facts = provider


def library_facts_of(
    flows: Sequence[ReasoningFlow], new: Collection[uuid.UUID] = ()
) -> Mapping[uuid.UUID, LibraryFacts]:
    return _library_facts(flows, new) if _library_facts and flows else {}


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


@dataclass(init=False)
class StepFacts:
    """What the radar reads of a step."""

    kind: str
    agent: str
    confidence: float | None
    outputs: Any

    # An explicit __init__ (the dataclass makes __eq__ and __repr__): compiled (core.compiled), it is a
    # native call, where a generated one runs as Python (a frozen one through object.__setattr__).
    def __init__(self, kind: str, agent: str, confidence: float | None, outputs: Any) -> None:
        self.kind = kind
        self.agent = agent
        self.confidence = confidence
        self.outputs = outputs


# The aborted flows of each trigger (type and ref) among the given ones, and which of the given
# flows are among them (so that each is left out of its own count). Parameters: the flows' ids,
# the triggers' types and refs. Planned once per connection, not at every close: the state is a
# constant of the text (so that a generic plan reads the partial index
# reasoning_flow_aborted_trigger) and the arrays are opaque to the planner (core.bulk's sql_constant
# and opaque_array).
ABORTED_SIBLINGS_SQL = f"""
SELECT f.trigger_type, f.trigger_ref, count(*), array_agg(f.id) FILTER (WHERE f.id = ANY(%s::uuid[]))
  FROM reasoning_flow f
  JOIN unnest({opaque_array("text[]")}, {opaque_array("text[]")}) AS t(trigger_type, trigger_ref)
    ON f.trigger_type = t.trigger_type AND f.trigger_ref = t.trigger_ref
 WHERE f.flow_state = {sql_constant(ReasoningFlow.State.ABORTED.value)}
 GROUP BY f.trigger_type, f.trigger_ref
"""  # noqa: S608 (constants)


def aborted_siblings_params(flows: Sequence[ReasoningFlow]) -> list[Any] | None:
    """``ABORTED_SIBLINGS_SQL``'s parameters for ``flows``; None when there is nothing to count."""
    pairs = sorted({(flow.trigger_type, flow.trigger_ref) for flow in flows})
    if not pairs:
        return None
    return [
        uuid_array(flow.id for flow in flows),
        text_array(kind for kind, _ in pairs),
        text_array(ref for _, ref in pairs),
    ]


def aborted_siblings_from(
    flows: Sequence[ReasoningFlow], rows: Iterable[tuple[str, str, int, Sequence[uuid.UUID] | None]]
) -> dict[uuid.UUID, int]:
    """Each flow's aborted siblings, from ``ABORTED_SIBLINGS_SQL``'s rows."""
    counts = {(trigger_type, trigger_ref): (count, set(own or ())) for trigger_type, trigger_ref, count, own in rows}
    result = {}
    for flow in flows:
        count, own = counts.get((flow.trigger_type, flow.trigger_ref), (0, set()))
        result[flow.id] = count - (flow.id in own)
    return result


def aborted_siblings_of(flows: Sequence[ReasoningFlow]) -> dict[uuid.UUID, int]:
    """For each flow, the aborted flows with its trigger (type and ref), itself excluded: one query."""
    params = aborted_siblings_params(flows)
    if params is None:
        return {}
    with bound_cursor(reading_connection()) as cursor:
        cursor.execute(ABORTED_SIBLINGS_SQL, params)
        return aborted_siblings_from(flows, cursor.fetchall())


def inputs_of(
    flow: ReasoningFlow, steps: Sequence[StepFacts], *, facts: LibraryFacts, aborted_siblings: int, now: datetime
) -> DimensionInputs:
    """The radar's inputs for a flow, from its steps in position order."""
    confidences = [step.confidence for step in steps if step.confidence is not None]
    decided_at = flow.closed_at or flow.created_at
    return DimensionInputs(
        step_confidences=confidences,
        evidence_hits=evidence_hits_of(flow.outcome_metrics),
        distinct_step_kinds=len({step.kind for step in steps}),
        hit_count=facts.hit_count,
        family_maturity=facts.family_maturity,
        age_days=max(0.0, (now - decided_at).total_seconds() / 86400),
        verdicts=verdicts_of((step.agent, step.outputs) for step in steps if step.kind == VERDICT_KIND),
        aborted_siblings=aborted_siblings,
        demoted=facts.demoted,
        low_confidence_steps=sum(1 for c in confidences if c < LOW_CONFIDENCE),
        guard_failed=flow.patient_safe_summary is False,
    )


def radars_of(
    flows: Sequence[ReasoningFlow],
    steps: Mapping[uuid.UUID, Sequence[StepFacts]],
    *,
    now: datetime,
    new: Collection[uuid.UUID] = (),
) -> dict[uuid.UUID, dict[str, dict[str, Any]]]:
    """The radars of several flows whose steps the caller has (closing flows): a few queries
    whatever their number (the library's facts, with the aborted siblings when the library counts
    them). ``new``: flows no pathway can name yet (created in this transaction, or still active
    until it commits)."""
    facts = library_facts_of(flows, new)
    uncounted = [flow for flow in flows if facts.get(flow.id, LibraryFacts()).aborted_siblings is None]
    siblings = aborted_siblings_of(uncounted) if uncounted else {}
    return {
        flow.id: radar(
            inputs_of(
                flow,
                steps.get(flow.id, ()),
                facts=facts.get(flow.id, LibraryFacts()),
                aborted_siblings=_siblings(facts.get(flow.id), siblings.get(flow.id, 0)),
                now=now,
            )
        )
        for flow in flows
    }


def _siblings(facts: LibraryFacts | None, counted: int) -> int:
    return facts.aborted_siblings if facts is not None and facts.aborted_siblings is not None else counted


def flow_radar(flow: ReasoningFlow, *, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """The radar of one stored flow (older flows closed before snapshots existed)."""
    rows = ReasoningStep.objects.filter(flow_id=flow.id).order_by("position")
    steps = [
        StepFacts(kind, agent, confidence, outputs)
        for kind, agent, confidence, outputs in rows.values_list("kind", "agent", "confidence", "outputs")
    ]
    return radars_of([flow], {flow.id: steps}, now=now or timezone.now())[flow.id]
