"""The turn view: every flow of one correlation id (``trace_id``) as one graph.

One agent turn may run several agents, each recording its own flow under the turn's
``trace_id``. ``read_turn_for_admin`` (``reasoning.turns.services``) loads them all
(bounded: ``MAX_TURN_FLOWS`` flows, ``MAX_TURN_STEPS`` steps), in time order, and ``turn_edges`` links their steps:

1. ``parent``: a step's primary parent (``parent_step``), within its flow.
2. ``merge``: each of a step's ``extra_parent_ids``, within its flow.
3. ``cross_flow``, between two flows of the turn, each with a ``reason``:

   - ``trigger_ref``: flow B's ``trigger_ref`` is flow A's id (B was started to act on A):
     A's last step -> B's first step.
   - ``step_ref``: a step of B has ``memory_claim_ref`` or ``decision_graph_node_ref`` equal
     to flow A's id (the step used A's result): A's last step -> that step.
   - ``memory_claim_ref`` / ``decision_graph_node_ref``: steps of two or more flows carry the
     same value (one claim written by one agent and judged by another): the first step in
     time order that carries it -> the first step carrying it in each other flow.
   - ``nested_agent``: flow B was opened by an agent span nested in the run of flow A (OTLP:
     B's ``parent_span_id`` is the span of one of A's steps, or the span that opened A): that
     step (else A's first step) -> B's first step.
   - ``backlog_dispatch``: flow B was dispatched from the research backlog for a request that
     flow A's weak result produced. Only the research backlog knows that (its request's
     ``source_flow`` and ``completed_flow``), so it registers a provider
     (``register_flow_links``) and ``reasoning`` never imports it: A's last step -> B's first.

   "First" and "last" are in the turn's time order (a step's ``started_at``, else its
   ``created_at``; then its position). A link whose flow has no steps in the turn draws no
   edge; links to flows outside the turn are not drawn.

Blank refs never link, and neither does a ref compared with its own flow.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInput
from core.svg import elbow
from reasoning.flows import dag
from reasoning.models import ReasoningFlow, ReasoningStep

MAX_TRACE_ID = 100  # ReasoningFlow.trace_id's length


MAX_TURN_FLOWS = 50


MAX_TURN_STEPS = 1000


SHARED_REFS = ("memory_claim_ref", "decision_graph_node_ref")


@dataclass(frozen=True)
class TurnEdge:
    source: uuid.UUID  # step ids
    target: uuid.UUID
    kind: str  # parent, merge, cross_flow
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Turn:
    trace_id: str
    # In created_at order; each flow's steps in the order the flow route reads them.
    flows: list[ReasoningFlow]
    steps: dict[uuid.UUID, list[ReasoningStep]]
    edges: list[TurnEdge]
    # More flows or steps than the bounds: the first ones in time order are shown.
    truncated: bool

    @property
    def step_count(self) -> int:
        return sum(len(steps) for steps in self.steps.values())


def check_trace_id(trace_id: str) -> str:
    if not trace_id or len(trace_id) > MAX_TRACE_ID:
        raise InvalidInput(f"must be 1 to {MAX_TRACE_ID} characters", field="trace_id")
    return trace_id


def turn_edges(
    flows: Sequence[ReasoningFlow],
    steps: Sequence[ReasoningStep],
    backlog_links: Iterable[tuple[uuid.UUID, uuid.UUID]] = (),
) -> list[TurnEdge]:
    """The edges of the module docstring. ``steps`` in the turn's time order; parents not
    among them (beyond the bounds) draw no edge."""
    loaded = {step.pk for step in steps}
    edges: list[TurnEdge] = []
    for step in steps:
        if step.parent_step_id in loaded:
            edges.append(TurnEdge(step.parent_step_id, step.pk, "parent", "parent_step"))
        for extra in dict.fromkeys(step.extra_parent_ids):
            if extra in loaded and extra != step.parent_step_id:
                edges.append(TurnEdge(extra, step.pk, "merge", "extra_parent"))

    first: dict[uuid.UUID, ReasoningStep] = {}
    last: dict[uuid.UUID, ReasoningStep] = {}
    for step in steps:
        first.setdefault(step.flow_id, step)
        last[step.flow_id] = step
    flow_ids = {str(flow.pk): flow.pk for flow in flows}

    def flow_named(value: str) -> uuid.UUID | None:
        try:
            return flow_ids.get(str(uuid.UUID(value)))
        except ValueError:
            return None

    cross: list[TurnEdge] = []

    def link(source_flow: uuid.UUID | None, target: ReasoningStep | None, reason: str) -> None:
        if source_flow is None or target is None or source_flow == target.flow_id or source_flow not in last:
            return
        cross.append(TurnEdge(last[source_flow].pk, target.pk, "cross_flow", reason))

    for flow in flows:
        if flow.trigger_ref:
            link(flow_named(flow.trigger_ref), first.get(flow.pk), "trigger_ref")
    by_span = {step.span_id: step for step in steps if step.span_id}
    openers = {flow.root_span_id: flow.pk for flow in flows if flow.root_span_id}
    for flow in flows:
        target = first.get(flow.pk)
        if not flow.parent_span_id or target is None:
            continue
        caller = by_span.get(flow.parent_span_id)
        if caller is None and (opener := openers.get(flow.parent_span_id)) is not None:
            caller = first.get(opener)
        if caller is not None and caller.flow_id != flow.pk:
            cross.append(TurnEdge(caller.pk, target.pk, "cross_flow", "nested_agent"))
    for source, dispatched in backlog_links:
        link(source, first.get(dispatched), "backlog_dispatch")

    for field in SHARED_REFS:
        origin: dict[str, ReasoningStep] = {}
        seen: set[tuple[str, uuid.UUID]] = set()
        for step in steps:
            value = getattr(step, field)
            if not value:
                continue
            link(flow_named(value), step, "step_ref")
            start = origin.setdefault(value, step)
            if start.flow_id != step.flow_id and (value, step.flow_id) not in seen:
                seen.add((value, step.flow_id))
                cross.append(TurnEdge(start.pk, step.pk, "cross_flow", field))
    # One edge per pair and reason, in the order found.
    edges.extend(dict.fromkeys(cross))
    return edges


def turn_flow_count(trace_id: str) -> int:
    """How many flows share ``trace_id`` (the flow page's link to its turn), up to one past the bound."""
    return ReasoningFlow.objects.filter(trace_id=trace_id)[: MAX_TURN_FLOWS + 1].count()


CLUSTER_LABEL = 30  # the band at the top of a cluster holding its label


CLUSTER_GAP = 28  # between stacked clusters


CLUSTER_MIN_WIDTH = dag.NODE_WIDTH + 2 * dag.MARGIN + 48  # room for the label


OUTER = 8  # around the whole drawing


LANE_GAP = 14  # between the vertical lanes of cross-flow edges


# dag.layout keeps room above its first row for stubs (parents on an earlier page); the label band
# takes most of it (a stub, only drawn when the turn was truncated, may touch the label).
STUB_ROOM = dag.TOP - dag.MARGIN


@dataclass(frozen=True)
class Cluster:
    flow: ReasoningFlow
    layout: dag.Layout
    x: float
    y: float  # the cluster's top; its steps are drawn from y + CLUSTER_LABEL
    width: float
    height: float

    @property
    def inner_y(self) -> float:
        return self.y + CLUSTER_LABEL - STUB_ROOM


@dataclass(frozen=True)
class CrossEdge:
    edge: TurnEdge
    path: str


@dataclass(frozen=True)
class TurnLayout:
    clusters: list[Cluster]
    cross_edges: list[CrossEdge]
    width: float
    height: float


def layout_turn(turn: Turn) -> TurnLayout:
    """The turn as one drawing:

    1. Each flow's steps are laid out by ``dag.layout`` (parent and merge edges inside it).
    2. The flows are stacked top to bottom in time order, each in a cluster: a rounded box
       with a label band on top, as wide as its graph (at least one node wide).
    3. Each cross-flow edge leaves its source node's right side, runs along a lane of its own
       right of every cluster, and enters the target node's right side: it never crosses a
       cluster's label, and edges stay apart however many there are.
    """
    clusters: list[Cluster] = []
    y = float(OUTER)
    for flow in turn.flows:
        steps = turn.steps[flow.pk]
        graph = dag.layout([(s.pk, s.parent_step_id, s.extra_parent_ids, s.position) for s in steps])
        width = max(graph.width, CLUSTER_MIN_WIDTH)
        height = CLUSTER_LABEL + graph.height - STUB_ROOM
        clusters.append(Cluster(flow=flow, layout=graph, x=OUTER, y=y, width=width, height=height))
        y += height + CLUSTER_GAP
    # Absolute boxes of the nodes: (left, top).
    boxes = {
        node.id: (cluster.x + node.x, cluster.inner_y + node.y) for cluster in clusters for node in cluster.layout.nodes
    }
    cross = [edge for edge in turn.edges if edge.kind == "cross_flow"]
    right = OUTER + max(cluster.width for cluster in clusters)
    cross_edges: list[CrossEdge] = []
    for lane, edge in enumerate(cross, start=1):
        (sx, sy), (tx, ty) = boxes[edge.source], boxes[edge.target]
        # Leaving above a node's middle, arriving below it: a node's two kinds of ends stay apart.
        x1, y1 = sx + dag.NODE_WIDTH, sy + dag.NODE_HEIGHT / 2 - 8
        x2, y2 = tx + dag.NODE_WIDTH, ty + dag.NODE_HEIGHT / 2 + 8
        lane_x = right + lane * LANE_GAP
        cross_edges.append(CrossEdge(edge, elbow(x1, y1, lane_x, x2, y2)))
    width = right + len(cross) * LANE_GAP + OUTER + (LANE_GAP if cross else 0)
    return TurnLayout(clusters=clusters, cross_edges=cross_edges, width=width, height=y - CLUSTER_GAP + OUTER)
