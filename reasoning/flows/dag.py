"""Layout of a flow's step graph for the operator DAG page: pure functions, no I/O.

``layout(steps)`` takes ``(id, parent_id, extra_parent_ids, position)`` tuples (ids are
any hashable values) and returns node boxes, edges and stubs in SVG user units:

1. Depth. A step whose parents are all absent from ``steps`` (a root, or a step whose
   parents are on an earlier page) has depth 0; any other step has depth 1 + the largest
   depth among its parents in ``steps``. Depths are computed in topological order, so the
   input order does not matter. The writers forbid cycles; should one slip through, its
   steps are placed as if the parents still unplaced were absent.
2. Rows. One row per depth, top to bottom, on a grid of slots shared by every row (so the
   gutters between slots line up). Within a row, steps are ordered by the mean slot of
   their parents (one barycentre pass that keeps crossings down), then by position.
3. Edges. Each parent in ``steps`` gets an edge from the parent's bottom to the child's
   top: a short S-curve between adjacent rows; an edge that skips rows runs down the
   gutter right of the parent, so it never crosses the boxes of the rows in between.
   Each parent absent from ``steps`` gets a short vertical stub above the child, labelled
   with the parent's position when ``outside_positions`` knows it.
4. Merges. Every edge and stub into a step with two or more parents has ``merge`` set.
   The incoming ends (stubs first, by position; then edges, by parent slot) are spread
   evenly across the child's top edge, so the arrivals stay visibly separate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from core.svg import s_curve

NODE_WIDTH = 208
NODE_HEIGHT = 62  # three lines: position and kind, agent, summary
GAP_X = 28  # between slots: the gutter that row-skipping edges run down
GAP_Y = 56  # between rows: room for the curves and for stubs with their labels
MARGIN = 16
STUB_LENGTH = 18
TOP = MARGIN + STUB_LENGTH + 14  # room above row 0 for stubs and their labels

SLOT = NODE_WIDTH + GAP_X
ROW = NODE_HEIGHT + GAP_Y


class StepRef(NamedTuple):
    id: Hashable
    parent_id: Hashable | None
    extra_parent_ids: Sequence[Hashable]
    position: int


@dataclass(frozen=True)
class Node:
    id: Hashable
    position: int
    depth: int
    slot: int
    x: float  # top-left corner of the box
    y: float
    parent_count: int  # every parent, on this graph or not

    @property
    def merge(self) -> bool:
        return self.parent_count > 1

    @property
    def centre_x(self) -> float:
        return self.x + NODE_WIDTH / 2


@dataclass(frozen=True)
class Edge:
    parent_id: Hashable
    child_id: Hashable
    merge: bool
    path: str  # SVG path data, from the parent's bottom to the child's top


@dataclass(frozen=True)
class Stub:
    """A parent that is not on this graph (an earlier page): a short line above the child."""

    parent_id: Hashable
    child_id: Hashable
    parent_position: int | None
    merge: bool
    x: float
    y1: float  # the free end, where the label sits
    y2: float  # on the child's top edge

    @property
    def label_y(self) -> float:
        return self.y1 - 4

    @property
    def label(self) -> str:
        return f"#{self.parent_position}" if self.parent_position is not None else "earlier"


@dataclass(frozen=True)
class Layout:
    nodes: list[Node]
    edges: list[Edge]
    stubs: list[Stub]
    width: float
    height: float


def parents_of(step: StepRef) -> list[Hashable]:
    """The step's parents, primary first, without repeats."""
    parents = [step.parent_id] if step.parent_id is not None else []
    parents.extend(step.extra_parent_ids)
    return list(dict.fromkeys(parents))


def depths(steps: Iterable[StepRef]) -> dict[Hashable, int]:
    """Depth of every step (rule 1 of the module docstring)."""
    by_id = {step.id: step for step in steps}
    inside = {step_id: [p for p in parents_of(step) if p in by_id] for step_id, step in by_id.items()}
    waiting = {step_id: len(parents) for step_id, parents in inside.items()}
    children: dict[Hashable, list[Hashable]] = defaultdict(list)
    for step_id, parents in inside.items():
        for parent in parents:
            children[parent].append(step_id)

    result: dict[Hashable, int] = {}
    ready = sorted((i for i, n in waiting.items() if n == 0), key=lambda i: by_id[i].position)
    # Kahn's algorithm; the leftovers (a cycle) go in position order once nothing is ready.
    leftovers = sorted(by_id, key=lambda i: by_id[i].position)
    while len(result) < len(by_id):
        if not ready:
            ready = [next(i for i in leftovers if i not in result)]
        step_id = ready.pop()
        if step_id in result:
            continue
        placed = [result[p] for p in inside[step_id] if p in result]
        result[step_id] = 1 + max(placed) if placed else 0
        for child in children[step_id]:
            waiting[child] -= 1
            if waiting[child] == 0 and child not in result:
                ready.append(child)
    return result


