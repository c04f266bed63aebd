"""Builders for test records. Look here before writing a helper.

Flows and steps come in two shapes:
- over HTTP, as an agent would write them: ``open_flow(client, **fields)`` and
  ``add_step(client, flow_id, **fields)``, which assert the 201 and return the body;
- through the services, for tests about what reads them: ``make_flow(patient, steps, ...)``.

Pathways, research requests and claim reviews are rows in a given state (a demoted pathway
with 9 hits, a request dispatched an hour ago), which no single service produces, so their
builders create the rows directly; the services that move them on are what the tests exercise.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from audit.canonical import canonical_bytes
from audit.models import AuditEvent
from pathways.models import Pathway
from patients.models import Patient
from reasoning.models import ReasoningFlow
from reasoning.recording import services
from research_backlog.models import ClaimReview, ResearchRequest

FLOWS = "/api/reasoning/flows"
ACTOR = "system:test"
# Flows made here are opened as the `agent` fixture's token (tests/conftest.py), which may then
# add to them, close them and record their outcomes (only a flow's opener or an admin may).
OPENER = "token:agent"
# Every persona that logs in has this password (the login-form tests type it).
PASSWORD = "correct horse battery"
# Step summaries the patient-safety guard passes.
SAFE_STEPS = ("Reviewed recent lab results", "Compared them with the care guideline")
# The research-backlog tests' frozen clock (a request that left "pending" was dispatched then).
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
# Distinctive, so a leak into a page, a table or the audit trail cannot be a coincidence.
QUESTION = "Which guideline covers blood pressure targets for Zebulon Quixote, aged 83?"


def logged_in(who: User | Patient) -> Client:
    """A browser session for ``who`` (a user, or a patient's user), logged in without the form."""
    user = who.user if isinstance(who, Patient) else who
    assert isinstance(user, User)
    client = Client()
    client.force_login(user)
    return client


# --- Flows and steps over HTTP -------------------------------------------------------------


def open_flow(client: APIClient, **fields: Any) -> dict[str, Any]:
    """POST a flow (a ``user_question`` unless ``trigger_type`` says otherwise); return its body."""
    response = client.post(FLOWS, {"trigger_type": "user_question", **fields}, format="json")
    assert response.status_code == 201, response.content
    body: dict[str, Any] = response.json()
    return body


def add_step(client: APIClient, flow_id: object, **fields: Any) -> dict[str, Any]:
    """POST a step (a researcher's retrieval unless ``fields`` say otherwise); return its body."""
    step = {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved guidelines", **fields}
    response = client.post(f"{FLOWS}/{flow_id}/steps", step, format="json")
    assert response.status_code == 201, response.content
    body: dict[str, Any] = response.json()
    return body


# --- Flows through the services ------------------------------------------------------------


def make_flow(
    patient: Patient | None = None,
    steps: Sequence[str | Mapping[str, Any]] = SAFE_STEPS,
    *,
    close: bool = True,
    abort_reason: str | None = None,
    **fields: Any,
) -> uuid.UUID:
    """Open a flow (about ``patient`` when given) with ``steps``, and return its id.

    A step is a summary (a researcher's retrieval) or a whole step body. The flow is closed
    unless ``close`` is False: aborted with ``abort_reason`` when one is given, else completed.
    ``fields`` override the trigger (a ``lab_result`` at ``labs/1``) and other opening fields.
    """
    data: dict[str, Any] = {
        "trigger_type": "lab_result",
        "trigger_ref": "labs/1",
        "trigger_summary": "A new lab result arrived",
        "agent": "researcher",
        **fields,
    }
    if patient is not None:
        data["patient_id"] = patient.pk
    flow, _ = services.start_flow(data, actor=OPENER)
    items = [
        {"kind": "retrieval", "agent": "researcher", "summary_text": step} if isinstance(step, str) else step
        for step in steps
    ]
    if items:
        services.add_steps(flow.pk, items, actor=OPENER)
    if close and abort_reason is not None:
        services.close_flow(flow.pk, state="aborted", actor=OPENER, abort_reason=abort_reason)
    elif close:
        services.close_flow(
            flow.pk,
            state="completed",
            actor=OPENER,
            outcome_type="recommendation_delivered",
            outcome_summary="Suggested a follow-up visit",
        )
    return flow.pk


# --- Library and queue rows ----------------------------------------------------------------


def make_pathway(trigger_type: str = "user_question", trigger_ref: str = "", **fields: Any) -> Pathway:
    """A library row seeded by a completed flow (set up directly: extraction is tested elsewhere)."""
    flow = ReasoningFlow.objects.create(
        trigger_type=trigger_type,
        trigger_ref=trigger_ref,
        trace_id=uuid.uuid4().hex,
        request_hash="test",
        flow_state=ReasoningFlow.State.COMPLETED,
        outcome_type="claim_created",
        outcome_confidence=0.95,
        patient_safe_summary=True,
    )
    fields.setdefault("step_kinds", ["retrieval"])
    return Pathway.objects.create(
        trigger_type=trigger_type,
        trigger_ref=trigger_ref,
        agents=["researcher"],
        seed_flow=flow,
        confidence=0.95,
        **fields,
    )


def make_request(**fields: Any) -> ResearchRequest:
    """A research request an operator asked for about ``QUESTION``; pending unless ``status`` says."""
    values: dict[str, Any] = {
        "trigger_type": "user_question",
        "question": QUESTION,
        "reason": ResearchRequest.Reason.OPERATOR_REQUESTED,
        "source": "operator",
        "requested_by": "token:operator",
    }
    values.update(fields)
    if values.get("status", "pending") != "pending":
        values.setdefault("dispatched_at", values.get("created_at", NOW))
    return ResearchRequest.objects.create(**values)


def make_review(claim_id: str, **fields: Any) -> ClaimReview:
    """A claim the critic marked for review; pending unless ``fields`` say otherwise."""
    return ClaimReview.objects.create(claim_id=claim_id, source="critic", marked_by="token:critic", **fields)


def rebuilt_canonical(event: AuditEvent) -> bytes:
    """The canonical bytes of a stored event, rebuilt from its columns (what the verifier compares)."""
    return canonical_bytes(
        action=event.action,
        actor=event.actor,
        target_type=event.target_type,
        target_id=event.target_id,
        payload=event.payload,
        created_at=event.created_at,
    )
