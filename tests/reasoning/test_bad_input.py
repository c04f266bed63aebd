"""Bad input on every reasoning API route: a JSON 4xx naming the field, never a 500, nothing half-written.

Each rejection test snapshots the stored flows (with their state and step count), steps and
audit actions before the request and checks they are unchanged after it.
"""

from __future__ import annotations

import bz2
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.db import models
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow, ReasoningStep

if TYPE_CHECKING:
    from rest_framework.response import _MonkeyPatchedResponse as TestResponse

pytestmark = pytest.mark.django_db

JSON = "application/json"
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    path: str  # "{flow_id}" is filled in with the id of the `flow` fixture
    valid: dict[str, Any]  # a body the route accepts: each case below breaks one thing in it
    required: tuple[str, ...]  # the fields an empty body is rejected for

    def with_(self, **overrides: Any) -> bytes:
        return json.dumps({**self.valid, **overrides}).encode()


CREATE_FLOW = Route(
    "create_flow",
    "POST",
    "/api/reasoning/flows",
    {"trigger_type": "user_question", "agent": "researcher"},
    ("trigger_type",),
)
ADD_STEP = Route(
    "add_step",
    "POST",
    "/api/reasoning/flows/{flow_id}/steps",
    {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved current guidelines"},
    ("kind", "agent", "summary_text"),
)
CLOSE_FLOW = Route(
    "close_flow",
    "PATCH",
    "/api/reasoning/flows/{flow_id}",
    {"flow_state": "aborted", "abort_reason": "tool_error"},
    ("flow_state",),
)
WRITE_ROUTES = [pytest.param(route, id=route.name) for route in (CREATE_FLOW, ADD_STEP, CLOSE_FLOW)]


Send = Callable[..., "TestResponse"]


@pytest.fixture
def send(agent: APIClient, operator: APIClient, flow: dict[str, Any]) -> Send:
    """Send a raw body; admin routes go as the operator, the rest as the agent."""
    for client in (agent, operator):
        client.raise_request_exception = False  # a crash must show up as a 500 response, not an exception

    def send_(method: str, path: str, body: bytes | str = b"", content_type: str = JSON) -> TestResponse:
        client = operator if path.startswith("/admin/") else agent
        url = path.format(flow_id=flow["id"])
        # Django sends bytes as they are (invalid UTF-8, compressed data); the DRF stub only says str.
        return client.generic(method, url, data=body, content_type=content_type)  # type: ignore[arg-type]

    return send_


@dataclass(frozen=True)
class Stored:
    """What a rejected request must leave exactly as it was."""

    flows: list[tuple[Any, ...]]
    steps: list[uuid.UUID]
    audit: list[str]


@pytest.fixture
def stored(audit_actions: Callable[[], list[str]]) -> Callable[[], Stored]:
    def snapshot() -> Stored:
        return Stored(
            flows=list(ReasoningFlow.objects.order_by("id").values_list("id", "flow_state", "step_count", "closed_at")),
            steps=list(ReasoningStep.objects.order_by("id").values_list("id", flat=True)),
            audit=audit_actions(),
        )

    return snapshot


def assert_rejected(response: TestResponse, status: int, *, field: str = "detail", says: str = "") -> None:
    """A JSON ``status`` response whose body has ``field`` as a key, with ``says`` in its message."""
    assert response.status_code == status, f"{response.status_code}: {response.content[:300]!r}"
    assert response["Content-Type"] == JSON, response["Content-Type"]
    body = response.json()
    assert isinstance(body, dict), body
    assert field in body, body
    assert says in str(body[field]), body


def nested(levels: int) -> Any:
    """``{"a": {"a": ... 1}}`` with ``levels`` dicts."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def column_length(model: type[models.Model], name: str) -> int:
    field = model._meta.get_field(name)
    assert isinstance(field, models.CharField)
    assert field.max_length is not None
    return field.max_length


# --- Controls: the base bodies are valid, so each case below fails for the one thing it breaks ---


@pytest.mark.parametrize("route", WRITE_ROUTES)
def test_valid_body_is_accepted(route: Route, send: Send) -> None:
    response = send(route.method, route.path, route.with_())

    assert response.status_code in (200, 201), response.content


def test_inputs_nested_exactly_to_the_limit_are_accepted(send: Send) -> None:
    response = send("POST", ADD_STEP.path, ADD_STEP.with_(inputs=nested(20)))

    assert response.status_code == 201, response.content


def test_body_exactly_at_the_size_limit_is_accepted(send: Send) -> None:
    body = CREATE_FLOW.with_()
    body += b" " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE - len(body))

    response = send("POST", CREATE_FLOW.path, body)

    assert response.status_code == 201, response.content


# --- The body as a whole: syntax, shape, content type, size, charset -----------------------

MALFORMED_JSON = [
    pytest.param(b'{"trigger_type": "user_question"', id="truncated"),
    pytest.param(b"{'trigger_type': 'user_question'}", id="single-quotes"),
    pytest.param(b'{"trigger_type": "user_question",}', id="trailing-comma"),
    pytest.param(b"{} {}", id="two-documents"),
    pytest.param(b'{"summary_text": "\xff\xfe"}', id="invalid-utf8"),
    pytest.param(b'{"confidence": NaN}', id="NaN"),
    pytest.param(b'{"confidence": Infinity}', id="Infinity"),
    pytest.param(b'{"confidence": -Infinity}', id="minus-Infinity"),
    pytest.param(b'{"inputs": {"x": NaN}}', id="NaN-in-inputs"),
    pytest.param(b'{"latency_ms": 1' + b"0" * 5000 + b"}", id="5000-digit-integer"),
    pytest.param(b'{"inputs": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_001, id="inputs-nested-10000-deep"),
    pytest.param(b"[" * 10_000 + b"]" * 10_000, id="list-nested-10000-deep"),
]


@pytest.mark.parametrize("route", WRITE_ROUTES)
@pytest.mark.parametrize("body", MALFORMED_JSON)
def test_malformed_json_is_400_with_a_parse_error_detail(
    route: Route, body: bytes, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(route.method, route.path, body)

    assert_rejected(response, 400, says="JSON parse error")
    assert stored() == before


NOT_AN_OBJECT = [
    pytest.param(b"[]", "Expected a dictionary, but got list", id="empty-list"),
    pytest.param(b'[{"trigger_type": "user_question"}]', "Expected a dictionary, but got list", id="list-of-objects"),
    pytest.param(b'"user_question"', "Expected a dictionary, but got str", id="string"),
    pytest.param(b"42", "Expected a dictionary, but got int", id="number"),
    pytest.param(b"true", "Expected a dictionary, but got bool", id="boolean"),
    pytest.param(b"null", "No data provided", id="null"),
]


@pytest.mark.parametrize("route", WRITE_ROUTES)
@pytest.mark.parametrize(("body", "says"), NOT_AN_OBJECT)
def test_json_that_is_not_an_object_is_400(
    route: Route, body: bytes, says: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(route.method, route.path, body)

    assert_rejected(response, 400, field="non_field_errors", says=says)
    assert stored() == before


@pytest.mark.parametrize("route", WRITE_ROUTES)
@pytest.mark.parametrize("body", [pytest.param(b"", id="no-body"), pytest.param(b"{}", id="empty-object")])
def test_empty_body_is_400_naming_each_required_field(
    route: Route, body: bytes, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(route.method, route.path, body)

    assert_rejected(response, 400, field=route.required[0], says="This field is required.")
    assert set(response.json()) == set(route.required)
    assert stored() == before


@pytest.mark.parametrize("route", WRITE_ROUTES)
@pytest.mark.parametrize(
    "content_type",
    [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=xyz",
        "text/plain",
        "application/xml",
        "",
    ],
)
def test_body_that_is_not_declared_json_is_415(
    route: Route, content_type: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(route.method, route.path, route.with_(), content_type=content_type)

    assert_rejected(response, 415, says="Unsupported media type")
    assert stored() == before


@pytest.mark.parametrize("route", WRITE_ROUTES)
def test_body_over_the_size_limit_is_413(route: Route, send: Send, stored: Callable[[], Stored]) -> None:
    # A valid body padded with whitespace: only its size can get it rejected.
    body = route.with_()
    body += b" " * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1 - len(body))
    before = stored()

    response = send(route.method, route.path, body)

    assert_rejected(response, 413, says="too large")
    assert stored() == before


@pytest.mark.parametrize("charset", ["bz2_codec", "zlib_codec", "rot13"])
def test_json_declared_in_a_non_text_charset_is_4xx(charset: str, send: Send, stored: Callable[[], Stored]) -> None:
    before = stored()

    response = send("POST", CREATE_FLOW.path, CREATE_FLOW.with_(), content_type=f"{JSON}; charset={charset}")

    assert 400 <= response.status_code < 500, f"{response.status_code}: {response.content[:300]!r}"
    assert response["Content-Type"] == JSON
    assert "detail" in response.json()
    assert stored() == before


def test_compressed_body_cannot_get_past_the_size_limit(send: Send, stored: Callable[[], Stored]) -> None:
    # About 100 bytes on the wire, over 1 MiB once decompressed by a "charset".
    body = ADD_STEP.with_(inputs={"blob": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    before = stored()

    response = send("POST", ADD_STEP.path, bz2.compress(body), content_type=f"{JSON}; charset=bz2_codec")

    assert 400 <= response.status_code < 500, f"{response.status_code}: {response.content[:300]!r}"
    assert stored() == before


# --- One bad field per case -------------------------------------------------------------------

FLOW_CASES = [
    pytest.param({"colour": "red"}, "colour", "Unknown field.", id="unknown-field"),
    pytest.param({"flow_state": "completed"}, "flow_state", "Unknown field.", id="read-only-field"),
    pytest.param({"trigger_type": 123}, "trigger_type", "", id="trigger_type-number"),
    pytest.param({"trigger_type": ["question"]}, "trigger_type", "Not a valid string.", id="trigger_type-list"),
    pytest.param({"trigger_type": None}, "trigger_type", "may not be null", id="trigger_type-null"),
    pytest.param({"trigger_type": ""}, "trigger_type", "may not be blank", id="trigger_type-blank"),
    pytest.param({"trigger_type": "has a space"}, "trigger_type", "a label, not a sentence", id="trigger_type-spaces"),
    pytest.param({"agent": "Dr Smith"}, "agent", "a label, not a sentence", id="agent-spaces"),
    pytest.param({"trigger_ref": "q/\x00"}, "trigger_ref", "Null characters are not allowed.", id="trigger_ref-NUL"),
    pytest.param(
        {"trigger_summary": "a\ud800b"}, "trigger_summary", "Surrogate characters", id="trigger_summary-surrogate"
    ),
    pytest.param({"id": "not-a-uuid"}, "id", "Must be a valid UUID.", id="id-not-uuid"),
    pytest.param({"id": 42}, "id", "Must be a valid UUID.", id="id-number"),
    pytest.param({"patient_id": "p-1"}, "patient_id", "Must be a valid UUID.", id="patient_id-not-uuid"),
    pytest.param({"patient_id": UNKNOWN_ID}, "patient_id", "unknown patient", id="patient_id-unknown"),
]


@pytest.mark.parametrize(("overrides", "field", "says"), FLOW_CASES)
def test_create_flow_bad_field_is_400_naming_it(
    overrides: dict[str, Any], field: str, says: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send("POST", CREATE_FLOW.path, CREATE_FLOW.with_(**overrides))

    assert_rejected(response, 400, field=field, says=says)
    assert stored() == before


STEP_CASES = [
    pytest.param({"thoughts": "..."}, "thoughts", "Unknown field.", id="unknown-field"),
    pytest.param({"position": 1}, "position", "Unknown field.", id="read-only-field"),
    pytest.param({"kind": True}, "kind", "Not a valid string.", id="kind-boolean"),
    pytest.param({"kind": "looked it up"}, "kind", "a label, not a sentence", id="kind-spaces"),
    pytest.param({"summary_text": "   "}, "summary_text", "may not be blank", id="summary_text-whitespace"),
    pytest.param({"confidence": "high"}, "confidence", "A valid number is required.", id="confidence-string"),
    pytest.param({"confidence": 1.5}, "confidence", "less than or equal to 1", id="confidence-above-1"),
    pytest.param({"confidence": -0.1}, "confidence", "greater than or equal to 0", id="confidence-negative"),
    pytest.param({"latency_ms": -1}, "latency_ms", "greater than or equal to 0", id="latency_ms-negative"),
    pytest.param({"latency_ms": 1.5}, "latency_ms", "A valid integer is required.", id="latency_ms-float"),
    pytest.param({"latency_ms": 2**31}, "latency_ms", "less than or equal to 2147483647", id="latency_ms-2^31"),
    pytest.param({"latency_ms": "fast"}, "latency_ms", "A valid integer is required.", id="latency_ms-string"),
    pytest.param({"inputs": ["a", "b"]}, "inputs", "Must be a JSON object.", id="inputs-list"),
    pytest.param({"inputs": "query=labs"}, "inputs", "Must be a JSON object.", id="inputs-string"),
    pytest.param({"inputs": 5}, "inputs", "Must be a JSON object.", id="inputs-number"),
    pytest.param({"inputs": None}, "inputs", "may not be null", id="inputs-null"),
    pytest.param({"outputs": [1]}, "outputs", "Must be a JSON object.", id="outputs-list"),
    pytest.param({"pii_fields": "patient_name"}, "pii_fields", 'but got type "str"', id="pii_fields-string"),
    pytest.param({"pii_fields": {"patient_name": True}}, "pii_fields", 'but got type "dict"', id="pii_fields-object"),
    pytest.param(
        {"pii_fields": [f"k{i}" for i in range(101)]}, "pii_fields", "no more than 100 elements", id="pii_fields-101"
    ),
    pytest.param(
        {"extra_parent_ids": ["not-a-uuid"]}, "extra_parent_ids", "Must be a valid UUID.", id="extra_parent_ids-bad"
    ),
    pytest.param({"extra_parent_ids": "abc"}, "extra_parent_ids", "Expected a list", id="extra_parent_ids-string"),
    pytest.param(
        {"extra_parent_ids": [str(uuid.uuid4()) for _ in range(51)]},
        "extra_parent_ids",
        "no more than 50 elements",
        id="extra_parent_ids-51",
    ),
    pytest.param({"parent_step_id": "nope"}, "parent_step_id", "Must be a valid UUID.", id="parent_step_id-bad"),
    pytest.param(
        {"parent_step_id": UNKNOWN_ID},
        "parent_step_id",
        "step of the same flow",
        id="parent_step_id-unknown",
    ),
    pytest.param(
        {"extra_parent_ids": [UNKNOWN_ID]}, "extra_parent_ids", "steps of this flow", id="extra_parent_ids-unknown"
    ),
    pytest.param({"id": "abc"}, "id", "Must be a valid UUID.", id="id-not-uuid"),
    pytest.param({"rationale": "r" * 20_001}, "rationale", "no more than 20000 characters", id="rationale-20001"),
    pytest.param({"summary_text": "a\x00b"}, "summary_text", "Null characters are not allowed.", id="summary-NUL"),
    pytest.param({"rationale": "\x00"}, "rationale", "Null characters are not allowed.", id="rationale-NUL"),
    pytest.param({"pii_fields": ["a\x00"]}, "pii_fields", "Null characters are not allowed.", id="pii_fields-NUL"),
    pytest.param({"inputs": {"q": "a\x00b"}}, "inputs", "Must not contain NUL", id="inputs-value-NUL"),
    pytest.param({"inputs": {"q\x00": 1}}, "inputs", "Must not contain NUL", id="inputs-key-NUL"),
    pytest.param({"outputs": {"hits": [{"t": "\x00"}]}}, "outputs", "Must not contain NUL", id="outputs-nested-NUL"),
    pytest.param({"summary_text": "a\ud800"}, "summary_text", "Surrogate characters", id="summary-surrogate"),
    pytest.param({"inputs": {"q": "a\ud800b"}}, "inputs", "", id="inputs-value-surrogate"),
    pytest.param({"inputs": {"\udc00": 1}}, "inputs", "", id="inputs-key-surrogate"),
    pytest.param({"inputs": nested(21)}, "inputs", "deeper than 20 levels", id="inputs-nested-21"),
    pytest.param({"inputs": nested(25)}, "inputs", "deeper than 20 levels", id="inputs-nested-25"),
    pytest.param(
        {"outputs": {"a": json.loads("[" * 25 + "]" * 25)}}, "outputs", "deeper than 20", id="outputs-lists-25"
    ),
]


# Characters that render invisibly or reorder text on operator and patient pages.
INVISIBLE_OR_REORDERING = [
    pytest.param("\u202e", id="U+202E-right-to-left-override"),
    pytest.param("\u2066", id="U+2066-left-to-right-isolate"),
    pytest.param("\u200b", id="U+200B-zero-width-space"),
    pytest.param("\u200d", id="U+200D-zero-width-joiner"),
    pytest.param("\ufeff", id="U+FEFF-byte-order-mark"),
    pytest.param("\u00ad", id="U+00AD-soft-hyphen"),
    pytest.param("\u2028", id="U+2028-line-separator"),
    pytest.param("\u2029", id="U+2029-paragraph-separator"),
    pytest.param("\ue000", id="U+E000-private-use"),
    pytest.param("\U000e0041", id="U+E0041-tag-character"),
    pytest.param("\U000f0000", id="U+F0000-private-use-plane-15"),
]
SUMMARY_FIELDS = [
    pytest.param(CREATE_FLOW, "trigger_summary", id="trigger_summary"),
    pytest.param(ADD_STEP, "summary_text", id="summary_text"),
    pytest.param(
        Route("close", "PATCH", CLOSE_FLOW.path, {"flow_state": "aborted"}, ()), "outcome_summary", id="outcome_summary"
    ),
]


@pytest.mark.parametrize("char", INVISIBLE_OR_REORDERING)
@pytest.mark.parametrize(("route", "field"), SUMMARY_FIELDS)
def test_summary_with_an_invisible_or_reordering_character_is_400_naming_it(
    route: Route, field: str, char: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(route.method, route.path, route.with_(**{field: f"Checked the{char} dose"}))

    assert_rejected(response, 400, field=field, says="Must be plain text on one line")
    assert stored() == before


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Réévalué la dose · 5 mg → 2,5 mg", id="accents-and-symbols"),
        pytest.param("检查了剂量", id="cjk"),
        pytest.param("Checked the dose 👍", id="emoji"),
        pytest.param("שלום and مرحبا", id="rtl-letters"),
    ],
)
def test_summary_in_any_script_is_accepted(text: str, send: Send) -> None:
    response = send("POST", ADD_STEP.path, ADD_STEP.with_(summary_text=text))

    assert response.status_code == 201, response.content
    assert ReasoningStep.objects.get().summary_text == text


@pytest.mark.parametrize(("overrides", "field", "says"), STEP_CASES)
def test_add_step_bad_field_is_400_naming_it(
    overrides: dict[str, Any], field: str, says: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send("POST", ADD_STEP.path, ADD_STEP.with_(**overrides))

    assert_rejected(response, 400, field=field, says=says)
    assert stored() == before


@pytest.mark.parametrize(
    ("field", "literal", "says"),
    [
        ("confidence", "1e400", "A valid number is required."),
        ("latency_ms", "1e400", "A valid integer is required."),
        ("inputs", '{"x": 1e400}', "Value must be valid JSON."),
    ],
)
def test_number_overflowing_to_infinity_is_400_naming_the_field(
    field: str, literal: str, says: str, send: Send, stored: Callable[[], Stored]
) -> None:
    # json.dumps cannot write 1e400 (it overflows to inf), so splice the literal in.
    body = ADD_STEP.with_(**{field: "@@"}).replace(b'"@@"', literal.encode())
    before = stored()

    response = send("POST", ADD_STEP.path, body)

    assert_rejected(response, 400, field=field, says=says)
    assert stored() == before


CLOSE_CASES = [
    pytest.param({"flow_state": "aborted", "step_count": 3}, "step_count", "Unknown field.", id="unknown-field"),
    pytest.param({"flow_state": "paused"}, "flow_state", '"paused" is not a valid choice.', id="flow_state-paused"),
    pytest.param({"flow_state": "active"}, "flow_state", '"active" is not a valid choice.', id="flow_state-active"),
    pytest.param({"flow_state": 1}, "flow_state", "is not a valid choice.", id="flow_state-number"),
    pytest.param({"flow_state": None}, "flow_state", "may not be null", id="flow_state-null"),
    pytest.param(
        {"flow_state": "completed"}, "outcome_type", "Required when flow_state is 'completed'.", id="no-outcome"
    ),
    pytest.param(
        {"flow_state": "completed", "outcome_type": "answered", "abort_reason": "timeout"},
        "abort_reason",
        "Only allowed when flow_state is 'aborted'.",
        id="completed-with-abort_reason",
    ),
    pytest.param(
        {"flow_state": "completed", "outcome_type": "gave an answer"},
        "outcome_type",
        "a label, not a sentence",
        id="outcome_type-spaces",
    ),
    pytest.param(
        {"flow_state": "aborted", "abort_reason": "a\x00b"}, "abort_reason", "Null characters", id="abort_reason-NUL"
    ),
]


@pytest.mark.parametrize(("body", "field", "says"), CLOSE_CASES)
def test_close_flow_bad_field_is_400_naming_it_and_leaves_the_flow_active(
    body: dict[str, Any], field: str, says: str, send: Send, stored: Callable[[], Stored], flow: dict[str, Any]
) -> None:
    before = stored()

    response = send("PATCH", CLOSE_FLOW.path, json.dumps(body))

    assert_rejected(response, 400, field=field, says=says)
    assert stored() == before
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == ReasoningFlow.State.ACTIVE


# Every text field, one character over its database column (the limit that matters: past it
# the insert fails), so a serializer limit looser than its column shows up here.
TOO_LONG = [
    pytest.param(route, model, name, id=f"{route.name}-{name}-{column_length(model, name) + 1}")
    for route, model, names in [
        (CREATE_FLOW, ReasoningFlow, ["trigger_type", "trigger_ref", "trigger_summary", "trace_id", "session_id"]),
        (CREATE_FLOW, ReasoningFlow, ["agent"]),
        (ADD_STEP, ReasoningStep, ["kind", "agent", "summary_text", "span_id", "llm_call_log_ref"]),
        (ADD_STEP, ReasoningStep, ["experiment_trace_ref", "decision_graph_node_ref", "memory_claim_ref"]),
        (CLOSE_FLOW, ReasoningFlow, ["outcome_type", "outcome_summary", "abort_reason"]),
    ]
    for name in names
]


@pytest.mark.parametrize(("route", "model", "field"), TOO_LONG)
def test_text_longer_than_its_column_is_400_naming_the_field(
    route: Route, model: type[models.Model], field: str, send: Send, stored: Callable[[], Stored]
) -> None:
    length = column_length(model, field)
    before = stored()

    response = send(route.method, route.path, route.with_(**{field: "a" * (length + 1)}))

    assert_rejected(response, 400, field=field, says=f"no more than {length} characters")
    assert stored() == before


# --- The URL: ids in the path, query parameters, unknown paths and methods ---------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/api/reasoning/flows/not-a-uuid/steps", ADD_STEP.with_(), id="add-step"),
        pytest.param("POST", "/api/reasoning/flows/%00/steps", ADD_STEP.with_(), id="add-step-NUL"),
        pytest.param("PATCH", "/api/reasoning/flows/123", CLOSE_FLOW.with_(), id="close-flow"),
        pytest.param("PATCH", "/api/reasoning/flows/{flow_id}0", CLOSE_FLOW.with_(), id="close-flow-id-plus-a-digit"),
        pytest.param("GET", "/admin/v1/reasoning/flows/xyz", b"", id="admin-read"),
    ],
)
def test_path_id_that_is_not_a_uuid_is_400_naming_flow_id(
    method: str, path: str, body: bytes, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(method, path, body)

    assert_rejected(response, 400, field="flow_id", says="must be a valid UUID")
    assert stored() == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", f"/api/reasoning/flows/{UNKNOWN_ID}/steps", ADD_STEP.with_(), id="add-step"),
        pytest.param("PATCH", f"/api/reasoning/flows/{UNKNOWN_ID}", CLOSE_FLOW.with_(), id="close-flow"),
        pytest.param("GET", f"/admin/v1/reasoning/flows/{UNKNOWN_ID}", b"", id="admin-read"),
    ],
)
def test_unknown_flow_id_is_404_and_audits_nothing(
    method: str, path: str, body: bytes, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(method, path, body)

    assert_rejected(response, 404, says="does not exist")
    assert stored() == before


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        pytest.param("flow_state=paused", "flow_state", "must be one of", id="flow_state-paused"),
        pytest.param("flow_state=ACTIVE", "flow_state", "must be one of", id="flow_state-uppercase"),
        pytest.param("flow_state=%00", "flow_state", "must be one of", id="flow_state-NUL"),
        pytest.param("limit=abc", "limit", "must be an integer", id="limit-abc"),
        pytest.param("limit=1.5", "limit", "must be an integer", id="limit-float"),
        pytest.param("limit=", "limit", "must be an integer", id="limit-empty"),
        pytest.param("limit=%EF%BC%95", "limit", "must be an integer", id="limit-fullwidth-digit"),
        pytest.param("limit=0", "limit", "must be between 1 and 200", id="limit-0"),
        pytest.param("limit=-5", "limit", "must be between 1 and 200", id="limit-negative"),
        pytest.param("limit=201", "limit", "must be between 1 and 200", id="limit-201"),
        pytest.param("trace_id=%00", "trace_id", "", id="trace_id-NUL"),
    ],
)
def test_admin_list_bad_query_parameter_is_400_naming_it(
    query: str, field: str, says: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send("GET", f"/admin/v1/reasoning/flows?{query}")

    assert_rejected(response, 400, field=field, says=says)
    assert stored() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/nope"),
        ("POST", "/api/reasoning/flow"),
        ("POST", "/api/reasoning/flows/"),
        ("POST", "/api/reasoning/flows/{flow_id}/steps/"),
        ("GET", "/api/reasoning/flows/{flow_id}/steps/1"),
        ("GET", "/admin/v1/nope"),
        ("GET", "/admin/v1/reasoning/flows/"),
    ],
)
def test_unknown_api_path_is_json_404(method: str, path: str, send: Send, stored: Callable[[], Stored]) -> None:
    before = stored()

    response = send(method, path, CREATE_FLOW.with_())

    assert_rejected(response, 404, says="Not found.")
    assert stored() == before


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/api/reasoning/flows", "POST"),
        ("DELETE", "/api/reasoning/flows/{flow_id}", "PATCH"),
        ("PUT", "/api/reasoning/flows/{flow_id}", "PATCH"),
        ("GET", "/api/reasoning/flows/{flow_id}/steps", "POST"),
        ("POST", "/admin/v1/reasoning/flows", "GET"),
        ("DELETE", "/admin/v1/reasoning/flows/{flow_id}", "GET"),
    ],
)
def test_method_the_route_does_not_serve_is_json_405(
    method: str, path: str, allowed: str, send: Send, stored: Callable[[], Stored]
) -> None:
    before = stored()

    response = send(method, path, CLOSE_FLOW.with_())

    assert_rejected(response, 405, says=f'Method "{method}" not allowed.')
    assert allowed in response["Allow"]
    assert stored() == before
