"""The OpenAPI document (/api/schema/) and the Swagger UI page (/api/docs/)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.urls import URLPattern
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from reasoning import urls as reasoning_urls
from tests.html import doc
from tests.schema_check import assert_matches_schema

SCHEMA_URL = "/api/schema/?format=json"


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    response = APIClient().get(SCHEMA_URL)
    assert response.status_code == 200, response.content
    document: dict[str, Any] = response.json()
    return document


def openapi_path(pattern: URLPattern) -> str:
    """``api/reasoning/flows/<str:flow_id>`` -> ``/api/reasoning/flows/{flow_id}``."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))


def view_methods(pattern: URLPattern) -> set[str]:
    view_class = pattern.callback.view_class  # type: ignore[attr-defined]
    return {m for m in view_class.http_method_names if m not in ("options", "head") and hasattr(view_class, m)}


def routes() -> list[tuple[str, set[str]]]:
    return [(openapi_path(p), view_methods(p)) for p in reasoning_urls.urlpatterns if isinstance(p, URLPattern)]


def test_schema_is_served_without_a_token(db: None) -> None:
    response = APIClient().get(SCHEMA_URL)

    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == settings.SPECTACULAR_SETTINGS["TITLE"]


@pytest.mark.parametrize(("path", "methods"), routes(), ids=[path for path, _ in routes()])
def test_schema_describes_every_reasoning_route_with_its_methods(
    schema: dict[str, Any], path: str, methods: set[str]
) -> None:
    assert path in schema["paths"], f"{path} missing from the OpenAPI document"
    described = {m for m in schema["paths"][path] if m != "parameters"}
    assert described == methods


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/api/reasoning/flows", "post"),
        ("/api/reasoning/flows/{flow_id}", "patch"),
        ("/api/reasoning/flows/{flow_id}/steps", "post"),
        ("/admin/v1/reasoning/flows", "get"),
        ("/admin/v1/reasoning/flows/{flow_id}", "get"),
    ],
)
def test_schema_describes_the_core_flow_routes(schema: dict[str, Any], path: str, method: str) -> None:
    operation = schema["paths"][path][method]

    assert operation.get("summary")
    assert {"bearerAuth": []} in operation["security"]
    assert "401" in operation["responses"]
    assert "403" in operation["responses"]
    if "{flow_id}" in path:
        parameters = {p["name"]: p for p in operation.get("parameters", [])}
        assert parameters["flow_id"]["in"] == "path"
        assert "404" in operation["responses"]


@pytest.mark.parametrize(
    ("path", "method", "success"),
    [
        ("/api/reasoning/flows", "post", "201"),
        ("/api/reasoning/flows/{flow_id}", "patch", "200"),
        ("/api/reasoning/flows/{flow_id}/steps", "post", "201"),
    ],
)
def test_write_routes_document_their_body_example_and_conflict(
    schema: dict[str, Any], path: str, method: str, success: str
) -> None:
    operation = schema["paths"][path][method]

    assert success in operation["responses"]
    assert "400" in operation["responses"]
    assert "409" in operation["responses"]
    body = operation["requestBody"]["content"]["application/json"]
    assert body["schema"]["$ref"].startswith("#/components/schemas/")
    assert body.get("examples"), "write routes carry a request example"


def test_admin_list_documents_its_query_parameters(schema: dict[str, Any]) -> None:
    parameters = {p["name"]: p for p in schema["paths"]["/admin/v1/reasoning/flows"]["get"]["parameters"]}

    assert {"trace_id", "flow_state", "limit"} <= set(parameters)
    assert set(parameters["flow_state"]["schema"]["enum"]) == {"active", "completed", "aborted"}


def test_schema_declares_the_bearer_security_scheme(schema: dict[str, Any]) -> None:
    scheme = schema["components"]["securitySchemes"]["bearerAuth"]

    assert scheme["type"] == "http"
    assert scheme["scheme"] == "bearer"


