"""POST /api/reasoning/ingest: whole flows in one request, each item all or none, items independent."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.recording import ingest as ingest_service
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

URL = "/api/reasoning/ingest"


def step(n: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "retrieval",
        "agent": "researcher",
        "summary_text": f"Reviewed the evidence, pass {n}",
        "confidence": 0.95,
        **fields,
    }


def whole_flow(steps: int = 3, *, close: bool = True, **fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "trigger_type": "user_question",
        "trigger_ref": "bench/case-1",
        "agent": "researcher",
        "steps": [step(n, id=str(uuid.uuid4())) for n in range(steps)],
        **fields,
    }
    if close:
        item["close"] = {"flow_state": "completed", "outcome_type": "recommendation_delivered"}
    return item


def ingest(client: APIClient, *items: dict[str, Any]) -> Any:
    return client.post(URL, {"flows": list(items)}, format="json")


def actions_for(flow_id: str) -> list[str]:
    step_ids = [str(pk) for pk in ReasoningStep.objects.filter(flow_id=uuid.UUID(flow_id)).values_list("pk", flat=True)]
    return list(
        AuditEvent.objects.filter(target_id__in=[flow_id, *step_ids])
        .exclude(action__startswith="reasoning.pathway")
        .order_by("id")
        .values_list("action", flat=True)
    )


# --- Success ------------------------------------------------------------------------------------


def test_one_request_opens_fills_and_closes_a_flow(agent: APIClient) -> None:
    item = whole_flow(3)
    item["steps"][1]["parent_step_id"] = item["steps"][0]["id"]
    item["steps"][2]["confidence"] = 0.7

    response = ingest(agent, item)

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["created"] == 1 and body["replayed"] == 0 and body["rejected"] == 0
    assert body["flows"] == [
        {"index": 0, "id": item["id"], "status": "created", "flow_state": "completed", "step_count": 3, "errors": {}}
    ]
    flow = ReasoningFlow.objects.get(pk=item["id"])
    assert flow.outcome_confidence == 0.7  # the weakest step
    assert flow.patient_safe_summary is True
    assert set(flow.dimensions_snapshot or {}) == {"confidence", "coverage", "maturity", "recency", "consensus", "risk"}
    steps = list(ReasoningStep.objects.filter(flow=flow).order_by("position"))
    assert [str(s.pk) for s in steps] == [s["id"] for s in item["steps"]]
    assert [s.position for s in steps] == [1, 2, 3]
    assert str(steps[1].parent_step_id) == item["steps"][0]["id"]
    assert actions_for(item["id"]) == [
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.step.created",
        "reasoning.step.created",
        "reasoning.flow.completed",
    ]


def test_items_are_independent_and_errors_name_the_item_and_step(agent: APIClient) -> None:
    good, bad, also_good = whole_flow(2), whole_flow(2), whole_flow(1)
    bad["steps"][1]["summary_text"] = "x" * 281

    response = ingest(agent, good, bad, also_good)

    assert response.status_code == 207, response.content
    body = response.json()
    assert [item["status"] for item in body["flows"]] == ["created", "rejected", "created"]
    assert body["flows"][1]["id"] == bad["id"]
    assert list(body["flows"][1]["errors"]) == ["flows[1].steps[1].summary_text"]
    assert (body["created"], body["rejected"]) == (2, 1)
    assert not ReasoningFlow.objects.filter(pk=bad["id"]).exists()
    assert not ReasoningStep.objects.filter(pk__in=[s["id"] for s in bad["steps"]]).exists()
    assert ReasoningFlow.objects.filter(pk__in=[good["id"], also_good["id"]], flow_state="completed").count() == 2


def test_a_bad_parent_rejects_only_its_item_naming_the_field(agent: APIClient) -> None:
    good, bad = whole_flow(1), whole_flow(2)
    bad["steps"][1]["parent_step_id"] = str(uuid.uuid4())

    body = ingest(agent, good, bad).json()

    assert body["flows"][1]["errors"] == {
        "flows[1].steps[1].parent_step_id": ["must be an existing, earlier step of the same flow"]
    }
    assert not ReasoningFlow.objects.filter(pk=bad["id"]).exists()
    assert ReasoningFlow.objects.filter(pk=good["id"]).exists()


def test_sending_the_same_body_again_is_a_replay_that_writes_nothing(agent: APIClient) -> None:
    items = [whole_flow(2), whole_flow(1, close=False)]
    assert ingest(agent, *items).status_code == 200
    events = AuditEvent.objects.count()

    response = ingest(agent, *items)

    assert response.status_code == 200
    assert [item["status"] for item in response.json()["flows"]] == ["replayed", "replayed"]
    assert AuditEvent.objects.count() == events
    assert ReasoningStep.objects.count() == 3


def test_a_retry_of_a_request_stored_by_the_earlier_fingerprint_is_still_a_replay(
    agent: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows written before 2026-12-05 hold the json.dumps fingerprint: a retry after the upgrade
    must replay, not conflict; a changed body must still conflict. (The two encodings differ on
    date-times and on text beyond ASCII; elsewhere the fingerprints are the same.)"""
    started = {"started_at": "2026-12-04T09:30:00.250Z", "summary_text": "Reviewed Müller's labs"}
    items = [whole_flow(2, trigger_summary="Frühstück"), whole_flow(1, close=False)]
    for item in items:
        item["steps"][0].update(started)
    with monkeypatch.context() as old_code:
        old_code.setattr(ingest_service, "request_fingerprint", ingest_service.legacy_request_fingerprint)
        assert ingest(agent, *items).status_code == 200
    stored = set(ReasoningStep.objects.values_list("request_hash", flat=True))
    events = AuditEvent.objects.count()

    response = ingest(agent, *items)

    assert [item["status"] for item in response.json()["flows"]] == ["replayed", "replayed"]
    assert AuditEvent.objects.count() == events
    assert set(ReasoningStep.objects.values_list("request_hash", flat=True)) == stored
    changed = [{**items[0], "trigger_ref": "another/case"}]
    changed_step = {**items[1], "steps": [{**items[1]["steps"][0], "summary_text": "Another summary"}]}
    body = ingest(agent, *changed, changed_step).json()
    assert [item["status"] for item in body["flows"]] == ["rejected", "rejected"]
    assert body["flows"][0]["errors"] == {"flows[0].id": [f"id {items[0]['id']} already exists with a different body"]}
    (step_error,) = body["flows"][1]["errors"].values()
    assert step_error == [f"id {items[1]['steps'][0]['id']} already exists with a different body"]