def layout(
    steps: Sequence[StepRef | tuple[Hashable, Hashable | None, Sequence[Hashable], int]],
    outside_positions: Mapping[Hashable, int] | None = None,
) -> Layout:
    """Place ``steps`` (see the module docstring). ``outside_positions`` maps the ids of
    parents that are not in ``steps`` to their positions, for the stubs' labels."""
    refs = [StepRef(*step) for step in steps]
    if not refs:
        return Layout(nodes=[], edges=[], stubs=[], width=2 * MARGIN, height=2 * MARGIN)
    outside_positions = outside_positions or {}
    depth = depths(refs)
    by_id = {ref.id: ref for ref in refs}
    rows: dict[int, list[StepRef]] = defaultdict(list)
    for ref in refs:
        rows[depth[ref.id]].append(ref)

    nodes: dict[Hashable, Node] = {}
    for row in sorted(rows):

        def order(ref: StepRef) -> tuple[float, int]:
            slots = [nodes[p].slot for p in parents_of(ref) if p in nodes]
            return (sum(slots) / len(slots) if slots else -1.0, ref.position)

        for slot, ref in enumerate(sorted(rows[row], key=order)):
            nodes[ref.id] = Node(
                id=ref.id,
                position=ref.position,
                depth=row,
                slot=slot,
                x=MARGIN + slot * SLOT,
                y=TOP + row * ROW,
                parent_count=len(parents_of(ref)),
            )

    edges: list[Edge] = []
    stubs: list[Stub] = []
    for ref in sorted(refs, key=lambda r: r.position):
        child = nodes[ref.id]
        parents = parents_of(ref)
        outside = sorted((p for p in parents if p not in by_id), key=lambda p: outside_positions.get(p, 0))
        inside = sorted((p for p in parents if p in by_id), key=lambda p: nodes[p].slot)
        ends = _spread(child.x, len(outside) + len(inside))
        for parent_id, x in zip(outside, ends, strict=False):
            stubs.append(
                Stub(
                    parent_id=parent_id,
                    child_id=ref.id,
                    parent_position=outside_positions.get(parent_id),
                    merge=child.merge,
                    x=x,
                    y1=child.y - STUB_LENGTH,
                    y2=child.y,
                )
            )
        for parent_id, x in zip(inside, ends[len(outside) :], strict=True):
            edges.append(
                Edge(parent_id=parent_id, child_id=ref.id, merge=child.merge, path=_path(nodes[parent_id], child, x))
            )

    slots = max(len(row) for row in rows.values())
    return Layout(
        nodes=sorted(nodes.values(), key=lambda n: n.position),
        edges=edges,
        stubs=stubs,
        width=2 * MARGIN + slots * SLOT,  # includes the last slot's gutter
        height=TOP + len(rows) * ROW - GAP_Y + MARGIN,
    )


def _spread(left: float, count: int) -> list[float]:
    """``count`` x positions evenly spaced across a box's top edge."""
    return [round(left + NODE_WIDTH * (i + 1) / (count + 1), 1) for i in range(count)]


def _path(parent: Node, child: Node, end_x: float) -> str:
    x1, y1 = parent.centre_x, parent.y + NODE_HEIGHT
    x2, y2 = end_x, child.y
    if child.depth - parent.depth == 1:
        return f"M{x1:g},{y1:g} {s_curve(x1, y1, x2, y2)}"
    # Down the gutter right of the parent's slot, clear of the rows in between.
    gutter = parent.x + NODE_WIDTH + GAP_X / 2
    first_gap, last_gap = y1 + GAP_Y / 2, y2 - GAP_Y / 2
    return (
        f"M{x1:g},{y1:g} {s_curve(x1, y1, gutter, first_gap)} "
        f"L{gutter:g},{last_gap:g} {s_curve(gutter, last_gap, x2, y2)}"
    )
