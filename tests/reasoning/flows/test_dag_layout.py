"""reasoning.flows.dag: the layered layout of a flow's steps (pure functions, no database)."""

from __future__ import annotations

import random

from reasoning.flows import dag
from reasoning.flows.dag import NODE_HEIGHT, NODE_WIDTH, layout


def chain(count: int, start: int = 1) -> list[tuple[int, int | None, list[int], int]]:
    """Steps start..start+count-1, each the child of the one before (the first of ``start - 1``)."""
    return [(p, (p - 1) if p > 1 else None, [], p) for p in range(start, start + count)]


def test_depth_is_one_more_than_the_deepest_parent() -> None:
    # 1 -> 2 -> 3, 1 -> 4, and 5 merges 3 and 4: depth 1 + max(2, 1).
    steps = [(1, None, [], 1), (2, 1, [], 2), (3, 2, [], 3), (4, 1, [], 4), (5, 4, [3], 5)]

    assert dag.depths([dag.StepRef(*s) for s in steps]) == {1: 0, 2: 1, 3: 2, 4: 1, 5: 3}


def test_depth_does_not_depend_on_input_order() -> None:
    steps = [(1, None, [], 1), (2, 1, [], 2), (3, 2, [], 3), (4, 1, [], 4), (5, 4, [3], 5)]
    shuffled = steps[:]
    random.Random(7).shuffle(shuffled)

    assert dag.depths([dag.StepRef(*s) for s in shuffled]) == dag.depths([dag.StepRef(*s) for s in steps])


def test_rows_follow_depth_and_siblings_share_a_row() -> None:
    result = layout([(1, None, [], 1), (2, 1, [], 2), (3, 1, [], 3), (4, 2, [3], 4)])
    node = {n.id: n for n in result.nodes}

    assert node[2].y == node[3].y > node[1].y
    assert node[4].y > node[2].y
    assert node[2].x != node[3].x
    # Nothing overlaps, and everything fits in the declared size.
    for n in result.nodes:
        assert n.x >= 0 and n.x + NODE_WIDTH <= result.width
        assert n.y >= 0 and n.y + NODE_HEIGHT <= result.height


def test_one_edge_per_parent_and_merge_edges_are_flagged() -> None:
    result = layout([(1, None, [], 1), (2, 1, [], 2), (3, 1, [], 3), (4, 2, [3], 4)])

    edges = {(e.parent_id, e.child_id): e.merge for e in result.edges}
    assert edges == {(1, 2): False, (1, 3): False, (2, 4): True, (3, 4): True}
    assert [n.id for n in result.nodes if n.merge] == [4]
    assert result.stubs == []


def test_merge_ends_are_spread_across_the_childs_top() -> None:
    result = layout([(1, None, [], 1), (2, 1, [], 2), (3, 1, [], 3), (4, 2, [3], 4)])

    ends = {e.path.rsplit(" ", 1)[-1] for e in result.edges if e.child_id == 4}
    assert len(ends) == 2  # two distinct arrival points, not one


def test_edge_skipping_rows_runs_down_the_gutter_not_through_boxes() -> None:
    # 1 -> 2 -> 3 and 1 -> 3 (a merge skipping row 1): all three in slot 0.
    result = layout([(1, None, [], 1), (2, 1, [], 2), (3, 2, [1], 3)])
    skip = next(e for e in result.edges if (e.parent_id, e.child_id) == (1, 3))
    node_2 = next(n for n in result.nodes if n.id == 2)

    # The vertical run is right of node 2's box.
    vertical_x = float(skip.path.split(" L", 1)[1].split(",", 1)[0])
    assert vertical_x > node_2.x + NODE_WIDTH


def test_parents_missing_from_the_input_become_labelled_stubs() -> None:
    # Page 3 of a chain: step 201's parent (200) is on page 2; 230 also merges step 5.
    steps = chain(50, start=201)
    steps[29] = (230, 229, [5], 230)

    result = layout(steps, outside_positions={200: 200, 5: 5})

    stubs = {(s.parent_id, s.child_id): s for s in result.stubs}
    assert set(stubs) == {(200, 201), (5, 230)}
    assert stubs[(200, 201)].label == "#200"
    assert not stubs[(200, 201)].merge
    assert stubs[(5, 230)].merge  # 230 has two parents: one here, one earlier
    assert (229, 230) in {(e.parent_id, e.child_id) for e in result.edges}
    # The step whose only parent is elsewhere starts the first row; the stub sits above it.
    first = next(n for n in result.nodes if n.id == 201)
    assert first.depth == 0
    assert stubs[(200, 201)].y1 < stubs[(200, 201)].y2 == first.y
    assert stubs[(200, 201)].label_y >= 0


def test_stub_without_a_known_position_says_earlier() -> None:
    result = layout([("b", "a", [], 2)])

    assert [s.label for s in result.stubs] == ["earlier"]


def test_empty_input_is_an_empty_drawing() -> None:
    result = layout([])

    assert (result.nodes, result.edges, result.stubs) == ([], [], [])
    assert result.width > 0 and result.height > 0


def test_a_cycle_does_not_hang_and_places_every_step() -> None:
    # The writers forbid cycles; the layout still terminates if one slips through.
    result = layout([(1, 2, [], 1), (2, 1, [], 2), (3, None, [], 3)])

    assert sorted(n.position for n in result.nodes) == [1, 2, 3]


def test_hundred_step_chain_is_one_column() -> None:
    result = layout(chain(100))

    assert len(result.nodes) == 100
    assert len({n.x for n in result.nodes}) == 1
    assert len({n.y for n in result.nodes}) == 100
    assert len(result.edges) == 99


def test_repeated_parent_counts_once() -> None:
    result = layout([(1, None, [], 1), (2, 1, [1], 2)])

    assert len(result.edges) == 1
    assert not result.nodes[1].merge
