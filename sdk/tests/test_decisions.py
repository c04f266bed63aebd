"""decision(), record_outcome() and session_summary(): the seed's decision API on top of flows."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FakeIngest
from reasoning_flow_sdk import ReasoningFlowRecorder

BEARER = "sdk-test-secret"


@pytest.fixture
def recorder(ingest: FakeIngest, spool_dir: Path) -> Iterator[ReasoningFlowRecorder]:
    # A long flush interval: nothing leaves before flush(), so a test sees what decision() did alone.
    made = ReasoningFlowRecorder(
        base_url=ingest.url, token=BEARER, spool_dir=spool_dir, enabled=True, flush_interval=60
    )
    yield made
    made.close(timeout=1)


def test_decision_returns_the_flow_id_at_once_and_records_a_one_step_flow(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    flow_id = recorder.decision(
        "triage-agent",
        "escalate",
        "Two red flags in the vitals",
        confidence=0.82,
        inputs={"heart_rate": 131},
        session_id="shift-7",
        correlation_id="turn-42",
    )
    assert uuid.UUID(flow_id)
    assert ingest.bodies == []  # nothing was waited for

    assert recorder.flush(timeout=10)
    [body] = ingest.bodies
    [flow] = body["flows"]
    assert flow["id"] == flow_id
    assert (flow["trigger_type"], flow["agent"]) == ("escalate", "triage-agent")
    assert (flow["session_id"], flow["trace_id"]) == ("shift-7", "turn-42")
    [step] = flow["steps"]
    assert (step["kind"], step["agent"], step["summary_text"]) == ("decision", "triage-agent", "Decision: escalate")
    assert (step["rationale"], step["confidence"], step["inputs"]) == (
        "Two red flags in the vitals",
        0.82,
        {"heart_rate": 131},
    )
    assert (flow["close"]["flow_state"], flow["close"]["outcome_type"]) == ("completed", "decision_recorded")


def test_record_outcome_counts_once_and_goes_to_the_outcome_route_after_its_flow(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest, caplog: pytest.LogCaptureFixture
) -> None:
    flow_id = recorder.decision("triage-agent", "escalate", "Two red flags")

    with caplog.at_level(logging.WARNING, logger="reasoning_flow_sdk"):
        assert recorder.record_outcome(flow_id, "escalated", correct=True) is True
        assert recorder.record_outcome(flow_id, "escalated", correct=False) is False
        assert recorder.record_outcome(uuid.UUID(flow_id), "escalated", correct=False) is False
    assert recorder.flush(timeout=10)

    assert [item["id"] for body in ingest.bodies for item in body["flows"]] == [flow_id]
    assert ingest.outcomes == [
        ("/api/reasoning/outcomes", {"outcomes": [{"flow_id": flow_id, "outcome": "escalated", "correct": True}]})
    ]
    assert ingest.times[0] < ingest.times[-1]  # the flow's batch first, then its outcome
    assert [r for r in caplog.records if r.name.startswith("reasoning_flow_sdk")] == []
    assert recorder.session_summary()["correct"] == 1
    assert (recorder.stats()["recorded_outcomes"], recorder.stats()["sent_outcomes"]) == (1, 1)


def test_session_summary_has_the_seed_shape(recorder: ReasoningFlowRecorder) -> None:
    assert recorder.session_summary() == {
        "total_decisions": 0,
        "with_outcome": 0,
        "correct": 0,
        "incorrect": 0,
        "accuracy": None,
        "decision_types": {},
    }
    first = recorder.decision("triage-agent", "escalate", "Two red flags")
    second = recorder.decision("triage-agent", "escalate", "Sepsis score 3")
    recorder.decision("triage-agent", "discharge", "No red flags")
    recorder.decision("triage-agent", "discharge", "Stable for 24 hours")
    recorder.record_outcome(first, "escalated", correct=True)
    recorder.record_outcome(second, "escalated", correct=False)

    assert recorder.session_summary() == {
        "total_decisions": 4,
        "with_outcome": 2,
        "correct": 1,
        "incorrect": 1,
        "accuracy": 0.5,
        "decision_types": {"escalate": 2, "discharge": 2},
    }
