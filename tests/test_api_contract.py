"""Rules every API route follows: the shared JSON parser, declared query parameters, strict numbers.

The routes are read from the URL configuration, so a new route is covered without editing this file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework import serializers
from rest_framework.test import APIClient

from audit.models import AuditEvent
from core.api import StrictJSONParser
from core.api_views import ApiView
from core.serializers import StrictBooleanField, StrictCharField, StrictFloatField, StrictIntegerField, StrictSerializer
from patients.services import create_patient
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.tokens import create_api_token
from research_backlog.models import ResearchRequest

pytestmark = pytest.mark.django_db

API_PREFIXES = ("/api/reasoning/", "/admin/v1/", "/v1/", "/audit/v1/")


def api_routes() -> list[tuple[str, type[Any], str]]:
    """(path pattern, view class, method) for every API route, from the URL configuration."""
    found: list[tuple[str, type[Any], str]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                path = "/" + prefix + str(entry.pattern)
                view_class = getattr(entry.callback, "view_class", None)
                if view_class is None or not path.startswith(API_PREFIXES) or path.startswith("/api/schema"):
                    continue
                for method in view_class.http_method_names:
                    if method not in ("options", "head") and hasattr(view_class, method):
                        found.append((path, view_class, method))

    walk(get_resolver().url_patterns, "")
    return found


ROUTES = api_routes()
ROUTE_IDS = [f"{method.upper()} {path}" for path, _, method in ROUTES]


def test_the_route_list_is_not_empty() -> None:
    # A broken walk would make every parametrized test below vacuous.
    assert len(ROUTES) >= 15, ROUTES


@pytest.mark.parametrize(("path", "view_class", "method"), ROUTES, ids=ROUTE_IDS)
def test_every_api_view_uses_the_shared_base_and_only_the_strict_json_parser(
    path: str, view_class: type[Any], method: str
) -> None:
    assert issubclass(view_class, ApiView), f"{view_class.__name__} must extend core.api_views.ApiView"
    if path == "/v1/traces":
        # OTLP: protobuf or OTLP JSON, decoded by reasoning.recording.otlp itself; DRF parses nothing.
        assert view_class().get_parsers() == []
        return
    assert [type(parser) for parser in view_class().get_parsers()] == [StrictJSONParser]


@pytest.fixture
def clients(make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]) -> dict[str, APIClient]:
    patient = create_patient(username="query-casey", password="pw-query-casey-1", actor="system:test", consent=True)
    _, raw = create_api_token(name="casey-app", scopes=["reasoning.read"], patient_id=patient.pk, actor="system:test")
    return {
        "admin": client_for(make_token("reasoning.admin", "reasoning.cot.read")),
        "agent": client_for(make_token("reasoning.write")),
        "patient": client_for(raw),
    }


def client_for_route(clients: dict[str, APIClient], path: str, method: str) -> APIClient:
    if path.startswith("/api/reasoning/flows/<str:flow_id>") and method == "get":
        return clients["patient"]  # the narrative
    return clients["admin"] if path.startswith(("/admin/", "/audit/")) else clients["agent"]


def fill(path: str, some_id: str) -> str:
    """Put an id into every path parameter: the query is checked before the id is looked up."""
    path = re.sub(r"<int:\w+>", "1", path)
    return re.sub(r"<(?:\w+:)?\w+>", some_id, path)


@pytest.mark.parametrize(("path", "view_class", "method"), ROUTES, ids=ROUTE_IDS)
def test_unknown_query_parameter_is_400_naming_it_and_changes_nothing(
    path: str, view_class: type[Any], method: str, clients: dict[str, APIClient], flow: dict[str, Any]
) -> None:
    client = client_for_route(clients, path, method)
    client.raise_request_exception = False
    flows, steps, events = ReasoningFlow.objects.count(), ReasoningStep.objects.count(), AuditEvent.objects.count()

    response = client.generic(method.upper(), fill(path, flow["id"]) + "?colour=red", "{}", "application/json")

    assert response.status_code == 400, response.content
    body = response.json()
    if path == "/v1/traces":  # OTLP errors are a google.rpc.Status
        assert body["message"].startswith("colour: Unknown query parameter."), body
    else:
        assert list(body) == ["colour"], body
        assert "Unknown query parameter." in body["colour"][0]
    assert (ReasoningFlow.objects.count(), ReasoningStep.objects.count()) == (flows, steps)
    assert AuditEvent.objects.count() == events


def test_unknown_query_parameter_message_lists_the_parameters_the_route_takes(operator: APIClient) -> None:
    response = operator.get("/admin/v1/reasoning/claims-pending-review?limt=5")

    assert response.status_code == 400
    assert response.json() == {"limt": ["Unknown query parameter. This route takes: limit."]}


def test_declared_query_parameter_is_still_accepted(operator: APIClient) -> None:
    response = operator.get("/admin/v1/reasoning/claims-pending-review?limit=5")

    assert response.status_code == 200, response.content


def test_query_parameters_are_checked_after_authentication(anonymous: APIClient) -> None:
    # An anonymous caller gets the 401, not a hint about which parameters exist.
    response = anonymous.get("/admin/v1/reasoning/flows?agent=critic&bogus=1")

    assert response.status_code == 401


# --- Content negotiation (core.api.ContentNegotiation) ---------------------------------------------


@pytest.mark.parametrize("accept", [None, "*/*", "application/json", "application/*", "text/html, application/json"])
def test_an_accept_that_takes_json_gets_json(operator: APIClient, accept: str | None) -> None:
    path = "/admin/v1/reasoning/claims-pending-review"
    response = operator.get(path) if accept is None else operator.get(path, HTTP_ACCEPT=accept)

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    assert b"\n" not in response.content  # compact


def test_json_parameters_in_accept_are_honoured(operator: APIClient) -> None:
    response = operator.get("/admin/v1/reasoning/claims-pending-review", HTTP_ACCEPT="application/json; indent=2")

    assert response.status_code == 200
    assert response.content.startswith(b'{\n  "')


@pytest.mark.parametrize("query", ["", "?limit=5"])
def test_an_accept_without_json_is_406_whatever_the_query(operator: APIClient, query: str) -> None:
    response = operator.get(f"/admin/v1/reasoning/claims-pending-review{query}", HTTP_ACCEPT="text/html")

    assert response.status_code == 406
    assert response.json() == {"detail": "Could not satisfy the request Accept header."}


# --- Numbers are JSON numbers -------------------------------------------------------------------


def request_serializers() -> list[type[StrictSerializer]]:
    import pathways.api  # noqa: F401  - every app's request serializers, loaded
    import research_backlog.api  # noqa: F401

    found: list[type[StrictSerializer]] = []
    pending = [StrictSerializer]
    while pending:
        cls = pending.pop()
        found.extend(cls.__subclasses__())
        pending.extend(cls.__subclasses__())
    return found


# Lenient DRF field -> the strict field every request serializer must use instead.
STRICT_FIELDS = {
    serializers.FloatField: StrictFloatField,
    serializers.IntegerField: StrictIntegerField,
    serializers.BooleanField: StrictBooleanField,
    serializers.CharField: StrictCharField,
}


@pytest.mark.parametrize("serializer_class", request_serializers(), ids=lambda cls: cls.__name__)
def test_request_serializers_use_only_strict_scalar_fields(serializer_class: type[StrictSerializer]) -> None:
    fields = serializer_class().fields
    lenient = [
        name
        for name, field in fields.items()
        for loose, strict in STRICT_FIELDS.items()
        if isinstance(field, loose) and not isinstance(field, strict) and not isinstance(field, serializers.ChoiceField)
    ]

    assert not lenient, f"{serializer_class.__name__}: {lenient} accept strings or booleans for other types"


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        pytest.param("confidence", True, "A valid number is required.", id="confidence-true"),
        pytest.param("confidence", False, "A valid number is required.", id="confidence-false"),
        pytest.param("confidence", "0.5", "A valid number is required.", id="confidence-string"),
        pytest.param("latency_ms", "7", "A valid integer is required.", id="latency_ms-string"),
        pytest.param("latency_ms", True, "A valid integer is required.", id="latency_ms-true"),
    ],
)
def test_step_number_given_as_bool_or_string_is_400_naming_it(
    agent: APIClient, flow: dict[str, Any], field: str, value: Any, says: str
) -> None:
    body = {"kind": "retrieval", "agent": "researcher", "summary_text": "Looked up guidelines", field: value}

    response = agent.post(f"/api/reasoning/flows/{flow['id']}/steps", body, format="json")

    assert response.status_code == 400, response.content
    assert says in response.json()[field][0]
    assert not ReasoningStep.objects.exists()


def test_step_numbers_as_json_numbers_are_stored(agent: APIClient, flow: dict[str, Any]) -> None:
    # An integer is a valid number for a float field: 1 means 1.0.
    body = {"kind": "retrieval", "agent": "researcher", "summary_text": "Looked up", "confidence": 1, "latency_ms": 7}

    response = agent.post(f"/api/reasoning/flows/{flow['id']}/steps", body, format="json")

    assert response.status_code == 201, response.content
    step = ReasoningStep.objects.get()
    assert (step.confidence, step.latency_ms) == (1.0, 7)


@pytest.mark.parametrize(
    ("metric", "value", "says"),
    [
        pytest.param("composite_k", True, "A valid number is required.", id="composite_k-true"),
        pytest.param("composite_k", "0.4", "A valid number is required.", id="composite_k-string"),
        pytest.param("evidence_hits", True, "A valid integer is required.", id="evidence_hits-true"),
        pytest.param("evidence_hits", "3", "A valid integer is required.", id="evidence_hits-string"),
    ],
)
def test_outcome_metric_given_as_bool_or_string_is_400_naming_it(
    agent: APIClient, flow: dict[str, Any], metric: str, value: Any, says: str
) -> None:
    body = {"flow_state": "completed", "outcome_type": "answered", "outcome_metrics": {metric: value}}

    response = agent.patch(f"/api/reasoning/flows/{flow['id']}", json.dumps(body), content_type="application/json")

    assert response.status_code == 400, response.content
    assert says in response.json()["outcome_metrics"][metric][0]
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == ReasoningFlow.State.ACTIVE


# --- Labels say what a label is -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        pytest.param("POST", "/api/reasoning/flows", {"trigger_type": "a question"}, "trigger_type", id="trigger_type"),
        pytest.param(
            "POST", "/admin/v1/reasoning/research/backlog/next", {"trigger_type": "x y"}, "trigger_type", id="pull"
        ),
        pytest.param(
            "POST",
            "/admin/v1/reasoning/research/deeper-request",
            {"trigger_type": "user_question", "question": "Why?", "source": "the console"},
            "source",
            id="source",
        ),
    ],
)
def test_label_rejection_says_what_a_label_is(
    operator: APIClient, agent: APIClient, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    client = operator if path.startswith("/admin/") else agent

    response = client.generic(method, path, json.dumps(body), "application/json")

    assert response.status_code == 400, response.content
    message = response.json()[field][0]
    assert "[A-Za-z0-9_.:/-]" in message
    assert "dispatcher_gave_up" in message


def test_complete_with_a_sentence_as_error_is_400_explaining_labels(operator: APIClient) -> None:
    created = operator.post(
        "/admin/v1/reasoning/research/deeper-request",
        {"trigger_type": "user_question", "question": "Which guideline?"},
        format="json",
    )
    assert operator.post("/admin/v1/reasoning/research/backlog/next", {}, format="json").status_code == 200
    url = f"/admin/v1/reasoning/research/backlog/{created.json()['id']}/complete"

    response = operator.post(url, {"error": "dispatcher gave up"}, format="json")

    assert response.status_code == 400, response.content
    assert "[A-Za-z0-9_.:/-]" in response.json()["error"][0]
    assert ResearchRequest.objects.get().status == ResearchRequest.Status.DISPATCHED
    assert operator.post(url, {"error": "dispatcher_gave_up"}, format="json").status_code == 200


# --- Questions, notes and claim ids: text on several lines, nothing invisible ---------------------


@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\u2028", "\ufeff", "\x07"])
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param(
            "/admin/v1/reasoning/research/deeper-request",
            {"trigger_type": "user_question", "question": "Which {c}guideline?"},
            "question",
            id="question",
        ),
        pytest.param(
            "/admin/v1/reasoning/research/deeper-request",
            {"trigger_type": "user_question", "question": "Why?", "trigger_ref": "b{c}p"},
            "trigger_ref",
            id="trigger_ref",
        ),
        pytest.param(
            "/admin/v1/reasoning/claims-pending-review", {"claim_id": "claim-{c}7"}, "claim_id", id="claim_id"
        ),
    ],
)
def test_multiline_text_with_an_invisible_character_is_400_naming_it(
    operator: APIClient, path: str, body: dict[str, str], field: str, char: str, audit_actions: Callable[[], list[str]]
) -> None:
    before = audit_actions()
    payload = {key: value.replace("{c}", char) for key, value in body.items()}

    response = operator.post(path, payload, format="json")

    assert response.status_code == 400, response.content
    assert "Must be text without control characters." in response.json()[field]
    assert audit_actions() == before


def test_multiline_question_keeps_its_line_breaks_and_tabs(operator: APIClient) -> None:
    question = "Which guideline?\r\n\tAdults over 80 → targets"

    response = operator.post(
        "/admin/v1/reasoning/research/deeper-request",
        {"trigger_type": "user_question", "question": question},
        format="json",
    )

    assert response.status_code == 201, response.content
    assert response.json()["question"] == question
