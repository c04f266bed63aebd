"""The hot write routes (open, one step, close, OTLP traces) answered by ``reasoning.recording.hot_writes``
give the same answers, headers and stored rows as their DRF views (``HOT_WRITES=off``), and leave every
request they do not take to those views.

Every other test of these routes runs through the hot path too (it is on by default); these
tests send each request both ways and compare."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from core.throttling import Rate
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.recording import flow_routes, routes
from tests import otlp
from tests.factories import FLOWS

pytestmark = pytest.mark.django_db

# Headers that differ between two answers for reasons other than the path taken.
_VOLATILE = {"Content-Length", "Date"}
STEP = {
    "kind": "retrieval",
    "agent": "researcher",
    "summary_text": "Reviewed the recent lab results",
    "inputs": {"query": "labs", "patient_name": "Ada Quixote"},
    "pii_fields": ["patient_name"],
    "outputs": {"hits": 3},
    "confidence": 0.9,
    "latency_ms": 12,
}
OPEN = {"trigger_type": "user_question", "trigger_ref": "q/hot", "agent": "researcher", "trigger_summary": "A question"}
CLOSE = {"flow_state": "completed", "outcome_type": "recommendation_delivered", "outcome_summary": "Follow up"}


@pytest.fixture
def views_called(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The DRF views of the hot routes that handled a request (the hot path runs none of them)."""
    called: list[str] = []
    for view in (
        flow_routes.FlowCollectionView,
        flow_routes.StepCollectionView,
        flow_routes.FlowDetailView,
        routes.OtlpTracesView,
    ):
        original = view.dispatch

        def spy(self: Any, *args: Any, _original: Any = original, _name: str = view.__name__, **kwargs: Any) -> Any:
            called.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(view, "dispatch", spy)
    return called


class Both:
    """Sends a request once through the hot path and once through DRF, to mirrored state."""

    def __init__(self, settings: Settings, client: APIClient) -> None:
        self.settings = settings
        self.client = client

    def send(self, method: str, path: str, body: Any, *, hot: bool, **extra: Any) -> Any:
        self.settings.HOT_WRITES = hot
        call: Callable[..., Any] = getattr(self.client, method)
        if isinstance(body, bytes | str):
            return call(path, body, content_type=extra.pop("content_type", "application/json"), **extra)
        return call(path, body, format="json", **extra)


def comparable(response: Any, *, sized: bool = True) -> tuple[int, Any, dict[str, str]]:
    if sized:  # CommonMiddleware's, both ways (not on a refusal raised before it: a host not allowed)
        assert response["Content-Length"] == str(len(response.content))
    headers = {name: value for name, value in response.items() if name not in _VOLATILE}
    try:
        body = response.json()
    except ValueError:
        body = response.content
    return response.status_code, body, headers


def masked(body: Any, *ids: str) -> Any:
    """``body`` with the given ids, generated trace ids and time stamps replaced, to compare two
    flows' answers."""
    if isinstance(body, dict):
        return {
            key: f"<{key}>" if (key.endswith("_at") or key == "trace_id") and value else masked(value, *ids)
            for key, value in body.items()
        }
    if isinstance(body, list):
        return [masked(item, *ids) for item in body]
    return "<id>" if body in ids else body


@pytest.fixture
def both(settings: Settings, agent: APIClient) -> Iterator[Both]:
    yield Both(settings, agent)
    settings.HOT_WRITES = True