@pytest.mark.parametrize("secret", ["a-secret-key-" + "x" * 40, "another secret with ünïcode"])
def test_the_request_fingerprint_is_the_hmac_of_the_body_under_a_key_of_the_secret(
    settings: Settings, secret: str
) -> None:
    """RFC 2104's HMAC-SHA256 of the body's sorted compact JSON under SHA-256(salt + SECRET_KEY),
    whatever computes it; for an ASCII body the same hex digest rows stored before 2026-12-05."""
    settings.SECRET_KEY = secret
    data = {
        "summary_text": "Reviewed the labs",
        "confidence": 0.5,
        "kind": "retrieval",
        "inputs": {"b": [1, 2], "a": None},
    }
    key = hashlib.sha256(("reasoning.request_fingerprint" + secret).encode()).digest()
    body = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    fingerprint = ingest_service.request_fingerprint(data)

    assert fingerprint == hmac.new(key, body, hashlib.sha256).hexdigest()
    assert fingerprint == ingest_service.legacy_request_fingerprint(data)
    assert ingest_service.request_fingerprint({**data, "confidence": 0.6}) != fingerprint


def test_the_same_id_with_another_body_is_rejected_as_a_conflict(agent: APIClient) -> None:
    item = whole_flow(1)
    ingest(agent, item)

    response = ingest(agent, {**item, "trigger_ref": "another/case"})

    result = response.json()["flows"][0]
    assert result["status"] == "rejected"
    assert result["errors"] == {"flows[0].id": [f"id {item['id']} already exists with a different body"]}


def test_one_flow_twice_in_a_request_rejects_the_second(agent: APIClient) -> None:
    item = whole_flow(1)

    body = ingest(agent, item, {"id": item["id"], "steps": [step(9)]}).json()

    assert [result["status"] for result in body["flows"]] == ["created", "rejected"]
    assert "flows[1].id" in body["flows"][1]["errors"]


