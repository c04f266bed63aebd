"""Where a flow's trace id comes from: the OpenTelemetry span, the turn, or a new id."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FakeIngest
from reasoning_flow_sdk import ReasoningFlowRecorder, current_turn, new_turn, turn

trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")


def flows_sent(ingest: FakeIngest) -> dict[str, str]:
    return {item["trigger_ref"]: item["trace_id"] for body in ingest.bodies for item in body["flows"]}


def test_the_active_span_gives_the_trace_id(ingest: FakeIngest, spool_dir: Path) -> None:
    tracer = trace_sdk.TracerProvider().get_tracer("test")
    rec = ReasoningFlowRecorder(ingest.url, "token", spool_dir, enabled=True, flush_interval=0.02)
    with tracer.start_as_current_span("agent turn") as span, rec.flow("user_question", "in-span", agent="researcher"):
        pass
    with turn("turn-without-span"), rec.flow("user_question", "in-turn", agent="researcher"):
        pass
    with rec.flow("user_question", "alone", agent="researcher"):
        pass
    assert rec.flush(timeout=10)
    rec.close()

    sent = flows_sent(ingest)
    assert sent["in-span"] == f"{span.get_span_context().trace_id:032x}"
    assert sent["in-turn"] == "turn-without-span"
    assert len(sent["alone"]) == 32 and sent["alone"] not in {sent["in-span"], sent["in-turn"]}


def test_a_flow_is_the_turn_of_the_agents_it_calls(ingest: FakeIngest, spool_dir: Path) -> None:
    rec = ReasoningFlowRecorder(ingest.url, "token", spool_dir, enabled=True, flush_interval=0.02)
    assert current_turn() is None
    with rec.flow("user_question", "outer", agent="researcher") as outer:
        assert current_turn() == outer.trace_id
        with rec.flow("claim_review", "inner", agent="critic"):
            pass
    assert current_turn() is None
    assert rec.flush(timeout=10)
    rec.close()

    sent = flows_sent(ingest)
    assert sent["outer"] == sent["inner"]


def test_new_turn_sets_the_id_for_the_context() -> None:
    turn_id = new_turn()
    assert current_turn() == turn_id and len(turn_id) == 32
    with turn("nested") as nested:
        assert current_turn() == nested == "nested"
    assert current_turn() == turn_id
