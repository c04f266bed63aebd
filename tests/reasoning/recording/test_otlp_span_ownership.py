"""Pending spans keep their writer: a span that arrived before its parent joins only a flow its
sender may change (docs/ingest.md, "Who may change a flow"), in every order of arrival.

Writers: ``alice`` and ``bob`` (``reasoning.write``), ``supervisor`` (``reasoning.write`` and
``reasoning.admin``: may change any flow).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from rest_framework.test import APIClient

from audit.actions import Action
from audit.models import AuditEvent
from reasoning.models import PendingSpan, ReasoningFlow, ReasoningStep
from reasoning.recording.traces import adopt_orphans, span_uuid
from tests import otlp

pytestmark = pytest.mark.django_db

TRACE, ROOT, CHILD = otlp.TRACE_ID, otlp.ROOT_SPAN_ID, otlp.CHILD_SPAN_ID
OTHER_CHILD = "eee19b7ec3c1b17a"


def client_for(make_token: Callable[..., str], name: str, *scopes: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('reasoning.write', *scopes, name=name)}")
    return client


@pytest.fixture
def alice(make_token: Callable[..., str]) -> APIClient:
    return client_for(make_token, "alice")


@pytest.fixture
def bob(make_token: Callable[..., str]) -> APIClient:
    return client_for(make_token, "bob")


@pytest.fixture
def supervisor(make_token: Callable[..., str]) -> APIClient:
    return client_for(make_token, "supervisor", "reasoning.admin")


def send(client: APIClient, *spans: Span) -> ExportTraceServiceResponse:
    response = client.post(
        "/v1/traces", otlp.protobuf_body(otlp.request(*spans)), content_type="application/x-protobuf"
    )
    assert response.status_code == 200, response.content
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    return answer


def root(**extra: Any) -> Span:
    return otlp.span("invoke_agent triage", attributes={"gen_ai.operation.name": "invoke_agent", **extra})


def tool(span_id: str = CHILD) -> Span:
    return otlp.child("execute_tool lookup", span_id=span_id, attributes={"gen_ai.operation.name": "execute_tool"})


def step_actors(flow_id: uuid.UUID) -> list[str]:
    ids = [str(pk) for pk in ReasoningStep.objects.filter(flow_id=flow_id).values_list("pk", flat=True)]
    return list(
        AuditEvent.objects.filter(action=Action.STEP_CREATED, target_id__in=ids).values_list("actor", flat=True)
    )


def test_another_writers_pending_span_does_not_join_your_flow(alice: APIClient, bob: APIClient) -> None:
    assert send(bob, tool()).partial_success.rejected_spans == 0  # parked: its parent has not arrived

    answer = send(alice, root())

    flow = ReasoningFlow.objects.get()
    assert (flow.opened_by, flow.step_count) == ("token:alice", 0)
    assert PendingSpan.objects.get().actor == "token:bob"  # still bob's, still pending
    # Alice's answer says so, without counting it as one of her spans.
    assert answer.partial_success.rejected_spans == 0
    assert f"span {CHILD} (pending, sent by another writer) was not placed" in answer.partial_success.error_message


def test_your_own_pending_span_and_your_new_span_join_your_flow(alice: APIClient, bob: APIClient) -> None:
    send(alice, tool())
    send(bob, tool(OTHER_CHILD))

    send(alice, root())

    flow = ReasoningFlow.objects.get()
    assert list(ReasoningStep.objects.filter(flow=flow).values_list("span_id", flat=True)) == [CHILD]
    assert step_actors(flow.pk) == ["token:alice"]
    assert list(PendingSpan.objects.values_list("span_id", "actor")) == [(OTHER_CHILD, "token:bob")]


def test_in_one_request_a_writer_places_its_own_child_under_its_own_root(alice: APIClient, bob: APIClient) -> None:
    send(bob, tool(OTHER_CHILD))

    send(alice, tool(), root())

    flow = ReasoningFlow.objects.get()
    assert list(ReasoningStep.objects.filter(flow=flow).values_list("span_id", flat=True)) == [CHILD]
    assert PendingSpan.objects.get().span_id == OTHER_CHILD


def test_a_supervisors_pending_span_joins_any_flow(alice: APIClient, supervisor: APIClient) -> None:
    send(supervisor, tool())

    answer = send(alice, root())

    flow = ReasoningFlow.objects.get()
    assert flow.step_count == 1 and not PendingSpan.objects.exists()
    assert not answer.partial_success.error_message


def test_the_decay_job_adopts_pending_spans_as_their_sender(alice: APIClient, bob: APIClient) -> None:
    send(bob, tool())
    send(alice, root())

    adopted = adopt_orphans(received_before=timezone.now() + timedelta(seconds=1), actor="system:flow_decay")

    assert adopted == 1
    orphan = ReasoningFlow.objects.exclude(pk=span_uuid(TRACE, ROOT)).get()
    assert (orphan.opened_by, orphan.trigger_type, orphan.flow_state, orphan.step_count) == (
        "token:bob",
        "otlp_trace",
        "aborted",
        1,
    )
    assert step_actors(orphan.pk) == ["token:bob"]


def test_re_sending_another_writers_root_is_rejected(alice: APIClient, bob: APIClient) -> None:
    send(alice, root())

    answer = send(bob, root(**{"reasoning.trigger_ref": "mine"}))

    assert answer.partial_success.rejected_spans == 1
    assert f"id {span_uuid(TRACE, ROOT)} is already in use" in answer.partial_success.error_message
    assert ReasoningFlow.objects.get().trigger_ref == "invoke_agent triage"


def test_re_sending_your_own_root_is_a_replay(alice: APIClient) -> None:
    send(alice, root())
    answer = send(alice, root())
    assert not answer.HasField("partial_success") or answer.partial_success.rejected_spans == 0
    assert ReasoningFlow.objects.count() == 1