def test_a_long_running_agent_sends_its_flow_in_pieces(agent: APIClient) -> None:
    opened = whole_flow(1, close=False)
    ingest(agent, opened)
    first_step = opened["steps"][0]["id"]

    appended = ingest(agent, {"id": opened["id"], "steps": [step(1, parent_step_id=first_step)]})
    closed = ingest(agent, {"id": opened["id"], "close": {"flow_state": "aborted", "abort_reason": "tool_error"}})

    assert appended.json()["flows"][0] | {"errors": {}} == {
        "index": 0,
        "id": opened["id"],
        "status": "created",
        "flow_state": "active",
        "step_count": 2,
        "errors": {},
    }
    assert closed.json()["flows"][0]["flow_state"] == "aborted"
    flow = ReasoningFlow.objects.get(pk=opened["id"])
    assert (flow.step_count, flow.abort_reason) == (2, "tool_error")
    assert ReasoningStep.objects.get(flow=flow, position=2).parent_step_id == uuid.UUID(first_step)


def test_a_flow_opened_by_the_single_route_takes_steps_and_close_from_ingest(agent: APIClient) -> None:
    flow = open_flow(agent)
    stored = add_step(agent, flow["id"])

    body = ingest(
        agent,
        {
            "id": flow["id"],
            "steps": [step(1, parent_step_id=stored["id"], confidence=0.5)],
            "close": {"flow_state": "completed", "outcome_type": "answered"},
        },
    ).json()

    assert body["flows"][0]["status"] == "created"
    closed = ReasoningFlow.objects.get(pk=flow["id"])
    assert (closed.flow_state, closed.step_count, closed.outcome_confidence) == ("completed", 2, 0.5)


def test_steps_for_a_closed_flow_are_rejected(agent: APIClient) -> None:
    item = whole_flow(1)
    ingest(agent, item)

    result = ingest(agent, {"id": item["id"], "steps": [step(5)]}).json()["flows"][0]

    assert result["status"] == "rejected"
    assert result["errors"] == {"flows[0].id": [f"flow {item['id']} is completed; it no longer accepts changes"]}


def test_appending_to_an_unknown_flow_is_rejected(agent: APIClient) -> None:
    missing = str(uuid.uuid4())

    result = ingest(agent, {"id": missing, "steps": [step()]}).json()["flows"][0]

    assert result["errors"] == {"flows[0].id": [f"flow {missing} does not exist"]}


def test_an_item_without_trigger_type_or_id_says_what_is_missing(agent: APIClient) -> None:
    body = ingest(agent, {"steps": [step()]}, {"agent": "researcher", "steps": []}, {"id": "x"}).json()

    errors = [result["errors"] for result in body["flows"]]
    assert list(errors[0]) == ["flows[0].id"]
    assert list(errors[1]) == ["flows[1].trigger_type"]
    assert list(errors[2]) == ["flows[2].id"]


def test_unknown_item_fields_are_named(agent: APIClient) -> None:
    odd_step, odd_flow = whole_flow(1), whole_flow(1)
    odd_step["steps"][0]["colour"] = "blue"
    odd_flow["priority"] = 1

    body = ingest(agent, odd_step, odd_flow).json()

    assert body["flows"][0]["errors"] == {"flows[0].steps[0].colour": ["Unknown field."]}
    assert body["flows"][1]["errors"] == {"flows[1].priority": ["Unknown field."]}


def test_the_agents_own_times_become_the_flows_times(agent: APIClient) -> None:
    # An SDK batches: the flow began and ended before the request that carries it.
    started = timezone.now() - timedelta(minutes=3)
    ended = started + timedelta(seconds=42)
    item = whole_flow(started_at=started.isoformat())
    item["close"]["ended_at"] = ended.isoformat()

    response = ingest(agent, item)

    assert response.status_code == 200, response.json()
    flow = ReasoningFlow.objects.get(pk=item["id"])
    assert (flow.created_at, flow.closed_at) == (started, ended)
    # A retry carrying the same times is still a replay.
    assert ingest(agent, item).json()["replayed"] == 1


