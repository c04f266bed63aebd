"""Nothing derived is lost: the work a close owes (pathway extraction, the backlog producers) is
recorded with the close, done after its commit, and retried by the job until done, skipped with a
reason, or failed after the last attempt (``reasoning.recording.close_work``; docs/ingest.md, "After a close").

The real database stopped between a close's commit and its receivers is in tests/test_faults.py.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import DjangoCaptureOnCommitCallbacks
from rest_framework.test import APIClient

from pathways import services as pathway_services
from pathways.models import Pathway
from reasoning.models import CloseWork
from reasoning.recording import close_work
from research_backlog.models import ResearchRequest
from tests.conftest import events
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

FLOWS = "/api/reasoning/flows"
QUALIFYING = {"flow_state": "completed", "outcome_type": "claim_created", "outcome_summary": "Created a claim"}
WEAK_RESEARCH = {
    "flow_state": "completed",
    "outcome_type": "research_delivered",
    "outcome_metrics": {"evidence_hits": 0},
}


def open_with_step(agent: APIClient, by: str = "orchestrator", confidence: float = 0.95) -> str:
    flow_id: str = open_flow(agent, trigger_type="user_question", trigger_ref="case-1", agent=by)["id"]
    add_step(agent, flow_id, kind="retrieval", agent=by, summary_text="Looked up the guideline", confidence=confidence)
    return flow_id


def close(agent: APIClient, flow_id: str, body: dict[str, Any] = QUALIFYING) -> None:
    response = agent.patch(f"{FLOWS}/{flow_id}", body, format="json")
    assert response.status_code == 200, response.content


def owed(flow_id: str) -> list[tuple[str, int, str, bool]]:
    return [
        (row.receiver, row.attempts, row.last_error, row.failed_at is not None)
        for row in close_work.owed_for([uuid.UUID(flow_id)])
    ]


def boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the pathway store is away")


# --- Owed with the close, done after its commit -----------------------------------------


def test_a_qualifying_close_owes_its_extraction_in_the_same_commit(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_with_step(agent)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        close(agent, flow_id)
    # Committed with the close: the debt, not yet the pathway.
    assert owed(flow_id) == [("pathways.extract", 0, "", False)]
    assert not Pathway.objects.exists()

    for callback in callbacks:
        callback()
    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1
    assert len(events("reasoning.pathway.extracted")) == 1
    assert owed(flow_id) == []


def test_the_debt_is_written_by_the_statement_that_writes_the_close(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_with_step(agent)

    with django_capture_on_commit_callbacks(execute=False), CaptureQueriesContext(connection) as captured:
        close(agent, flow_id)

    (statement,) = [query["sql"] for query in captured if "reasoning_close_work" in query["sql"]]
    assert "UPDATE reasoning_flow" in statement and "INSERT INTO audit_event" in statement
    assert owed(flow_id) == [("pathways.extract", 0, "", False)]


def test_a_close_that_qualifies_for_nothing_owes_nothing(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_with_step(agent, confidence=0.5)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        close(agent, flow_id)

    assert callbacks == []
    assert owed(flow_id) == []
    # The skip is audited by the close itself.
    assert [event.payload["disqualifier"] for event in events("reasoning.pathway.skipped", flow_id)] == [
        "low_confidence"
    ]


def test_one_request_closing_several_flows_owes_each_qualifying_one(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    def whole(confidence: float) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "trigger_type": "user_question",
            "trigger_ref": "case-2",
            "agent": "orchestrator",
            "steps": [{"kind": "retrieval", "agent": "orchestrator", "summary_text": "Read", "confidence": confidence}],
            "close": QUALIFYING,
        }

    flows = [whole(0.95), whole(0.5), whole(0.97)]
    with django_capture_on_commit_callbacks(execute=True):
        response = agent.post("/api/reasoning/ingest", {"flows": flows}, format="json")

    assert response.status_code == 200, response.content
    assert {str(p.seed_flow_id) for p in Pathway.objects.all()} == {flows[0]["id"], flows[2]["id"]}
    assert not CloseWork.objects.exists()


def test_a_replayed_close_owes_nothing_again(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow = {
        "id": str(uuid.uuid4()),
        "trigger_type": "user_question",
        "agent": "orchestrator",
        "steps": [
            {
                "id": str(uuid.uuid4()),
                "kind": "retrieval",
                "agent": "orchestrator",
                "summary_text": "Read",
                "confidence": 0.95,
            }
        ],
        "close": QUALIFYING,
    }
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            response = agent.post("/api/reasoning/ingest", {"flows": [flow]}, format="json")
        assert response.status_code == 200, response.content

    assert response.json()["flows"][0]["status"] == "replayed"
    assert Pathway.objects.count() == 1
    assert len(events("reasoning.pathway.extracted")) == 1
    assert not CloseWork.objects.exists()


# --- Retried by the job ------------------------------------------------------------------


def test_a_failed_first_attempt_leaves_the_work_owed_with_a_backoff(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    flow_id = open_with_step(agent)
    monkeypatch.setattr(pathway_services, "extract_pathway", boom)

    before = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        close(agent, flow_id)

    assert owed(flow_id) == [("pathways.extract", 1, "RuntimeError", False)]
    (row,) = close_work.owed_for([uuid.UUID(flow_id)])
    assert row.next_attempt_at >= before + close_work.BACKOFF_FIRST
    # Logged with the type only: an exception's message may quote content.
    assert f"close work pathways.extract for flow {flow_id} failed (attempt 1 of 10, RuntimeError)" in caplog.text
    assert "the pathway store is away" not in caplog.text
    # Not due yet: the job leaves it alone and audits no run.
    assert close_work.perform_due() == {}
    assert not events("memory.job.close_work.started")


def test_the_job_does_owed_work_once_it_can_and_audits_its_run(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_with_step(agent)
    with django_capture_on_commit_callbacks(execute=False):  # the process died before its first attempt
        close(agent, flow_id)

    assert close_work.perform_due() == {"done": 1}
    assert close_work.perform_due() == {}

    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1
    assert [e.payload for e in events("memory.job.close_work.completed")] == [
        {"done": 1, "skipped": 0, "retry": 0, "failed": 0, "busy": 0}
    ]
    assert owed(flow_id) == []


def test_work_that_fails_every_attempt_is_audited_as_failed_and_can_be_owed_again(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flow_id = open_with_step(agent)
    monkeypatch.setattr(pathway_services, "extract_pathway", boom)
    with django_capture_on_commit_callbacks(execute=True):
        close(agent, flow_id)

    waits = []
    for _ in range(close_work.MAX_ATTEMPTS - 1):
        (row,) = close_work.owed_for([uuid.UUID(flow_id)])
        waits.append(row.next_attempt_at)
        close_work.perform_due(row.next_attempt_at)

    assert owed(flow_id) == [("pathways.extract", close_work.MAX_ATTEMPTS, "RuntimeError", True)]
    gaps = [later - earlier for earlier, later in itertools.pairwise(waits)]
    assert gaps == sorted(gaps) and gaps[-1] <= close_work.BACKOFF_MAX + timedelta(seconds=5)
    (failed,) = events("reasoning.pathway.failed", flow_id)
    assert failed.payload == {
        "receiver": "pathways.extract",
        "attempts": close_work.MAX_ATTEMPTS,
        "error_type": "RuntimeError",
    }
    assert failed.actor == "system:pathway_extractor"
    # Given up: the job no longer tries it; /healthz says so.
    assert close_work.perform_due(timezone.now() + timedelta(days=1)) == {}
    health = Client().get("/healthz")
    assert health.status_code == 503
    assert health.json()["close_work_failed"] == 1

    monkeypatch.undo()
    out = StringIO()
    call_command("close_work", "--retry-failed", stdout=out)

    assert "owed again: 1 failed piece(s) of work" in out.getvalue()
    assert "close work: done 1" in out.getvalue()
    assert "owed: 0 (none); failed: 0" in out.getvalue()
    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1
    assert [e.payload for e in events("reasoning.close_work.requeued")] == [{"requeued": 1, "receiver": None}]


def test_an_unavailable_database_does_not_use_up_attempts(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        try:
            raise psycopg.OperationalError("the database system is shutting down")
        except psycopg.OperationalError as cause:
            raise OperationalError("the database system is shutting down") from cause

    flow_id = open_with_step(agent)
    monkeypatch.setattr(pathway_services, "extract_pathway", unavailable)
    with django_capture_on_commit_callbacks(execute=True):
        close(agent, flow_id)

    assert owed(flow_id) == [("pathways.extract", 0, "", False)]


def test_a_producer_with_nothing_left_to_do_is_audited_as_skipped(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    with override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True):
        flow_id = open_with_step(agent, by="researcher")
        with django_capture_on_commit_callbacks(execute=False):
            close(agent, flow_id, WEAK_RESEARCH)
    assert owed(flow_id) == [("research_backlog.produce", 0, "", False)]

    # Switched off before the job came round: the debt is settled, saying why.
    close_work.perform_due()

    assert not ResearchRequest.objects.exists()
    (skipped,) = events("reasoning.research.producer_skipped", flow_id)
    assert skipped.payload == {"disqualifier": "no_longer_enabled"}
    assert owed(flow_id) == []


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_extraction_and_production_are_owed_independently(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flow_id = open_with_step(agent, by="researcher")
    monkeypatch.setattr(pathway_services, "extract_pathway", boom)
    body = {**WEAK_RESEARCH, "outcome_type": "claim_created"}
    with django_capture_on_commit_callbacks(execute=True):
        close(agent, flow_id, body)

    # The producer's work was done; the extraction's failure left only its own debt.
    assert ResearchRequest.objects.filter(source_flow_id=uuid.UUID(flow_id)).count() == 1
    assert owed(flow_id) == [("pathways.extract", 1, "RuntimeError", False)]


# --- Where late or failed work shows ------------------------------------------------------


@pytest.fixture
def late_work(agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks) -> str:
    flow_id = open_with_step(agent)
    with django_capture_on_commit_callbacks(execute=False):
        close(agent, flow_id)
    CloseWork.objects.filter(flow_id=uuid.UUID(flow_id)).update(created_at=timezone.now() - timedelta(seconds=400))
    return flow_id


def test_healthz_is_degraded_while_owed_work_is_older_than_the_limit(late_work: str) -> None:
    health = Client().get("/healthz")

    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "degraded"
    assert 400 <= body["close_work_oldest_s"] < 460
    assert body["close_work_failed"] == 0

    with override_settings(CLOSE_WORK_MAX_AGE_S=600):
        assert Client().get("/healthz").json()["status"] == "ok"
    close_work.perform_due()
    assert Client().get("/healthz").json()["close_work_oldest_s"] is None


def test_operator_pages_show_late_work_and_patients_never_do(
    late_work: str, operator_client: Client, patient_client: Client
) -> None:
    page = operator_client.get("/dashboard/admin/reasoning/pathway-library").content.decode()
    assert "Work owed after flow closes" in page
    assert "the job worker is not running" in page

    assert "Work owed after flow closes" not in patient_client.get("/dashboard/profile").content.decode()


def test_the_command_reports_without_changing_anything(late_work: str) -> None:
    out = StringIO()
    call_command("close_work", "--status", stdout=out)

    assert out.getvalue().startswith("owed: 1 (oldest 4")
    assert not Pathway.objects.exists()


def test_the_job_is_scheduled_every_minute() -> None:
    from reasoning.management.commands.setup_schedules import collect_schedules

    (spec,) = [spec for spec in collect_schedules() if spec["name"] == "reasoning.close_work"]
    assert (spec["func"], spec["schedule_type"], spec["minutes"]) == (
        "reasoning.recording.close_work.perform_due",
        "I",
        1,
    )
    # The function a schedule names is importable and takes no argument.
    module, _, name = spec["func"].rpartition(".")
    assert callable(getattr(__import__(module, fromlist=[name]), name))
