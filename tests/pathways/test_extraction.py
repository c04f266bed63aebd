"""Pathway extraction at flow close: who qualifies, what is stored, what is audited."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from pytest_django import DjangoCaptureOnCommitCallbacks
from rest_framework.test import APIClient

from audit.models import AuditEvent
from core.errors import NotFound
from pathways import services
from pathways.models import Pathway
from pathways.services import extract_pathway
from reasoning.models import ReasoningFlow
from reasoning.recording import close_work
from reasoning.recording.close_work import owed_for
from tests.conftest import events
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

FLOWS_URL = "/api/reasoning/flows"
TRIGGER = {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3", "agent": "orchestrator"}
COMPLETE = {"flow_state": "completed", "outcome_type": "claim_created", "outcome_summary": "Created a claim"}
ABORT = {"flow_state": "aborted", "abort_reason": "tool_error"}


def step(
    confidence: float | None, *, kind: str = "retrieval", agent: str = "researcher", summary: str = ""
) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": kind, "agent": agent, "summary_text": summary or "Looked up the guideline"}
    if confidence is not None:
        body["confidence"] = confidence
    return body


def open_flow_with_steps(agent: APIClient, steps: list[dict[str, Any]]) -> str:
    flow_id: str = open_flow(agent, **TRIGGER)["id"]
    for body in steps:
        add_step(agent, flow_id, **body)
    return flow_id


def close(
    agent: APIClient, flow_id: str, capture: DjangoCaptureOnCommitCallbacks, body: dict[str, Any] | None = None
) -> None:
    """PATCH the flow closed and run its after-commit callbacks (the owed work's first attempt)."""
    with capture(execute=True):
        response = agent.patch(f"{FLOWS_URL}/{flow_id}", body or COMPLETE, format="json")
    assert response.status_code == 200, response.content


# --- Qualification ----------------------------------------------------------------------


@pytest.mark.parametrize("lowest", [0.9, 0.95])
def test_flow_whose_weakest_step_is_at_least_0_9_becomes_a_pathway(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks, lowest: float
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.99), step(lowest)])

    close(agent, flow_id, django_capture_on_commit_callbacks)

    pathway = Pathway.objects.get(seed_flow_id=uuid.UUID(flow_id))
    assert pathway.confidence == pytest.approx(lowest)
    assert events("reasoning.pathway.skipped") == []


@pytest.mark.parametrize("outcome_type", ["claim_created", "recommendation_delivered"])
def test_both_reusable_outcome_types_qualify(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks, outcome_type: str
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])

    close(agent, flow_id, django_capture_on_commit_callbacks, {**COMPLETE, "outcome_type": outcome_type})

    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).exists()


@pytest.mark.parametrize(
    ("steps", "close_body", "expected"),
    [
        pytest.param([step(0.95), step(0.8999)], COMPLETE, "low_confidence", id="low_confidence"),
        pytest.param(
            [step(0.95)],
            {**COMPLETE, "outcome_type": "claim_rejected"},
            "outcome_type_not_reusable",
            id="outcome_type_not_reusable",
        ),
        pytest.param(
            [step(0.95), step(0.95, summary="Reviewed metformin 500mg")],
            COMPLETE,
            "summary_not_patient_safe",
            id="summary_not_patient_safe",
        ),
        pytest.param([step(0.95)], ABORT, "not_completed", id="not_completed"),
        pytest.param([step(None), step(None)], COMPLETE, "no_step_confidence", id="no_step_confidence"),
        pytest.param([], COMPLETE, "no_step_confidence", id="no_steps_at_all"),
    ],
)
def test_disqualified_flow_is_skipped_with_the_disqualifier_audited(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    steps: list[dict[str, Any]],
    close_body: dict[str, Any],
    expected: str,
) -> None:
    flow_id = open_flow_with_steps(agent, steps)

    close(agent, flow_id, django_capture_on_commit_callbacks, close_body)

    assert not Pathway.objects.exists()
    skipped = events("reasoning.pathway.skipped")
    assert len(skipped) == 1
    assert skipped[0].payload == {"disqualifier": expected}
    assert (skipped[0].target_type, skipped[0].target_id) == ("reasoning.reasoningflow", flow_id)
    assert skipped[0].actor == "system:pathway_extractor"
    assert events("reasoning.pathway.extracted") == []