def test_a_whole_flow_answers_and_stores_the_same_both_ways(both: Both, views_called: list[str]) -> None:
    answers: dict[bool, list[tuple[int, Any, dict[str, str]]]] = {}
    flows: dict[bool, str] = {}
    for hot in (True, False):
        opened = both.send("post", FLOWS, OPEN, hot=hot)
        flow_id = flows[hot] = opened.json()["id"]
        step_id = str(uuid.uuid4())
        steps = [
            both.send("post", f"{FLOWS}/{flow_id}/steps", {**STEP, "id": step_id}, hot=hot),
            both.send("post", f"{FLOWS}/{flow_id}/steps", {**STEP, "id": step_id}, hot=hot),  # a replay: 200
            both.send("post", f"{FLOWS}/{flow_id}/steps", {**STEP, "parent_step_id": step_id}, hot=hot),
        ]
        closed = both.send("patch", f"{FLOWS}/{flow_id}", CLOSE, hot=hot)
        answers[hot] = [
            (status, masked(body, flow_id, step_id, *(s.json()["id"] for s in steps)), headers)
            for status, body, headers in map(comparable, [opened, *steps, closed])
        ]
    assert [status for status, _, _ in answers[True]] == [201, 201, 200, 201, 200]
    assert answers[True] == answers[False]
    # Only the DRF round ran the views.
    assert views_called == ["FlowCollectionView", *["StepCollectionView"] * 3, "FlowDetailView"]

    def stored(flow_id: str) -> dict[str, Any]:
        flow = ReasoningFlow.objects.get(pk=flow_id)
        steps = ReasoningStep.objects.filter(flow=flow).order_by("position")
        events = AuditEvent.objects.filter(target_id__in=[flow_id, *(str(s.pk) for s in steps)]).order_by("id")
        return {
            "flow": (flow.flow_state, flow.step_count, flow.outcome_confidence, flow.patient_safe_summary),
            "radar": flow.dimensions_snapshot,
            "steps": [(s.position, s.kind, s.inputs, s.pii_fields, s.inputs_pii) for s in steps],
            "events": [(e.action, e.actor, {k: v for k, v in e.payload.items() if k != "flow_id"}) for e in events],
        }

    hot_rows, drf_rows = stored(flows[True]), stored(flows[False])
    assert hot_rows == drf_rows
    assert hot_rows["steps"][0][2] == {"query": "labs"}  # the PII split off, encrypted
    assert [action for action, _, _ in hot_rows["events"]] == [
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.step.created",
        "reasoning.flow.completed",
    ]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("post", "{flows}/{flow}/steps", {**STEP, "confidence": 2}, 400),
        ("post", "{flows}/{flow}/steps", {**STEP, "summary_text": ""}, 400),
        ("post", "{flows}/{flow}/steps", {**STEP, "surprise": 1}, 400),
        ("post", "{flows}/{flow}/steps", {**STEP, "parent_step_id": str(uuid.UUID(int=7))}, 400),
        ("post", "{flows}/{flow}/steps", b'{"kind": "retrieval", "kind": "verdict"}', 400),
        ("post", "{flows}/{flow}/steps", b'{"kind": ', 400),
        ("post", "{flows}/{flow}/steps", b"[]", 400),
        ("post", "{flows}/not-a-uuid/steps", STEP, 400),
        ("post", "{flows}/{missing}/steps", STEP, 404),
        ("post", "{flows}", {**OPEN, "patient_id": str(uuid.UUID(int=9))}, 400),
        ("post", "{flows}", {"trigger_ref": "q/1"}, 400),
        ("patch", "{flows}/{flow}", {"flow_state": "completed"}, 400),
        ("patch", "{flows}/{flow}", {"flow_state": "active"}, 400),
        ("patch", "{flows}/{missing}", CLOSE, 404),
    ],
)
def test_a_refusal_is_the_same_both_ways_and_writes_nothing(
    both: Both, flow: dict[str, Any], method: str, path: str, body: Any, status: int
) -> None:
    url = path.format(flows=FLOWS, flow=flow["id"], missing=uuid.UUID(int=1))
    before = (ReasoningStep.objects.count(), AuditEvent.objects.count(), ReasoningFlow.objects.count())
    hot = comparable(both.send(method, url, body, hot=True))
    drf = comparable(both.send(method, url, body, hot=False))
    assert hot[0] == status, hot
    assert hot == drf
    assert (ReasoningStep.objects.count(), AuditEvent.objects.count(), ReasoningFlow.objects.count()) == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("post", "{flows}", OPEN), ("post", "{flows}/{flow}/steps", STEP), ("patch", "{flows}/{flow}", CLOSE)],
)
def test_a_host_not_allowed_is_refused_the_same_both_ways_and_writes_nothing(
    both: Both, flow: dict[str, Any], method: str, path: str, body: Any
) -> None:
    url = path.format(flows=FLOWS, flow=flow["id"])
    before = (ReasoningStep.objects.count(), AuditEvent.objects.count(), ReasoningFlow.objects.count())
    hot = comparable(both.send(method, url, body, hot=True, HTTP_HOST="elsewhere.example"), sized=False)
    drf = comparable(both.send(method, url, body, hot=False, HTTP_HOST="elsewhere.example"), sized=False)
    assert hot[0] == 400, hot
    assert hot == drf
    assert (ReasoningStep.objects.count(), AuditEvent.objects.count(), ReasoningFlow.objects.count()) == before