@pytest.mark.parametrize(
    ("started", "ended", "field"),
    [
        (timedelta(hours=1), None, "flows[0].started_at"),
        (None, timedelta(hours=1), "flows[0].close.ended_at"),
        (timedelta(minutes=-1), timedelta(minutes=-2), "flows[0].close.ended_at"),
    ],
)
def test_times_in_the_future_or_out_of_order_are_rejected(
    agent: APIClient, started: timedelta | None, ended: timedelta | None, field: str
) -> None:
    now = timezone.now()
    item = whole_flow()
    if started is not None:
        item["started_at"] = (now + started).isoformat()
    if ended is not None:
        item["close"]["ended_at"] = (now + ended).isoformat()

    answer = ingest(agent, item).json()

    assert answer["rejected"] == 1
    assert field in answer["flows"][0]["errors"]
    assert not ReasoningFlow.objects.filter(pk=item["id"]).exists()


@pytest.mark.parametrize(
    ("started", "ended", "field"),
    [
        ("0001-01-01T00:00:00Z", None, "flows[0].started_at"),
        ("1900-06-01T00:00:00Z", None, "flows[0].started_at"),
        (None, "1970-01-01T00:00:00Z", "flows[0].close.ended_at"),
    ],
)
def test_times_before_2000_are_rejected_naming_the_field(
    agent: APIClient, started: str | None, ended: str | None, field: str
) -> None:
    item = whole_flow()
    if started is not None:
        item["started_at"] = started
    if ended is not None:
        item["close"]["ended_at"] = ended

    answer = ingest(agent, item).json()

    assert answer["rejected"] == 1
    assert answer["flows"][0]["errors"][field] == ["Must not be before 2000-01-01T00:00:00Z."]
    assert not ReasoningFlow.objects.filter(pk=item["id"]).exists()


def test_pii_is_split_off_and_usage_is_stored(agent: APIClient) -> None:
    item = whole_flow(0)
    item["steps"] = [
        step(
            inputs={"query": "labs", "patient_name": "Jane Example"},
            pii_fields=["patient_name"],
            model="gpt-4o-2024-08-06",
            input_tokens=812,
            output_tokens=96,
            reasoning_tokens=40,
            started_at="2026-12-01T10:00:00Z",
        )
    ]

    ingest(agent, item)

    stored = ReasoningStep.objects.get(flow_id=item["id"])
    assert stored.inputs == {"query": "labs"}
    assert json.loads(stored.inputs_pii or "{}") == {"patient_name": "Jane Example"}
    with connection.cursor() as cursor:
        cursor.execute("SELECT inputs_pii FROM reasoning_step WHERE id = %s", [stored.pk])
        (ciphertext,) = cursor.fetchone()
    assert "Jane Example" not in ciphertext
    assert (stored.model, stored.input_tokens, stored.output_tokens, stored.reasoning_tokens) == (
        "gpt-4o-2024-08-06",
        812,
        96,
        40,
    )
    assert stored.started_at is not None and stored.started_at.isoformat() == "2026-12-01T10:00:00+00:00"


def test_the_guard_runs_at_close_for_every_flow(agent: APIClient) -> None:
    safe, unsafe = whole_flow(1), whole_flow(1)
    unsafe["steps"][0]["summary_text"] = "Emailed jane.doe@example.com the result"

    ingest(agent, safe, unsafe)

    assert ReasoningFlow.objects.get(pk=safe["id"]).patient_safe_summary is True
    flagged = ReasoningFlow.objects.get(pk=unsafe["id"])
    assert flagged.patient_safe_summary is False and flagged.summary_guard_rule


def test_the_number_of_queries_does_not_grow_with_flows_or_steps(agent: APIClient) -> None:
    def queries(*items: dict[str, Any]) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert ingest(agent, *items).status_code == 200
        return len(captured)

    queries(whole_flow(1))  # warm caches (token, content types)
    one = queries(whole_flow(1))
    many = queries(*[whole_flow(10) for _ in range(20)])

    assert many == one