def test_the_skip_commits_with_the_close_itself(agent: APIClient) -> None:
    """No after-commit work for a flow that cannot seed a pathway: its skip is one more event
    of the closing transaction, right after the close's own."""
    flow_id = open_flow_with_steps(agent, [step(0.95)])

    response = agent.patch(f"{FLOWS_URL}/{flow_id}", ABORT, format="json")  # on-commit callbacks not run

    assert response.status_code == 200
    aborted, skipped = events("reasoning.flow.aborted"), events("reasoning.pathway.skipped")
    assert [e.payload for e in skipped] == [{"disqualifier": "not_completed"}]
    assert skipped[0].id == aborted[0].id + 1


# --- What a pathway holds ---------------------------------------------------------------


def test_extracted_pathway_keeps_step_kinds_in_order_and_agents_sorted_unique(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_flow_with_steps(
        agent,
        [
            step(0.97, kind="retrieval", agent="researcher"),
            step(0.93, kind="llm_prompt", agent="clinician"),
            step(0.91, kind="retrieval", agent="researcher"),
            step(0.99, kind="verdict", agent="arbiter"),
        ],
    )

    close(agent, flow_id, django_capture_on_commit_callbacks)

    pathway = Pathway.objects.get()
    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert pathway.step_kinds == ["retrieval", "llm_prompt", "retrieval", "verdict"]
    assert pathway.agents == ["arbiter", "clinician", "researcher"]
    assert pathway.confidence == flow.outcome_confidence == pytest.approx(0.91)
    assert pathway.seed_flow_id == flow.pk
    assert (pathway.trigger_type, pathway.trigger_ref) == ("user_question", "benchmark/run-7/case-3")
    # A new pathway starts cold, un-embedded and active.
    assert (pathway.hit_count, pathway.last_hit_at, pathway.embedding, pathway.embedding_model) == (0, None, None, "")
    assert (pathway.demoted_at, pathway.demotion_reason) == (None, "")


def test_extraction_is_audited_with_counts_and_labels_only(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95), step(0.92, kind="verdict")])

    close(agent, flow_id, django_capture_on_commit_callbacks)

    pathway = Pathway.objects.get()
    (event,) = events("reasoning.pathway.extracted")
    assert (event.target_type, event.target_id) == ("pathways.pathway", str(pathway.pk))
    assert event.actor == "system:pathway_extractor"
    assert event.payload == {"flow_id": flow_id, "trigger_type": "user_question", "step_count": 2}
    assert events("reasoning.pathway.skipped") == []


def test_extraction_waits_for_the_close_to_commit(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = agent.patch(f"{FLOWS_URL}/{flow_id}", COMPLETE, format="json")
    assert response.status_code == 200
    assert not Pathway.objects.exists()  # not committed yet: nothing extracted

    for callback in callbacks:
        callback()
    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1


# --- Idempotence ------------------------------------------------------------------------


def test_extracting_the_same_flow_twice_keeps_one_pathway_and_one_event(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])
    close(agent, flow_id, django_capture_on_commit_callbacks)
    first = Pathway.objects.get()

    again = extract_pathway(uuid.UUID(flow_id))
    third = extract_pathway(uuid.UUID(flow_id))

    assert again is not None and third is not None
    assert again.pk == third.pk == first.pk
    assert Pathway.objects.count() == 1
    assert len(events("reasoning.pathway.extracted")) == 1


def test_database_refuses_a_second_pathway_for_the_same_flow(
    agent: APIClient, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])
    close(agent, flow_id, django_capture_on_commit_callbacks)
    pathway = Pathway.objects.get()

    with pytest.raises(IntegrityError), transaction.atomic():
        Pathway.objects.create(trigger_type="user_question", seed_flow_id=pathway.seed_flow_id, confidence=0.95)