def test_docs_page_uses_only_local_static_assets(db: None) -> None:
    response = APIClient().get("/api/docs/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = doc(response)
    assets = [script.attrs["src"] for script in page.select("script") if script.attrs.get("src")]
    assets += [link.attrs["href"] for link in page.select("link") if link.attrs.get("href")]
    assert any(a.endswith(".js") for a in assets), "the Swagger UI bundle is referenced"
    static_prefix = "/" + settings.STATIC_URL.strip("/") + "/"
    # The init script comes from the page's own view (?script), not inline: the CSP forbids inline script.
    assert "/api/docs/?script=" in assets
    assets.remove("/api/docs/?script=")
    for asset in assets:
        assert not re.match(r"^(https?:)?//", asset), f"CDN asset: {asset}"
        assert asset.startswith(static_prefix), asset
        assert finders.find(asset.removeprefix(static_prefix)) is not None, f"{asset} is not an installed file"


def test_schema_generates_without_warnings_and_validates(tmp_path: Path) -> None:
    # What CI of a typed API runs: a warning here means generated clients get odd names
    # or wrong types (e.g. a colliding enum renamed to "FlowState9caEnum").
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"))


# --- The schema says what the server enforces ---------------------------------------------------
#
# A schema-driven client (a generated SDK, a fuzzer) builds values from these constraints, so a
# value that satisfies the published schema must be accepted, and what the server refuses the
# schema must rule out.

PLAIN_TEXT_FIELDS = [
    ("FlowCreateRequest", "trigger_summary"),
    ("StepCreateRequest", "summary_text"),
    ("FlowCloseRequest", "outcome_summary"),
    ("DeeperRequestRequest", "question"),
    ("DeeperRequestRequest", "trigger_ref"),
    ("MarkClaimRequest", "claim_id"),
    ("ResolveClaimRequest", "note"),
]


def string_schema(prop: dict[str, Any]) -> dict[str, Any]:
    """The non-blank branch of a property (drf-spectacular puts ``oneOf: [rule, maxLength 0]`` on blankable ones)."""
    for branch in prop.get("oneOf", []):
        if branch.get("maxLength") != 0:
            return {**prop, **branch}
    return prop


def request_components(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: c for name, c in schema["components"]["schemas"].items() if name.endswith("Request")}


def patterned_fields(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for name, component in request_components(schema).items():
        for field, prop in component.get("properties", {}).items():
            rule = string_schema(prop)
            if "pattern" in rule:
                found.append((name, field, rule))
    return found


@pytest.mark.parametrize(("component", "field"), PLAIN_TEXT_FIELDS)
@pytest.mark.parametrize(
    "char", ["\u202e", "\u200b", "\u2028", "\u2029", "\ufeff", "\u00ad", "\x07", "\x9b", "\ue000", "\U000e0041"]
)
def test_plain_text_pattern_rules_out_invisible_and_reordering_characters(
    schema: dict[str, Any], component: str, field: str, char: str
) -> None:
    rule = string_schema(schema["components"]["schemas"][component]["properties"][field])

    assert re.search(rule["pattern"], "Checked the dose"), "ordinary text must match"
    assert not re.search(rule["pattern"], f"Checked{char}the dose"), f"U+{ord(char):04X} must not match"
    assert "Cf" in rule["description"]


def test_multiline_text_pattern_allows_line_breaks_and_one_line_text_does_not(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    question = string_schema(components["DeeperRequestRequest"]["properties"]["question"])
    summary = string_schema(components["StepCreateRequest"]["properties"]["summary_text"])

    assert re.search(question["pattern"], "Which guideline?\r\n\tAdults over 80")
    assert not re.search(summary["pattern"], "Checked\nthe dose")


def test_every_request_body_refuses_unknown_properties(schema: dict[str, Any]) -> None:
    components = request_components(schema)

    assert {"FlowCreateRequest", "StepCreateRequest", "FlowCloseRequest", "CompleteRequest"} <= set(components)
    assert {name: c.get("additionalProperties") for name, c in components.items()} == dict.fromkeys(components, False)


@pytest.mark.parametrize(
    ("component", "field"),
    [
        ("FlowCloseRequest", "flow_state"),
        ("ResolveClaimRequest", "status"),
        ("StepCreateRequest", "kind"),
        ("FlowCreateRequest", "trigger_type"),
    ],
)
def test_fields_the_server_requires_are_required_in_the_schema(
    schema: dict[str, Any], component: str, field: str
) -> None:
    assert field in schema["components"]["schemas"][component]["required"]


@pytest.mark.parametrize(
    ("component", "field"),
    [
        ("FlowCreateRequest", "trigger_type"),
        ("StepCreateRequest", "kind"),
        ("StepCreateRequest", "agent"),
        ("DeeperRequestRequest", "trigger_type"),
        ("OutcomeMetricsRequest", "verdict"),
    ],
)
def test_required_labels_are_non_empty_and_carry_the_label_pattern(
    schema: dict[str, Any], component: str, field: str
) -> None:
    from core.labels import LABEL_PATTERN

    prop = schema["components"]["schemas"][component]["properties"][field]

    assert prop["minLength"] == 1
    assert prop["pattern"] == LABEL_PATTERN
    assert "[A-Za-z0-9_.:/-]" in prop["description"]


def test_the_complete_error_field_explains_labels(schema: dict[str, Any]) -> None:
    prop = schema["components"]["schemas"]["CompleteRequest"]["properties"]["error"]

    assert "dispatcher_gave_up" in prop["description"]
    assert "[A-Za-z0-9_.:/-]" in prop["description"]


@pytest.mark.parametrize(
    ("path", "maximum", "default"),
    [
        ("/admin/v1/reasoning/flows", 200, 50),
        ("/admin/v1/reasoning/claims-pending-review", 500, 100),
        ("/admin/v1/reasoning/pathways/match", 50, 10),
    ],
)
def test_limit_parameters_publish_their_bounds(schema: dict[str, Any], path: str, maximum: int, default: int) -> None:
    parameters = {p["name"]: p for p in schema["paths"][path]["get"]["parameters"]}

    assert parameters["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": maximum, "default": default}


def test_flow_list_documents_its_filters_cursor_and_next_page_header(schema: dict[str, Any]) -> None:
    operation = schema["paths"]["/admin/v1/reasoning/flows"]["get"]
    parameters = {p["name"]: p for p in operation["parameters"]}

    assert {"agent", "session_id", "trigger_type", "created_after", "created_before", "cursor"} <= set(parameters)
    assert parameters["created_after"]["schema"]["format"] == "date-time"
    assert parameters["created_after"]["examples"]
    assert parameters["agent"]["examples"]
    assert "X-Next-Cursor" in operation["responses"]["200"]["headers"]


def all_api_operations() -> list[tuple[str, str, type[Any]]]:
    from tests.test_api_contract import ROUTES

    return [(openapi_path_of(path), method, view_class) for path, view_class, method in ROUTES]


def openapi_path_of(django_path: str) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", django_path)


@pytest.mark.parametrize(("path", "method", "view_class"), all_api_operations())
def test_documented_query_parameters_are_exactly_the_accepted_ones(
    schema: dict[str, Any], path: str, method: str, view_class: type[Any]
) -> None:
    documented = {p["name"] for p in schema["paths"][path][method].get("parameters", []) if p["in"] == "query"}

    assert documented == view_class.allowed_query_parameters(method)


# --- Values a schema-driven client generates are accepted ---------------------------------------


def _new_flow(agent: APIClient) -> str:
    response = agent.post("/api/reasoning/flows", {"trigger_type": "user_question"}, format="json")
    assert response.status_code == 201, response.content
    flow_id: str = response.json()["id"]
    return flow_id


@dataclass
class _Rejected:
    """An ingest item that was rejected: not a 2xx for the pattern check."""

    answer: Any
    status_code: int = 422

    @property
    def content(self) -> Any:
        return self.answer.content


def _send_field(component: str, field: str, value: str, agent: APIClient, operator: APIClient) -> Any:
    """Send a valid body of ``component`` with ``field`` set to ``value``."""
    body: dict[str, Any]
    if component == "FlowCreateRequest":
        return agent.post("/api/reasoning/flows", {"trigger_type": "user_question", field: value}, format="json")
    if component == "StepCreateRequest":
        body = {"kind": "retrieval", "agent": "researcher", "summary_text": "Looked up", field: value}
        return agent.post(f"/api/reasoning/flows/{_new_flow(agent)}/steps", body, format="json")
    if component in ("FlowCloseRequest", "OutcomeMetricsRequest"):
        # An abort reason belongs to an aborted flow (the oneOf of the close body).
        aborted = field == "abort_reason"
        body = {"flow_state": "aborted"} if aborted else {"flow_state": "completed", "outcome_type": "answered"}
        if component == "OutcomeMetricsRequest":
            body["outcome_metrics"] = {field: value}
        else:
            body[field] = value
        return agent.patch(f"/api/reasoning/flows/{_new_flow(agent)}", body, format="json")
    if component in ("IngestItemRequest", "IngestCloseRequest"):
        item: dict[str, Any] = {"id": str(uuid.uuid4()), "trigger_type": "user_question", field: value}
        if component == "IngestCloseRequest":
            item = {"id": item["id"], "trigger_type": "user_question"}
            close = {"flow_state": "aborted"} if field == "abort_reason" else {"flow_state": "completed"}
            item["close"] = {"outcome_type": "answered", **close, field: value}
        response = agent.post("/api/reasoning/ingest", {"flows": [item]}, format="json")
        # The route answers 200 even when the item is rejected; the item says which.
        return response if response.status_code != 200 or response.json()["rejected"] == 0 else _Rejected(response)
    if component in ("OutcomeRecordRequest", "OutcomeBatchItemRequest"):
        flow_id = _new_flow(agent)
        close = {"flow_state": "completed", "outcome_type": "answered"}
        assert agent.patch(f"/api/reasoning/flows/{flow_id}", close, format="json").status_code == 200
        if component == "OutcomeRecordRequest":
            return agent.post(f"/api/reasoning/flows/{flow_id}/outcome", {field: value, "correct": True}, format="json")
        item = {"flow_id": flow_id, field: value, "correct": True}
        return agent.post("/api/reasoning/outcomes", {"outcomes": [item]}, format="json")
    if component == "DeeperRequestRequest":
        body = {"trigger_type": "user_question", "question": "Why?", field: value}
        return operator.post("/admin/v1/reasoning/research/deeper-request", body, format="json")
    if component == "PullRequest":
        return operator.post("/admin/v1/reasoning/research/backlog/next", {field: value}, format="json")
    if component in ("MarkClaimRequest", "ResolveClaimRequest"):
        mark = {"claim_id": f"claim-{uuid.uuid4()}"}
        if component == "MarkClaimRequest":
            return operator.post("/admin/v1/reasoning/claims-pending-review", {**mark, field: value}, format="json")
        entry = operator.post("/admin/v1/reasoning/claims-pending-review", mark, format="json").json()
        body = {"status": "resolved", field: value}
        return operator.patch(f"/admin/v1/reasoning/claims-pending-review/{entry['id']}", body, format="json")
    if component == "CompleteRequest":
        enqueue = {"trigger_type": "user_question", "question": "Why?"}
        row = operator.post("/admin/v1/reasoning/research/deeper-request", enqueue, format="json").json()
        operator.post("/admin/v1/reasoning/research/backlog/next", {}, format="json")
        return operator.post(
            f"/admin/v1/reasoning/research/backlog/{row['id']}/complete", {field: value}, format="json"
        )
    raise AssertionError(f"no sender for {component}: add one so its patterns are checked")


# Fields the summary guard reads (reasoning.outcomes.services): a pattern-matching value may still be refused.
GUARDED = {("OutcomeRecordRequest", "outcome"), ("OutcomeBatchItemRequest", "outcome")}
_GUARD_RULE = re.compile(r"Refused by the summary guard \(rule: ([a-z0-9_]+)\)")


def _guard_rule(response: Any) -> str | None:
    """The rule named by a summary-guard refusal in ``response``, else None."""
    found = _GUARD_RULE.search(response.content.decode())
    return found.group(1) if found else None


def _published_patterns() -> list[Any]:
    document = APIClient().get(SCHEMA_URL).json()
    return [pytest.param(c, f, rule, id=f"{c}.{f}") for c, f, rule in patterned_fields(document)]


@pytest.mark.django_db
@pytest.mark.parametrize(("component", "field", "rule"), _published_patterns())
def test_values_matching_each_published_pattern_are_accepted(
    component: str, field: str, rule: dict[str, Any], agent: APIClient, operator: APIClient
) -> None:
    min_length, max_length = rule.get("minLength", 0), rule.get("maxLength", 10_000)
    # JSON Schema patterns are ECMA-262: "$" is the very end, where Python's "$" also matches before a
    # final newline; "\Z" is the Python spelling of the ECMA meaning.
    pattern = re.sub(r"\$$", r"\\Z", rule["pattern"])
    values = st.from_regex(pattern).filter(lambda v: min_length <= len(v) <= max_length)

    @hypothesis_settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(value=values)
    def check(value: str) -> None:
        response = _send_field(component, field, value, agent, operator)
        if (component, field) in GUARDED and (rule := _guard_rule(response)) is not None:
            # The published pattern is the guard's plain-text rule; its content rules (an email
            # address, an ICD-10 code, a dose) no pattern can state.
            assert rule != "control_chars", (value, response.content)
            return
        assert response.status_code in (200, 201), (value, response.content)

    check()


# --- Typed responses ----------------------------------------------------------------------

TYPED_PREFIXES = ("/admin/v1/reasoning/pathways/", "/admin/v1/reasoning/research/", "/admin/v1/reasoning/claims")


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "patch", "put", "delete")
    ]


def test_pathway_and_research_success_responses_are_typed_components(schema: dict[str, Any]) -> None:
    untyped = []
    for path, method, operation in _operations(schema):
        if not path.startswith(TYPED_PREFIXES):
            continue
        for code, response in operation["responses"].items():
            if not code.startswith("2"):
                continue
            body = response.get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" not in body:
                untyped.append(f"{method.upper()} {path} {code}")
    assert untyped == []


def test_every_route_has_an_example(schema: dict[str, Any]) -> None:
    missing = []
    for path, method, operation in _operations(schema):
        if not path.startswith(("/api/reasoning/", "/admin/v1/")):
            continue
        bodies = [operation.get("requestBody", {}), *operation["responses"].values()]
        if not any(media.get("examples") for body in bodies for media in body.get("content", {}).values()):
            missing.append(f"{method.upper()} {path}")
    assert missing == []


def test_not_found_and_conflict_responses_say_what_they_mean(schema: dict[str, Any]) -> None:
    for _path, _method, operation in _operations(schema):
        descriptions = {code: response["description"] for code, response in operation["responses"].items()}
        if "404" in descriptions and "409" in descriptions:
            assert descriptions["404"] != descriptions["409"], operation["operationId"]
            assert not descriptions["404"].startswith("Invalid body"), operation["operationId"]


def _documented_response(schema: dict[str, Any], path: str, method: str, code: str) -> dict[str, Any]:
    node: dict[str, Any] = schema["paths"][path][method]["responses"][code]["content"]["application/json"]["schema"]
    return node


def test_research_and_pathway_bodies_are_exactly_what_openapi_documents(
    schema: dict[str, Any], operator: APIClient
) -> None:
    created = operator.post(
        "/admin/v1/reasoning/research/deeper-request",
        {"trigger_type": "user_question", "question": "Which guideline covers this?"},
        format="json",
    )
    pulled = operator.post("/admin/v1/reasoning/research/backlog/next", {}, format="json")
    marked = operator.post("/admin/v1/reasoning/claims-pending-review", {"claim_id": "claim/1"}, format="json")
    bodies = [
        ("/admin/v1/reasoning/research/deeper-request", "post", "201", created),
        ("/admin/v1/reasoning/research/backlog/next", "post", "200", pulled),
        ("/admin/v1/reasoning/claims-pending-review", "post", "201", marked),
        (
            "/admin/v1/reasoning/claims-pending-review",
            "get",
            "200",
            operator.get("/admin/v1/reasoning/claims-pending-review"),
        ),
        ("/admin/v1/reasoning/research/backlog", "get", "200", operator.get("/admin/v1/reasoning/research/backlog")),
        ("/admin/v1/reasoning/pathways/stats", "get", "200", operator.get("/admin/v1/reasoning/pathways/stats")),
        (
            "/admin/v1/reasoning/pathways/match",
            "get",
            "200",
            operator.get("/admin/v1/reasoning/pathways/match?trigger_type=user_question"),
        ),
    ]
    for path, method, code, response in bodies:
        assert response.status_code == int(code), (path, response.content)
        assert_matches_schema(schema, _documented_response(schema, path, method, code), response.json())
    assert pulled.json()["request"]["status"] == "dispatched"