def test_a_closed_flow_refuses_a_step_and_a_second_close_the_same_both_ways(both: Both, flow: dict[str, Any]) -> None:
    both.send("patch", f"{FLOWS}/{flow['id']}", CLOSE, hot=True)
    for method, path, body in (
        ("post", f"{FLOWS}/{flow['id']}/steps", STEP),
        ("patch", f"{FLOWS}/{flow['id']}", CLOSE),
    ):
        hot = comparable(both.send(method, path, body, hot=True))
        assert hot[0] == 409
        assert hot == comparable(both.send(method, path, body, hot=False))


def test_past_the_write_limit_both_ways_answer_429_with_retry_after(
    both: Both, flow: dict[str, Any], settings: Settings
) -> None:
    settings.API_WRITE_RATE_LIMIT = Rate(1, 3600)
    hot = both.send("post", f"{FLOWS}/{flow['id']}/steps", STEP, hot=True)
    drf = both.send("post", f"{FLOWS}/{flow['id']}/steps", STEP, hot=False)
    # The first write of this window (the fixture's open was before the limit) went through.
    assert hot.status_code == 201
    assert drf.status_code == 429
    again = both.send("post", f"{FLOWS}/{flow['id']}/steps", STEP, hot=True)
    assert again.status_code == 429
    assert again.json() == drf.json()
    assert again["Retry-After"] == drf["Retry-After"]
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 1


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no token", 401),
        ("unknown token", 401),
        ("read scope", 403),
        ("query string", 400),
        ("form body", 415),
        ("wants html", 406),
    ],
)
def test_what_the_hot_path_does_not_take_goes_to_the_view(
    case: str,
    status: int,
    flow: dict[str, Any],
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
    views_called: list[str],
) -> None:
    client = client_for(make_token("reasoning.write"))
    path = f"{FLOWS}/{flow['id']}/steps"
    kwargs: dict[str, Any] = {"data": STEP, "format": "json"}
    if case == "no token":
        client = client_for(None)
    elif case == "unknown token":
        client = client_for("rft_not-a-token")
    elif case == "read scope":
        client = client_for(make_token("reasoning.read"))
    elif case == "query string":
        path += "?dry_run=1"
    elif case == "form body":
        kwargs = {"data": {"kind": "retrieval"}}
    elif case == "wants html":
        kwargs["HTTP_ACCEPT"] = "text/html"
    answer = client.post(path, **kwargs)
    assert answer.status_code == status, answer.content
    assert views_called == ["StepCollectionView"]
    if status == 401:
        assert answer["WWW-Authenticate"] == 'Bearer realm="api"'


