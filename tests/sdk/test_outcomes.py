"""record_outcome() against the real server (issue 41, part 6): the outcome reaches the outcome
route behind its flow, spooled and retried like the flow's records, and the server's session
accuracy counts it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from reasoning_flow_sdk import ReasoningFlowRecorder
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow
from tests.servers import free_port

Recorder = Callable[..., ReasoningFlowRecorder]


def record_session(recorder: ReasoningFlowRecorder, session: str, verdicts: list[bool]) -> list[str]:
    ids = []
    for n, correct in enumerate(verdicts):
        with recorder.flow("user_question", f"sdk/outcome/{n}", agent="triage-agent", session_id=session) as flow:
            flow.step("verdict", "Recommended a follow-up visit", confidence=0.8)
        assert recorder.record_outcome(flow.id, "escalated", correct=correct) is True
        ids.append(flow.id)
    return ids


def test_outcomes_reach_the_server_and_the_session_accuracy_counts_them(
    recorder_for: Recorder, make_token: Callable[..., str]
) -> None:
    recorder = recorder_for()
    ids = record_session(recorder, "shift-9", [True, True, False])
    assert recorder.flush(timeout=30)

    stored = ReasoningFlow.objects.filter(pk__in=ids).order_by("trigger_ref")
    assert [(flow.outcome_correct, flow.outcome_recorded_at is not None) for flow in stored] == [
        (True, True),
        (True, True),
        (False, True),
    ]
    admin = APIClient()
    admin.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('reasoning.admin')}")
    summary = admin.get("/admin/v1/reasoning/sessions/shift-9").json()
    assert (summary["correct"], summary["incorrect"]) == (2, 1)
    assert round(summary["accuracy"], 3) == 0.667
    assert recorder.stats()["sent_outcomes"] == 3 and recorder.stats()["rejected_outcomes"] == 0


def test_an_outcome_recorded_while_the_server_is_down_is_delivered_when_it_is_back(
    recorder_for: Recorder, spool_dir: Path
) -> None:
    down = ReasoningFlowRecorder(
        base_url=f"http://127.0.0.1:{free_port()}", token="t", spool_dir=spool_dir, enabled=True, flush_interval=0.05
    )
    (flow_id,) = record_session(down, "shift-10", [True])
    assert not down.flush(timeout=1)  # nothing can arrive: it stays in the spool
    down.close(timeout=1)
    assert any(spool_dir.glob("*.json"))

    back = recorder_for()  # the same spool, a live server
    assert back.flush(timeout=30)

    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert (flow.flow_state, flow.outcome_correct) == ("completed", True)
    assert not any(spool_dir.glob("*.json"))