def test_the_rows_and_their_audit_events_are_written_by_one_statement(agent: APIClient) -> None:
    def writes(send: Any) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            assert send().status_code in (200, 201)
        return [query["sql"] for query in captured if "audit_event" in query["sql"]]

    opened = whole_flow(2, close=False)
    batch = writes(lambda: ingest(agent, opened, whole_flow(3)))
    one_step = writes(lambda: agent.post(f"/api/reasoning/flows/{opened['id']}/steps", step(5), format="json"))

    assert len(batch) == 1
    assert 'INSERT INTO "reasoning_flow"' in batch[0] and 'INSERT INTO "reasoning_step"' in batch[0]
    assert len(one_step) == 1
    assert 'INSERT INTO "reasoning_step"' in one_step[0] and "UPDATE reasoning_flow" in one_step[0]


# --- The envelope -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "detail"),
        ({"flows": []}, "flows"),
        ({"flows": "all"}, "flows"),
        ({"flows": [whole_flow(0)], "extra": 1}, "extra"),
        ({}, "flows"),
    ],
)
def test_a_body_that_is_not_flows_is_400(agent: APIClient, body: Any, field: str) -> None:
    response = agent.post(URL, body, format="json")

    assert response.status_code == 400
    assert field in response.json()


def test_more_than_100_flows_or_1000_steps_is_400(agent: APIClient) -> None:
    too_many_flows = agent.post(URL, {"flows": [whole_flow(0) for _ in range(101)]}, format="json")
    too_many_steps = agent.post(URL, {"flows": [whole_flow(501), whole_flow(500)]}, format="json")

    assert too_many_flows.status_code == 400 and "flows" in too_many_flows.json()
    assert too_many_steps.status_code == 400
    assert too_many_steps.json() == {"flows": ["At most 1000 steps in all per request (got 1001)."]}
    assert not ReasoningFlow.objects.exists()


def test_not_json_is_415(agent: APIClient) -> None:
    response = agent.post(URL, b"flows=1", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415


def test_bodies_past_the_single_route_limit_are_accepted_up_to_ingest_max_bytes(
    agent: APIClient, settings: Settings
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 20_000
    settings.INGEST_MAX_BYTES = 60_000
    big = [whole_flow(1, trigger_summary="Question about a medication change") for _ in range(60)]
    assert 20_000 < len(json.dumps({"flows": big})) < 60_000

    accepted = ingest(agent, *big)

    assert accepted.status_code == 200, accepted.content
    settings.INGEST_MAX_BYTES = 20_000
    refused = ingest(agent, *[whole_flow(2) for _ in range(100)])
    assert refused.status_code == 413


def test_a_gzip_body_is_decoded(agent: APIClient) -> None:
    item = whole_flow(2)
    body = gzip.compress(json.dumps({"flows": [item]}).encode())

    response = agent.post(URL, body, content_type="application/json", headers={"Content-Encoding": "gzip"})

    assert response.status_code == 200, response.content
    assert ReasoningFlow.objects.filter(pk=item["id"]).exists()


def test_a_gzip_bomb_is_413_and_bad_gzip_400(agent: APIClient, settings: Settings) -> None:
    settings.INGEST_MAX_BYTES = 100_000
    bomb = gzip.compress(b'{"flows": [' + b" " * 5_000_000 + b"]}")
    assert len(bomb) < 100_000

    inflated = agent.post(URL, bomb, content_type="application/json", headers={"Content-Encoding": "gzip"})
    broken = agent.post(URL, b"not gzip", content_type="application/json", headers={"Content-Encoding": "gzip"})
    brotli = agent.post(URL, b"{}", content_type="application/json", headers={"Content-Encoding": "br"})

    assert inflated.status_code == 413
    assert broken.status_code == 400
    assert brotli.status_code == 415


def test_it_needs_the_write_scope(anonymous: APIClient, reader: APIClient) -> None:
    assert ingest(anonymous, whole_flow(1)).status_code == 401
    assert ingest(reader, whole_flow(1)).status_code == 403
    assert not ReasoningFlow.objects.exists()


def test_the_answer_is_documented(client_for: Callable[[str | None], APIClient]) -> None:
    schema = client_for(None).get("/api/schema/", {"format": "json"}).json()

    operation = schema["paths"]["/api/reasoning/ingest"]["post"]
    assert set(operation["responses"]) >= {"200", "207", "400", "401", "403", "413"}
    assert operation["requestBody"]["content"]["application/json"]["examples"]
