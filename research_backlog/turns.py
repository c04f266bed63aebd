"""The research backlog's links between flows, for the turn view (``reasoning.turns.graph``).

A flow dispatched from the backlog (``dispatched_from_backlog``) answers a request; the
request names the flow whose weak result produced it (``source_flow``) and, once completed,
the flow that answered it (``completed_flow``). Registered at start-up so that ``reasoning``
never imports this app.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from reasoning.models import ReasoningFlow
from research_backlog.models import ResearchRequest


def backlog_links(flows: Sequence[ReasoningFlow]) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """``(source flow id, dispatched flow id)`` for each of ``flows`` that completed a backlog
    request produced by a flow: one query, none when no flow was dispatched from the backlog."""
    dispatched = [flow.pk for flow in flows if flow.dispatched_from_backlog]
    if not dispatched:
        return []
    rows = ResearchRequest.objects.filter(completed_flow_id__in=dispatched, source_flow_id__isnull=False)
    return [(source, done) for source, done in rows.values_list("source_flow_id", "completed_flow_id")]
