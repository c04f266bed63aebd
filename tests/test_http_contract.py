"""The HTTP framing of request bodies, through real servers: duplicate JSON keys and chunked bodies.

gunicorn (what ``make run`` serves with) decodes chunked bodies; Django's own server (the
``live_server`` fixture) cannot. Neither may let a chunked body read as empty, and no JSON
route may let the last of two equal keys win.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from pytest_django.live_server_helper import LiveServer

from reasoning.models import ReasoningFlow, ReasoningStep
from research_backlog.models import ResearchRequest
from tests.servers import Server, run_gunicorn

pytestmark = pytest.mark.django_db(transaction=True)

NEXT = "/admin/v1/reasoning/research/backlog/next"
FLOWS = "/api/reasoning/flows"


@pytest.fixture(scope="module")
def gunicorn(django_db_setup: None, django_db_blocker: Any) -> Iterator[Server]:
    with django_db_blocker.unblock():
        yield from run_gunicorn()


@pytest.fixture
def admin_headers(make_token: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token('reasoning.admin')}", "Content-Type": "application/json"}


@pytest.fixture
def agent_headers(make_token: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token('reasoning.write')}", "Content-Type": "application/json"}


@pytest.fixture
def pending_question(gunicorn: Server, admin_headers: dict[str, str]) -> str:
    """A pending `user_question` request: what an empty pull body would dispatch."""
    body = json.dumps({"trigger_type": "user_question", "question": "Which guideline applies?"}).encode()
    answer = gunicorn.request("POST", "/admin/v1/reasoning/research/deeper-request", body, admin_headers)
    assert answer.status == 201, answer.body
    request_id: str = answer.json()["id"]
    return request_id


def chunks(body: bytes, size: int = 7) -> list[bytes]:
    return [body[i : i + size] for i in range(0, len(body), size)]


# --- Duplicate keys ---------------------------------------------------------------------------


def test_duplicate_pii_fields_key_is_400_naming_it_and_stores_nothing(
    gunicorn: Server, agent_headers: dict[str, str]
) -> None:
    answer = gunicorn.request("POST", FLOWS, json.dumps({"trigger_type": "user_question"}).encode(), agent_headers)
    flow_id = answer.json()["id"]
    # The first pii_fields declares the name as PII; a last-key-wins parser would drop that.
    body = (
        b'{"kind": "retrieval", "agent": "researcher", "summary_text": "Looked up the patient",'
        b' "pii_fields": ["name"], "inputs": {"name": "Jane Roe"}, "pii_fields": []}'
    )

    answer = gunicorn.request("POST", f"{FLOWS}/{flow_id}/steps", body, agent_headers)

    assert answer.status == 400, answer.body
    assert answer.json() == {"detail": "JSON parse error - duplicate key 'pii_fields'"}
    assert not ReasoningStep.objects.exists()


@pytest.mark.parametrize(
    ("body", "key"),
    [
        pytest.param(b'{"trigger_type": "a", "trigger_type": "b"}', "trigger_type", id="top-level"),
        pytest.param(b'{"trigger_type": "a", "x": {"k": 1, "k": 2}}', "k", id="nested-object"),
        pytest.param(b'{"trigger_type": "a", "x": [{"deep": [{"z": 1, "z": 1}]}]}', "z", id="inside-lists"),
    ],
)
def test_duplicate_key_at_any_depth_is_400(
    gunicorn: Server, agent_headers: dict[str, str], body: bytes, key: str
) -> None:
    answer = gunicorn.request("POST", FLOWS, body, agent_headers)

    assert answer.status == 400, answer.body
    assert answer.json() == {"detail": f"JSON parse error - duplicate key '{key}'"}
    assert not ReasoningFlow.objects.exists()


def test_duplicate_key_is_400_on_an_admin_route_too(
    gunicorn: Server, admin_headers: dict[str, str], pending_question: str
) -> None:
    body = b'{"trigger_type": "user_question", "trigger_type": "no_such_type"}'

    answer = gunicorn.request("POST", NEXT, body, admin_headers)

    assert answer.status == 400, answer.body
    assert "duplicate key 'trigger_type'" in answer.json()["detail"]
    assert ResearchRequest.objects.get(pk=pending_question).status == ResearchRequest.Status.PENDING


# --- Chunked bodies under gunicorn: read whole -----------------------------------------------------


def test_chunked_pull_body_is_read_and_filters_the_pull(
    gunicorn: Server, admin_headers: dict[str, str], pending_question: str
) -> None:
    body = json.dumps({"trigger_type": "no_such_type"}).encode()

    answer = gunicorn.request("POST", NEXT, chunks(body), admin_headers)

    assert answer.status == 200, answer.body
    assert answer.json() == {"request": None}
    assert ResearchRequest.objects.get(pk=pending_question).status == ResearchRequest.Status.PENDING


def test_chunked_bad_body_is_rejected_like_a_framed_one(
    gunicorn: Server, admin_headers: dict[str, str], pending_question: str
) -> None:
    body = json.dumps({"trigger_type": "not a label"}).encode()

    answer = gunicorn.request("POST", NEXT, chunks(body), admin_headers)

    assert answer.status == 400, answer.body
    assert "trigger_type" in answer.json()
    assert ResearchRequest.objects.get(pk=pending_question).status == ResearchRequest.Status.PENDING


def test_chunked_flow_create_stores_the_body(gunicorn: Server, agent_headers: dict[str, str]) -> None:
    body = json.dumps({"trigger_type": "chunked_question", "agent": "researcher", "trace_id": "t-1"}).encode()

    answer = gunicorn.request("POST", FLOWS, chunks(body, 3), agent_headers)

    assert answer.status == 201, answer.body
    flow = ReasoningFlow.objects.get()
    assert (flow.trigger_type, flow.agent, flow.trace_id) == ("chunked_question", "researcher", "t-1")


def test_chunked_body_over_the_size_limit_is_413(gunicorn: Server, agent_headers: dict[str, str]) -> None:
    body = json.dumps({"trigger_type": "user_question"}).encode()
    body += b" " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1 - len(body))

    answer = gunicorn.request("POST", FLOWS, chunks(body, 64 * 1024), agent_headers)

    assert answer.status == 413, answer.body
    assert answer.json() == {"detail": "Request body is too large."}
    assert not ReasoningFlow.objects.exists()


def test_chunked_body_exactly_at_the_size_limit_is_accepted(gunicorn: Server, agent_headers: dict[str, str]) -> None:
    body = json.dumps({"trigger_type": "user_question"}).encode()
    body += b" " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - len(body))

    answer = gunicorn.request("POST", FLOWS, chunks(body, 64 * 1024), agent_headers)

    assert answer.status == 201, answer.body


# --- Chunked bodies under Django's own server: refused ------------------------------------------


def test_chunked_body_on_a_server_that_cannot_decode_it_is_411(
    live_server: LiveServer, make_token: Callable[..., str]
) -> None:
    host, port = live_server.url.removeprefix("http://").split(":")
    admin = {"Authorization": f"Bearer {make_token('reasoning.admin')}", "Content-Type": "application/json"}
    enqueue = json.dumps({"trigger_type": "user_question", "question": "Which guideline applies?"}).encode()
    server = Server(host, int(port))
    assert server.request("POST", "/admin/v1/reasoning/research/deeper-request", enqueue, admin).status == 201

    body = chunks(json.dumps({"trigger_type": "no_such_type"}).encode())

    # The server answers as soon as it has the headers; sending the body then would hit a closed socket.
    answer = server.request("POST", NEXT, body, admin, early_answer_wait=5)

    assert answer.status == 411, answer.body
    assert "Content-Length" in answer.json()["detail"]
    assert ResearchRequest.objects.get().status == ResearchRequest.Status.PENDING
