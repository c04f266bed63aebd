"""The sync recorder against a real server: complete, ordered, exactly once, through lost answers
and a server outage, with the agent's calls staying fast and its memory bounded."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reasoning_flow_sdk import ReasoningFlowRecorder, new_turn

from reasoning.models import ReasoningFlow, ReasoningStep
from tests.fakes import DroppingProxy, serve_dropping_proxy
from tests.servers import Gunicorn, free_port

Recorder = Callable[..., ReasoningFlowRecorder]


def stored_steps(flow_id: str) -> list[str]:
    """The flow's step ids in the order the server reads them."""
    return [
        str(pk)
        for pk in ReasoningStep.objects.filter(flow_id=uuid.UUID(flow_id))
        .order_by("started_at", "position")
        .values_list("pk", flat=True)
    ]


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_a_thousand_steps_arrive_complete_and_in_order(recorder_for: Recorder) -> None:
    recorder = recorder_for()
    recorded = []
    with recorder.flow("user_question", "sdk/thousand", agent="researcher") as flow:
        previous = None
        for n in range(1000):
            previous = flow.step("retrieval", f"Reviewed source {n}", parent=previous, confidence=0.95)
            recorded.append(previous.id)

    assert recorder.flush(timeout=30)
    stored = ReasoningFlow.objects.get(pk=flow.id)
    assert stored.flow_state == "completed"
    assert stored.outcome_type == "flow_completed"
    assert stored.step_count == 1000
    assert stored_steps(flow.id) == recorded
    assert recorder.stats()["sent"] == 1000
    assert recorder.stats()["batches_sent"] >= 10  # 100 steps per batch by default


def test_nested_steps_and_merges_keep_their_parents(recorder_for: Recorder) -> None:
    recorder = recorder_for()
    with recorder.flow("user_question", "sdk/dag", agent="researcher") as flow:
        with flow.step("retrieval", "Looked up the evidence") as lookup:
            left = lookup.step("llm_prompt", "Asked the first model")
            right = lookup.step("llm_prompt", "Asked the second model")
        verdict = flow.step("verdict", "Combined both answers", parent=left, extra_parents=[right])

    assert recorder.flush(timeout=10)
    steps = {str(step.pk): step for step in ReasoningStep.objects.filter(flow_id=uuid.UUID(flow.id))}
    assert steps[left.id].parent_step_id == uuid.UUID(lookup.id)
    assert steps[right.id].parent_step_id == uuid.UUID(lookup.id)
    assert steps[verdict.id].parent_step_id == uuid.UUID(left.id)
    assert [str(pk) for pk in steps[verdict.id].extra_parent_ids] == [right.id]


def test_an_exception_aborts_the_flow_and_propagates_unchanged(recorder_for: Recorder) -> None:
    recorder = recorder_for()
    error = LookupError("no such lab")
    with pytest.raises(LookupError) as raised, recorder.flow("user_question", "sdk/boom", agent="researcher") as flow:
        flow.step("retrieval", "Looked up the lab results")
        raise error

    assert raised.value is error
    assert recorder.flush(timeout=10)
    stored = ReasoningFlow.objects.get(pk=flow.id)
    assert (stored.flow_state, stored.abort_reason) == ("aborted", "LookupError")


def test_flows_of_one_turn_share_its_trace_id(recorder_for: Recorder) -> None:
    recorder = recorder_for()
    turn_id = new_turn()
    with recorder.flow("user_question", agent="researcher") as outer:
        with recorder.flow("claim_review", agent="critic") as inner:
            inner.step("graph_walk", "Walked the claim graph")
        outer.step("verdict", "Reached a verdict")

    assert recorder.flush(timeout=10)
    traces = set(ReasoningFlow.objects.filter(pk__in=[outer.id, inner.id]).values_list("trace_id", flat=True))
    assert traces == {turn_id}


def test_a_lost_answer_is_retried_and_nothing_is_stored_twice(sdk_server: Gunicorn, recorder_for: Recorder) -> None:
    # The server commits the first two batches, but their answers never reach the client.
    proxy_state = DroppingProxy(upstream=sdk_server.url, drop=2)
    with serve_dropping_proxy(proxy_state):
        recorder = recorder_for(base_url=proxy_state.url, batch_steps=50)
        flows = []
        for n in range(4):
            with recorder.flow("user_question", f"sdk/lost/{n}", agent="researcher") as flow:
                for m in range(50):
                    flow.step("retrieval", f"Reviewed source {m}")
            flows.append(flow.id)
        assert recorder.flush(timeout=30)

    assert proxy_state.dropped == 2
    assert recorder.stats()["retried"] >= 2
    assert ReasoningStep.objects.filter(flow_id__in=flows).count() == 200
    assert all(ReasoningFlow.objects.get(pk=fid).step_count == 50 for fid in flows)
    assert recorder.stats()["sent"] == 200


