"""The MCP tools: each one is an HTTP route of the API, called in-process (docs/mcp.md).

One code path: a tool call builds the request the route would receive (the caller's bearer
token, the arguments as the JSON body or the query string) and hands it to the route's own
DRF view, resolved from the URL configuration. Authentication, scopes, flow ownership, the
write rate limit, the serializers' validation, the service and its audit event, the error
shape and the response body are therefore the route's, not copies of them. Only the
transport differs: the view's JSON answer becomes the tool result's text, and a 4xx answer
a tool error carrying that same JSON (``{"field": ["message"]}`` or ``{"detail": ...}``).

Each tool's input schema is the route's own, taken from the OpenAPI document the server
publishes (request body and query parameters, plus the ids in the route's path), so what a
model is told and what the route accepts cannot drift apart.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlencode

from django.core.handlers.wsgi import WSGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import close_old_connections
from django.urls import Resolver404, resolve

logger = logging.getLogger(__name__)

# Keys that may hold raw chain-of-thought: never in a tool result (seed 001 §2.4 rule 5). The
# routes leave it out unless asked (get_flow cannot ask); this strips it whatever a route says.
FORBIDDEN_KEYS = frozenset({"reasoning_content"})


@dataclass(frozen=True)
class ToolSpec:
    name: str
    method: str
    path: str  # the OpenAPI path template, e.g. /api/reasoning/flows/{flow_id}
    description: str
    # The route's path ids the tool takes as arguments, with their descriptions.
    path_args: Mapping[str, str]
    # Query parameters of a GET route the tool does not offer (get_flow: include_reasoning).
    hidden_query: frozenset[str] = frozenset()


FLOW_ID_HELP = "The flow's id (the `id` that open_flow returned)."

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "open_flow",
        "post",
        "/api/reasoning/flows",
        "Start recording one reasoning flow: one rooted tree of steps from a trigger (a user question, a "
        "claim to check, ...) to an outcome. Call it first, keep the returned `id`, then add_step for every "
        "step and close_flow at the end. `trigger_type` is a short label (`user_question`); `trigger_ref` "
        "identifies the case without personal data; `trigger_summary` is one plain-English line that a "
        "patient may read (no names, dates or identifiers). Pass your own UUID as `id` to make retries safe. "
        "Needs the `reasoning.write` scope.",
        {},
    ),
    ToolSpec(
        "add_step",
        "post",
        "/api/reasoning/flows/{flow_id}/steps",
        "Record one step of an open flow: what kind of step it was (`retrieval`, `llm_prompt`, `verdict`, "
        "`tool_call`, `decision`, ...), which agent took it, a `summary_text` of at most 280 characters that "
        "describes the step (not its content, no personal data), and optionally `confidence` (0..1), "
        "`latency_ms`, `inputs`/`outputs` (JSON; list personal keys in `pii_fields` to have them encrypted) "
        "and `parent_step_id` to chain it after an earlier step. Fails with a conflict once the flow is "
        "closed. Needs `reasoning.write`; only the token that opened the flow may add to it.",
        {"flow_id": FLOW_ID_HELP},
    ),
    ToolSpec(
        "close_flow",
        "patch",
        "/api/reasoning/flows/{flow_id}",
        "Finish a flow: `flow_state` `completed` with an `outcome_type` label and a plain-English "
        "`outcome_summary`, or `aborted` with an `abort_reason`. Closing runs the summary guard, snapshots "
        "the decision radar and may turn a high-confidence flow into a reusable pathway. A flow closes once; "
        "a second close is a conflict. Needs `reasoning.write`.",
        {"flow_id": FLOW_ID_HELP},
    ),
    ToolSpec(
        "record_outcome",
        "post",
        "/api/reasoning/flows/{flow_id}/outcome",
        "After a flow is closed, record what actually happened (`outcome`: a label or one short plain line) "
        "and whether the decision was right (`correct`: true, false, or null when not known). Recorded once: "
        "a second call is a conflict. Needs `reasoning.write`.",
        {"flow_id": FLOW_ID_HELP},
    ),
    ToolSpec(
        "match_pathways",
        "get",
        "/admin/v1/reasoning/pathways/match",
        "Before reasoning from scratch, look for proven pathways: decision paths extracted from earlier "
        "high-confidence flows with the same `trigger_type` (and a similar `trigger_ref`). Returns ranked "
        "candidates with a score, why they matched and their decision radar. Read-only; if you reuse one, call "
        "record_pathway_hit with its id. Needs `reasoning.admin`.",
        {},
    ),
    ToolSpec(
        "record_pathway_hit",
        "post",
        "/admin/v1/reasoning/pathways/{pathway_id}/hit",
        "Tell the library that you reused a pathway (its id from match_pathways): adds one to its hit count. "
        "A demoted pathway cannot be reused (conflict). Needs `reasoning.admin`.",
        {"pathway_id": "The pathway's id, from a match_pathways candidate."},
    ),
    ToolSpec(
        "enqueue_research",
        "post",
        "/admin/v1/reasoning/research/deeper-request",
        "When no pathway answers a question well, queue it for deeper research: a `trigger_type`, a "
        "`trigger_ref` and the `question` (no personal data). A research agent picks it up later. Needs "
        "`reasoning.admin`.",
        {},
    ),
    ToolSpec(
        "get_flow",
        "get",
        "/admin/v1/reasoning/flows/{flow_id}",
        "Read a flow as operators see it: its metadata, outcome, token usage and every step with parents and "
        "back-references. Personal values stay encrypted and raw chain-of-thought is never included. Needs "
        "`reasoning.admin`.",
        {"flow_id": FLOW_ID_HELP},
        hidden_query=frozenset({"include_reasoning"}),
    ),
    ToolSpec(
        "backlog_status",
        "get",
        "/admin/v1/reasoning/research/backlog",
        "How the research backlog is doing: requests by status, the oldest pending and dispatched ages, "
        "recent failures and a loop-health verdict (`healthy`, `warn`, `critical`). Needs `reasoning.admin`.",
        {},
    ),
)
BY_NAME = {spec.name: spec for spec in TOOLS}


@dataclass(frozen=True)
class ToolAnswer:
    text: str  # the route's JSON
    is_error: bool


# --- Input schemas from the OpenAPI document -------------------------------------------------


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator()  # type: ignore[no-untyped-call]  # drf-spectacular is untyped
    document: dict[str, Any] = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    # Through JSON: drf-spectacular leaves lazy strings and enums that a JSON Schema must not hold.
    decoded: dict[str, Any] = json.loads(json.dumps(document, cls=DjangoJSONEncoder))
    return decoded


def _json_schema(node: Any, components: Mapping[str, Any], depth: int = 0) -> Any:
    """OpenAPI 3.0 → JSON Schema: ``$ref`` inlined, ``nullable`` as a null type, no ``readOnly``."""
    if depth > 32:
        raise ValueError("schema nesting too deep")
    if isinstance(node, list):
        return [_json_schema(item, components, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        resolved = components[node["$ref"].rsplit("/", 1)[-1]]
        return _json_schema({**resolved, **{k: v for k, v in node.items() if k != "$ref"}}, components, depth + 1)
    out = {key: _json_schema(value, components, depth + 1) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def input_schema(spec: ToolSpec) -> dict[str, Any]:
    document = openapi_document()
    components = document.get("components", {}).get("schemas", {})
    operation = document["paths"][spec.path][spec.method]
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, help_text in spec.path_args.items():
        properties[name] = {"type": "string", "format": "uuid", "description": help_text}
        required.append(name)
    additional = False
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        body = _json_schema(body, components)
        properties.update(body.get("properties", {}))
        required += body.get("required", [])
        additional = body.get("additionalProperties", True) is not False and "properties" not in body
    for parameter in operation.get("parameters", []):
        parameter = _json_schema(parameter, components)
        if parameter.get("in") != "query" or parameter["name"] in spec.hidden_query:
            continue
        offered = dict(parameter.get("schema", {}))
        if parameter.get("description"):
            offered.setdefault("description", parameter["description"])
        properties[parameter["name"]] = offered
        if parameter.get("required"):
            required.append(parameter["name"])
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": additional}
    if required:
        schema["required"] = required
    return schema


# --- Calling a route -------------------------------------------------------------------------


def call_tool(name: str, arguments: Mapping[str, Any], token: str | None, client: str = "127.0.0.1") -> ToolAnswer:
    """Run tool ``name`` as its route, for the caller holding ``token``: a server's entry point,
    which (like a request) drops stale database connections before and after the call."""
    close_old_connections()
    try:
        return run_tool(name, arguments, token, client)
    finally:
        close_old_connections()


def run_tool(name: str, arguments: Mapping[str, Any], token: str | None, client: str = "127.0.0.1") -> ToolAnswer:
    """Run tool ``name`` as its route on the current connection (``load_demo`` calls it inside
    its own transaction; servers call ``call_tool``)."""
    spec = BY_NAME.get(name)
    if spec is None:
        return _refused({"detail": f"Unknown tool {name!r}."})
    arguments = dict(arguments)
    ids: dict[str, str] = {}
    for field in spec.path_args:
        value = arguments.pop(field, None)
        if value is None:
            return _refused({field: ["This field is required."]})
        if not isinstance(value, str):
            return _refused({field: ["must be a valid UUID"]})
        ids[field] = quote(value, safe="")
    path = spec.path.format(**ids)
    query: dict[str, str] = {}
    body: dict[str, Any] | None = None
    if spec.method == "get":
        offered = set(input_schema(spec)["properties"])
        unknown = sorted(set(arguments) - offered)
        if unknown:
            return _refused({field: ["Unknown argument."] for field in unknown})
        for field, value in arguments.items():
            query[field] = json.dumps(value) if isinstance(value, bool) else str(value)
    else:
        body = arguments
    try:
        return _dispatch(spec.method.upper(), path, query, body, token, client)
    except Exception:
        # What the route would answer as a 500 (core.api.server_error): logged, never a crash of the session.
        logger.exception("MCP tool %s failed", name)
        return _refused({"detail": "Internal server error."})


def _dispatch(
    method: str, path: str, query: Mapping[str, str], body: Any, token: str | None, client: str
) -> ToolAnswer:
    payload = b"" if body is None else json.dumps(body, cls=DjangoJSONEncoder).encode()
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": urlencode(query),
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": client,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(payload)),
        "HTTP_ACCEPT": "application/json",
        "wsgi.input": io.BytesIO(payload),
        "wsgi.url_scheme": "http",
        "wsgi.input_terminated": True,
    }
    if token:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    try:
        match = resolve(path)
    except Resolver404:
        return _refused({"detail": "Not found."})
    response = match.func(WSGIRequest(environ), *match.args, **match.kwargs)
    render = getattr(response, "render", None)
    if callable(render):
        render()
    content = json.loads(response.content) if response.content else {}
    return ToolAnswer(_encode(without_reasoning(content)), response.status_code >= 400)


def without_reasoning(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: without_reasoning(item) for key, item in value.items() if key not in FORBIDDEN_KEYS}
    if isinstance(value, list):
        return [without_reasoning(item) for item in value]
    return value


def _encode(value: Any) -> str:
    return json.dumps(value, cls=DjangoJSONEncoder, ensure_ascii=False)


def _refused(body: Mapping[str, Any]) -> ToolAnswer:
    return ToolAnswer(_encode(dict(body)), True)
