"""Reading a turn for an operator, audited: every flow of a trace id with its steps and edges.

A provider registered with ``register_flow_links`` (the research backlog's) adds the
``backlog_dispatch`` links only it knows of, so ``reasoning`` never imports it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence

from django.db import transaction
from django.db.models.functions import Coalesce

from audit.actions import Action
from audit.services import Event, record_many
from core.errors import NotFound
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.turns.graph import MAX_TURN_FLOWS, MAX_TURN_STEPS, Turn, check_trace_id, turn_edges

# Given a turn's flows, the (source flow id, dispatched flow id) pairs the provider knows of.
FlowLinksProvider = Callable[[Sequence[ReasoningFlow]], Iterable[tuple[uuid.UUID, uuid.UUID]]]


_flow_links: FlowLinksProvider | None = None


def register_flow_links(provider: FlowLinksProvider | None) -> None:
    global _flow_links
    _flow_links = provider


@transaction.atomic
def read_turn_for_admin(trace_id: str, *, actor: str, include_reasoning: bool = False) -> Turn:
    """Every flow of ``trace_id`` with its steps and the turn's edges, for an operator (audited).

    Audits ``admin.reasoning.turn.read`` (target the turn; the flow ids and counts). With
    ``include_reasoning`` (the caller checked ``reasoning.cot.read``) raw chain-of-thought
    is loaded too, and each flow gets the flow route's
    ``admin.reasoning.flow.reasoning_content_read`` event, so a flow's trail shows every
    read of its reasoning. Unknown trace id: NotFound. Queries: the flows, their steps, the
    registered link provider's, one audit statement; whatever the number of flows.
    """
    check_trace_id(trace_id)
    flows = list(ReasoningFlow.objects.filter(trace_id=trace_id).order_by("created_at", "id")[: MAX_TURN_FLOWS + 1])
    if not flows:
        raise NotFound(f"no flows with trace_id {trace_id!r}")
    truncated = len(flows) > MAX_TURN_FLOWS or sum(flow.step_count for flow in flows[:MAX_TURN_FLOWS]) > MAX_TURN_STEPS
    flows = flows[:MAX_TURN_FLOWS]
    hidden = ["inputs_pii", "outputs_pii"] + ([] if include_reasoning else ["reasoning_content"])
    # The turn's steps in time order (as read_flow_for_admin orders a flow's), the first MAX_TURN_STEPS.
    ordered = list(
        ReasoningStep.objects.filter(flow_id__in=[flow.pk for flow in flows])
        .defer(*hidden)
        .order_by(Coalesce("started_at", "created_at"), "position", "flow_id")[:MAX_TURN_STEPS]
    )
    steps: dict[uuid.UUID, list[ReasoningStep]] = {flow.pk: [] for flow in flows}
    for step in ordered:
        steps[step.flow_id].append(step)
    links = list(_flow_links(flows)) if _flow_links is not None else []
    turn = Turn(
        trace_id=trace_id,
        flows=flows,
        steps=steps,
        edges=turn_edges(flows, ordered, links),
        truncated=truncated,
    )
    events = [
        Event(
            Action.ADMIN_TURN_READ,
            actor,
            ("reasoning.turn", trace_id),
            {
                "flow_count": len(flows),
                "step_count": len(ordered),
                "truncated": truncated,
                "flow_ids": [str(flow.pk) for flow in flows],
            },
        )
    ]
    if include_reasoning:
        events += [
            Event(
                Action.ADMIN_FLOW_REASONING_READ,
                actor,
                flow,
                {"steps_with_reasoning": sum(1 for s in steps[flow.pk] if s.reasoning_content), "via": "turn"},
            )
            for flow in flows
        ]
    record_many(events)
    return turn
