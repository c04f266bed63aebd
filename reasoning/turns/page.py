"""/dashboard/admin/reasoning/turns/{trace_id}: one agent turn (every flow of a trace id) as one
graph, for operators.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from core.access import operator_required
from core.actors import actor_for
from core.errors import InvalidInput, NotFound
from reasoning.flows import dag
from reasoning.flows.search import flow_row
from reasoning.flows.services import STEPS_PER_PAGE
from reasoning.models import ReasoningStep
from reasoning.turns import graph
from reasoning.turns.services import read_turn_for_admin


@operator_required
@require_safe
def admin_turn_page(request: HttpRequest, trace_id: str) -> HttpResponse:
    """Every flow of ``trace_id`` as one graph (``reasoning.turns.graph``): a labelled cluster per
    flow in time order, cross-flow edges between them, each node linking to its step on its
    flow's page; then the list of the turn's flows. Audited like the turn route. A trace id
    no flow has (or one too long to be one) renders the 404 page."""
    try:
        turn = read_turn_for_admin(trace_id, actor=actor_for(request))
    except (NotFound, InvalidInput):
        return render(request, "reasoning/admin_turn_not_found.html", status=404)
    drawing = graph.layout_turn(turn)
    steps: dict[Hashable, ReasoningStep] = {step.pk: step for flow_steps in turn.steps.values() for step in flow_steps}
    numbers = {cluster.flow.pk: number for number, cluster in enumerate(drawing.clusters, start=1)}
    clusters = [
        {
            "cluster": cluster,
            "number": numbers[cluster.flow.pk],
            "nodes": [
                {"node": node, "step": steps[node.id], "href": _turn_step_href(cluster.flow.pk, node.position)}
                for node in cluster.layout.nodes
            ],
        }
        for cluster in drawing.clusters
    ]
    positions = {step.pk: (step.flow_id, step.position) for step in steps.values()}
    cross = [
        {
            "edge": item.edge,
            "path": item.path,
            "source": f"{numbers[positions[item.edge.source][0]]}.{positions[item.edge.source][1]}",
            "target": f"{numbers[positions[item.edge.target][0]]}.{positions[item.edge.target][1]}",
        }
        for item in drawing.cross_edges
    ]
    context = {
        "turn": turn,
        "agents": sorted({flow.agent for flow in turn.flows if flow.agent}),
        "graph": {
            "width": drawing.width,
            "height": drawing.height,
            # At its own size (several clusters are tall already); a wider one scrolls in its panel.
            "display_width": round(drawing.width),
            "display_height": round(drawing.height),
            "clusters": clusters,
            "cross_edges": cross,
            "inner_offset": graph.CLUSTER_LABEL - graph.STUB_ROOM,
        },
        "box": {"width": dag.NODE_WIDTH, "height": dag.NODE_HEIGHT},
        "rows": [
            {**flow_row(flow, timezone.now()), "number": numbers[flow.pk], "shown": len(turn.steps[flow.pk])}
            for flow in turn.flows
        ],
    }
    return render(request, "reasoning/admin_turn.html", context)


def _turn_step_href(flow_id: uuid.UUID, position: int) -> str:
    """A step's timeline entry on its flow's page (the page of steps that holds it)."""
    page = (position - 1) // STEPS_PER_PAGE + 1
    return reverse("admin-flow-page", args=[flow_id]) + (f"?page={page}" if page > 1 else "") + f"#step-{position}"