def test_extracting_an_unknown_flow_is_not_found() -> None:
    with pytest.raises(NotFound):
        extract_pathway(uuid.uuid4())


# --- Failures never fail the close ------------------------------------------------------


def boom(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("extractor exploded")


def test_a_failed_extraction_stays_owed_and_the_job_does_it_once(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])
    with monkeypatch.context() as patched:
        patched.setattr(services, "extract_pathway", boom)
        close(agent, flow_id, django_capture_on_commit_callbacks)
    (owed,) = owed_for([uuid.UUID(flow_id)])
    assert (owed.receiver, owed.attempts, owed.last_error) == ("pathways.extract", 1, "RuntimeError")

    close_work.perform_due(owed.next_attempt_at)
    close_work.perform_due(owed.next_attempt_at)

    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1
    assert len(events("reasoning.pathway.extracted")) == 1
    assert owed_for([uuid.UUID(flow_id)]) == []


def test_failed_extraction_does_not_fail_the_close(
    agent: APIClient,
    django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])
    monkeypatch.setattr(services, "extract_pathway", boom)

    with caplog.at_level(logging.ERROR), django_capture_on_commit_callbacks(execute=True):
        response = agent.patch(f"{FLOWS_URL}/{flow_id}", COMPLETE, format="json")

    assert response.status_code == 200
    assert ReasoningFlow.objects.get(pk=flow_id).flow_state == ReasoningFlow.State.COMPLETED
    assert len(events("reasoning.flow.completed")) == 1
    assert not Pathway.objects.exists()
    assert any(r.name == "reasoning.recording.close_work" and flow_id in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
def test_failed_extraction_after_a_real_commit_still_answers_200(
    agent: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real commits: the close is one statement, which would extract the pathway itself; failing
    # there, the work is owed, and the first attempt after the commit fails too.
    flow_id = open_flow_with_steps(agent, [step(0.95)])
    monkeypatch.setattr(services, "_seeded", boom)

    response = agent.patch(f"{FLOWS_URL}/{flow_id}", COMPLETE, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["flow_state"] == "completed"
    assert ReasoningFlow.objects.get(pk=flow_id).flow_state == ReasoningFlow.State.COMPLETED
    assert not Pathway.objects.exists()
    (owed,) = owed_for([uuid.UUID(flow_id)])
    assert (owed.attempts, owed.last_error) == (1, "RuntimeError")


@pytest.mark.django_db(transaction=True)
def test_an_extraction_that_fails_in_the_close_is_owed_and_done_after_it(
    agent: APIClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])
    seeded = services._seeded
    calls: list[str] = []

    def fails_first(*args: Any, **kwargs: Any) -> Any:
        calls.append("called")
        if len(calls) == 1:
            raise RuntimeError("extractor exploded")
        return seeded(*args, **kwargs)

    monkeypatch.setattr(services, "_seeded", fails_first)
    with caplog.at_level(logging.ERROR):
        response = agent.patch(f"{FLOWS_URL}/{flow_id}", COMPLETE, format="json")

    assert response.status_code == 200, response.content
    assert len(calls) == 2  # in the close, then after its commit
    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1
    assert owed_for([uuid.UUID(flow_id)]) == []
    assert [e.action for e in AuditEvent.objects.filter(action__startswith="reasoning.").order_by("id")][-2:] == [
        "reasoning.flow.completed",
        "reasoning.pathway.extracted",
    ]
    assert any("not done in the close (RuntimeError); it is owed" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
def test_real_commit_extracts_the_pathway_during_the_close_request(agent: APIClient) -> None:
    flow_id = open_flow_with_steps(agent, [step(0.95)])

    response = agent.patch(f"{FLOWS_URL}/{flow_id}", COMPLETE, format="json")

    assert response.status_code == 200
    assert Pathway.objects.filter(seed_flow_id=uuid.UUID(flow_id)).count() == 1
    assert len(events("reasoning.pathway.extracted")) == 1
    assert owed_for([uuid.UUID(flow_id)]) == []  # done in the close's statement: never owed
