"""``with flow.step(...)`` times its block into ``latency_ms`` (issue 41, part 6), and no step is
held back longer than the batcher's tick, a flush or the flow's next record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FakeIngest
from reasoning_flow_sdk import ReasoningFlowRecorder


@pytest.fixture
def recorder(ingest: FakeIngest, spool_dir: Path) -> Iterator[ReasoningFlowRecorder]:
    made = ReasoningFlowRecorder(ingest.url, "token", spool_dir, enabled=True, flush_interval=0.02)
    yield made
    made.close(timeout=1)


def sent_steps(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> dict[str, dict[str, object]]:
    assert recorder.flush(timeout=10)
    return {step["summary_text"]: step for step in ingest.steps()}


def test_a_step_used_as_a_with_block_carries_the_blocks_duration(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    with recorder.flow("user_question", "sdk/timed", agent="researcher") as flow:
        with flow.step("tool_call", "Called the lab service"):
            time.sleep(0.12)
        flow.step("verdict", "Reached a verdict")

    steps = sent_steps(recorder, ingest)
    assert 120 <= steps["Called the lab service"]["latency_ms"] < 2000  # type: ignore[operator]
    assert "latency_ms" not in steps["Reached a verdict"]  # not timed: no guess


def test_a_given_latency_wins_over_the_blocks(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    with recorder.flow("user_question", "sdk/given") as flow, flow.step("llm_prompt", "Asked", latency_ms=7):
        time.sleep(0.05)

    assert sent_steps(recorder, ingest)["Asked"]["latency_ms"] == 7


def test_children_recorded_inside_a_block_keep_their_order_and_their_own_durations(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    with (
        recorder.flow("user_question", "sdk/nested") as flow,
        flow.step("retrieval", "Looked up the evidence") as lookup,
        lookup.step("llm_prompt", "Asked the model"),
    ):
        time.sleep(0.06)

    steps = sent_steps(recorder, ingest)
    assert list(steps) == ["Looked up the evidence", "Asked the model"]  # the parent first
    assert steps["Asked the model"]["parent_step_id"] == lookup.id
    assert 60 <= steps["Asked the model"]["latency_ms"] < 2000  # type: ignore[operator]
    # The parent left when its first child was recorded: its duration was not known yet.
    assert "latency_ms" not in steps["Looked up the evidence"]


def test_a_plain_step_of_an_open_flow_leaves_on_the_batchers_next_tick(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    flow = recorder.flow("user_question", "sdk/open")
    flow.step("retrieval", "Retrieved the labs")

    deadline = time.monotonic() + 5
    while not ingest.steps() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [step["summary_text"] for step in ingest.steps()] == ["Retrieved the labs"]


def test_a_dropped_flows_step_is_not_lost(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    recorder.flow("user_question", "sdk/dropped").step("retrieval", "Retrieved the labs")

    assert list(sent_steps(recorder, ingest)) == ["Retrieved the labs"]