def test_a_rejected_item_is_dropped_and_counted_the_rest_arrive(
    recorder_for: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = recorder_for()
    with recorder.flow("user_question", "sdk/good/1", agent="researcher") as good:
        good.step("retrieval", "Reviewed the evidence")
    with recorder.flow("user_question", "sdk/bad", agent="researcher") as bad:
        bad.step("retrieval", "x" * 281)  # over the 280-character limit
        bad.step("verdict", "Reached a verdict")
    with recorder.flow("user_question", "sdk/good/2", agent="researcher") as other:
        other.step("retrieval", "Reviewed the evidence")

    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        recorder.flush(timeout=10)

    assert set(ReasoningFlow.objects.values_list("trigger_ref", flat=True)) == {"sdk/good/1", "sdk/good/2"}
    stats = recorder.stats()
    assert (stats["sent"], stats["rejected"], stats["rejected_items"], stats["retried"]) == (2, 2, 1, 0)
    assert "steps[0].summary_text" in caplog.text
    assert bad.id in caplog.text


def test_a_refused_token_is_not_retried(sdk_server: Gunicorn, recorder_for: Recorder) -> None:
    recorder = recorder_for(token="not-a-token")
    with recorder.flow("user_question", "sdk/refused", agent="researcher") as flow:
        flow.step("retrieval", "Reviewed the evidence")
    recorder.flush(timeout=10)

    assert recorder.stats()["rejected"] == 1
    assert recorder.stats()["retried"] == 0
    assert recorder.stats()["spool_files"] == 0
    assert not ReasoningFlow.objects.exists()


def test_an_outage_loses_nothing_keeps_the_agent_fast_and_memory_bounded(
    sdk_server: Gunicorn, recorder_for: Recorder
) -> None:
    recorder = recorder_for()
    flows: list[str] = []

    def record(count: int, timings: list[int]) -> None:
        clock = time.perf_counter_ns
        for n in range(count):
            started = clock()
            flow = recorder.flow("user_question", f"sdk/outage/{len(flows)}", agent="researcher")
            timings.append(clock() - started)
            for m in range(10):
                started = clock()
                flow.step("retrieval", f"Reviewed source {m}", confidence=0.9, inputs={"n": n})
                timings.append(clock() - started)
            started = clock()
            flow.complete("recommendation_delivered")
            timings.append(clock() - started)
            flows.append(flow.id)

    timings: list[int] = []
    record(100, timings)  # 1,000 steps while the server is up
    assert recorder.flush(timeout=30)

    sdk_server.stop()
    before = rss_bytes()
    record(1000, timings)  # 10,000 steps during the outage
    time.sleep(1)  # let the sender find the server gone and spool
    during = recorder.stats()
    grown = rss_bytes() - before
    sdk_server.start()

    assert recorder.flush(timeout=120)
    assert during["spooled"] > 0
    assert ReasoningFlow.objects.filter(pk__in=flows, flow_state="completed").count() == 1100
    assert ReasoningStep.objects.filter(flow_id__in=flows).count() == 11_000
    timings.sort()
    p99 = timings[int(len(timings) * 0.99)]
    assert p99 < 1_000_000, f"p99 of the agent's SDK calls was {p99 / 1000:.0f} µs"
    # The records of 10,000 steps are ~10 MB as Python objects; bounded means far less stays held.
    assert grown < 64 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB during the outage"
    assert recorder.stats()["spool_files"] == 0


SPOOLING_SCRIPT = """
import sys
from reasoning_flow_sdk import ReasoningFlowRecorder
recorder = ReasoningFlowRecorder(base_url=sys.argv[1], token="t", spool_dir=sys.argv[2], enabled=True)
for n in range(30):
    with recorder.flow("user_question", f"sdk/left/{n}", agent="researcher") as flow:
        flow.step("retrieval", "Reviewed the evidence")
        flow.step("verdict", "Reached a verdict")
# No close(): the interpreter's exit spools what the dead server could not take.
"""


@pytest.fixture
def dead_url() -> Iterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


def test_a_later_recorder_delivers_what_an_exited_process_spooled(
    recorder_for: Recorder, spool_dir: Path, dead_url: str
) -> None:
    subprocess.run(
        [sys.executable, "-c", SPOOLING_SCRIPT, dead_url, str(spool_dir)],
        check=True,
        timeout=60,
        env={**os.environ, "REASONING_FLOW_CAPTURE_ENABLED": "1"},
    )
    assert any(spool_dir.glob("*.json")), "the exiting process spooled nothing"

    recorder = recorder_for()  # same spool directory, a live server
    assert recorder.flush(timeout=30)

    assert ReasoningFlow.objects.filter(trigger_ref__startswith="sdk/left/", flow_state="completed").count() == 30
    assert ReasoningStep.objects.count() == 60
    assert not any(spool_dir.glob("*.json"))


def test_a_step_timed_by_its_with_block_reaches_the_waterfall(recorder_for: Recorder) -> None:
    recorder = recorder_for()
    with recorder.flow("user_question", "sdk/timed", agent="researcher") as flow:
        with flow.step("tool_call", "Called the lab service"):
            time.sleep(0.1)
        flow.step("verdict", "Reached a verdict")
    assert recorder.flush(timeout=30)

    stored = dict(ReasoningStep.objects.filter(flow_id=uuid.UUID(flow.id)).values_list("summary_text", "latency_ms"))
    assert stored["Called the lab service"] is not None and stored["Called the lab service"] >= 100
    assert stored["Reached a verdict"] is None