def test_another_writers_flow_is_not_found_on_the_hot_path(
    flow: dict[str, Any], make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    other = client_for(make_token("reasoning.write", name="other-agent"))
    answer = other.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json")
    assert answer.status_code == 404
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 0


def test_a_session_cannot_write_through_the_hot_path(operator_client: Client, flow: dict[str, Any]) -> None:
    """A logged-in operator has no Bearer token: the view answers (a write needs a token)."""
    answer = operator_client.patch(f"{FLOWS}/{flow['id']}", CLOSE, content_type="application/json")
    assert answer.status_code in (401, 403)
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == "active"


@pytest.mark.parametrize("path", ["{flows}", "{flows}/{flow}/steps", "{flows}/{flow}"])
def test_an_empty_body_names_the_required_fields_the_same_both_ways(
    both: Both, flow: dict[str, Any], path: str
) -> None:
    url = path.format(flows=FLOWS, flow=flow["id"])
    method = "patch" if url.endswith(flow["id"]) else "post"
    hot = comparable(both.send(method, url, b"", hot=True))
    assert hot[0] == 400
    assert hot == comparable(both.send(method, url, b"", hot=False))


# --- POST /v1/traces -----------------------------------------------------------------------------

OTLP_URL = "/v1/traces"
OTLP_TYPES = {"protobuf": "application/x-protobuf", "json": "application/json"}


def trace(trace_id: str) -> Any:
    """An agent turn: the root span (a flow), a chat span and a tool span under it (its steps)."""
    return otlp.request(
        otlp.span("invoke_agent triage", trace_id=trace_id, attributes={"gen_ai.operation.name": "invoke_agent"}),
        otlp.chat(),
        otlp.tool(),
    )


def otlp_body(message: Any, encoding: str) -> bytes:
    return otlp.protobuf_body(message) if encoding == "protobuf" else otlp.json_body(message)


def otlp_comparable(response: Any) -> tuple[int, bytes, dict[str, str]]:
    return response.status_code, response.content, {k: v for k, v in response.items() if k not in _VOLATILE}


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_trace_answers_and_stores_the_same_both_ways(both: Both, views_called: list[str], encoding: str) -> None:
    answers, flows = {}, {}
    for hot, trace_id in ((True, "1" * 32), (False, "2" * 32)):
        message = trace(trace_id)
        for item in message.resource_spans[0].scope_spans[0].spans:
            item.trace_id = bytes.fromhex(trace_id)
        sent = both.send("post", OTLP_URL, otlp_body(message, encoding), hot=hot, content_type=OTLP_TYPES[encoding])
        replay = both.send("post", OTLP_URL, otlp_body(message, encoding), hot=hot, content_type=OTLP_TYPES[encoding])
        answers[hot] = [otlp_comparable(sent), otlp_comparable(replay)]
        flows[hot] = ReasoningFlow.objects.get(trace_id=trace_id)
    assert answers[True][0][0] == 200
    assert answers[True][0][2]["Allow"] == "POST, OPTIONS"
    assert answers[True] == answers[False]
    assert views_called == ["OtlpTracesView"] * 2  # only the DRF round's two requests

    def stored(flow: ReasoningFlow) -> dict[str, Any]:
        flow.refresh_from_db()
        steps = ReasoningStep.objects.filter(flow=flow).order_by("position")
        events = AuditEvent.objects.filter(target_id__in=[str(flow.pk), *(str(s.pk) for s in steps)]).order_by("id")
        return {
            "flow": (flow.flow_state, flow.step_count, flow.agent, flow.trigger_type, flow.patient_safe_summary),
            "steps": [(s.position, s.kind, s.agent, s.summary_text, s.model, s.input_tokens) for s in steps],
            "events": [e.action for e in events],
        }

    hot_rows = stored(flows[True])
    assert hot_rows == stored(flows[False])
    assert hot_rows["flow"][:2] == ("completed", 2)


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\x0a\x03abc", "application/x-protobuf", 400),
        (b'{"resourceSpans": 7}', "application/json", 400),
        (b"<traces/>", "application/xml", 415),
    ],
)
def test_an_otlp_refusal_is_the_same_both_ways(both: Both, body: bytes, content_type: str, status: int) -> None:
    hot = otlp_comparable(both.send("post", OTLP_URL, body, hot=True, content_type=content_type))
    drf = otlp_comparable(both.send("post", OTLP_URL, body, hot=False, content_type=content_type))
    assert hot[0] == status, hot
    assert hot == drf
    assert ReasoningFlow.objects.count() == 0


def test_past_the_write_limit_otlp_answers_429_the_same_both_ways(both: Both, settings: Settings) -> None:
    settings.API_WRITE_RATE_LIMIT = Rate(1, 3600)
    body = otlp.protobuf_body(trace(otlp.TRACE_ID))
    first = both.send("post", OTLP_URL, body, hot=True, content_type="application/x-protobuf")
    assert first.status_code == 200
    hot = both.send("post", OTLP_URL, body, hot=True, content_type="application/x-protobuf")
    drf = both.send("post", OTLP_URL, body, hot=False, content_type="application/x-protobuf")
    assert hot.status_code == 429
    assert otlp_comparable(hot) == otlp_comparable(drf)
    assert hot["Retry-After"] == drf["Retry-After"]
    assert b"Request was throttled" in hot.content


@pytest.mark.parametrize(
    ("case", "status"),
    [("no token", 401), ("read scope", 403), ("query string", 400), ("wants html", 406)],
)
def test_what_the_hot_path_does_not_take_of_otlp_goes_to_the_view(
    case: str,
    status: int,
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
    views_called: list[str],
) -> None:
    client = client_for(
        None if case == "no token" else make_token("reasoning.read" if case == "read scope" else "reasoning.write")
    )
    path = OTLP_URL + ("?partial=1" if case == "query string" else "")
    extra: dict[str, Any] = {"HTTP_ACCEPT": "text/html"} if case == "wants html" else {}
    if case == "no length":
        extra["CONTENT_LENGTH"] = ""  # a chunked body, read whole by core.middleware
    answer = client.post(path, otlp.protobuf_body(trace(otlp.TRACE_ID)), content_type="application/x-protobuf", **extra)
    assert answer.status_code == status, answer.content
    assert views_called == ["OtlpTracesView"]
    assert answer["Content-Type"] == "application/x-protobuf"
