"""OTLP/HTTP traces → flows and steps: decoding a ``/v1/traces`` body and mapping its spans.

Pure: no database, no request object. The view un-gzips the body, calls :func:`decode_request`
(a body it cannot use at all is an :class:`OtlpBodyError`, answered 400), then
:func:`map_request`; the service writes what comes back. The mapped dicts carry the field
names of the JSON routes and are validated by their serializers (``FlowCreateSerializer``,
``FlowCloseSerializer``, ``StepCreateSerializer``) before anything is written. A value copied
verbatim from a ``reasoning.*`` attribute reaches those serializers unchanged, so a client's
mistake is reported to it (an empty ``reasoning.*`` string counts as absent: SDKs send "" for
unset values); every value this module derives (labels, summaries, ids, counts) is made valid
here, so a mapping never fails validation by its own doing.

Decoding
  * ``application/x-protobuf``: ``ParseFromString``. A body that is not a traces request but
    happens to parse (a metrics request does) is refused when a known field of a request,
    resource-spans, scope-spans or span message arrived with the wrong wire type. Unknown
    field *numbers* are kept and ignored: that is how the protocol adds fields.
  * ``application/json``: the OTLP JSON encoding: lowerCamelCase keys (proto names are
    accepted too), ``traceId``/``spanId``/``parentSpanId`` (and link ids) as hex strings,
    enums as integers (names are accepted too). Unknown fields inside ``resourceSpans`` are
    ignored, as the OTLP spec asks (newer SDKs add fields); a top level with any field but
    ``resourceSpans`` is refused, so JSON that is not OTLP is an error, not an empty export.
  * A ``Content-Type`` parameter such as ``; charset=utf-8`` is ignored; another media type
    is an :class:`UnsupportedContentType` (an ``OtlpBodyError``; the view may answer 415).

Which spans open flows
  A span opens a flow when it has no parent (an empty or all-zero ``parent_span_id``) or
  when ``gen_ai.operation.name`` is ``invoke_agent``: a nested agent opens its own flow.
  Every other span is a step. ``flow`` and ``close`` are filled only for an opening span,
  ``step`` only for the others (the unused dicts are empty).

Flow (``flow``), for an opening span
  trigger_type     reasoning.trigger_type, else gen_ai.operation.name (as a label), else ``otlp_trace``
  trigger_ref      reasoning.trigger_ref, else the span name (≤ 500 chars)
  trigger_summary  reasoning.trigger_summary, when present
  agent            reasoning.agent, else gen_ai.agent.name (as a label), when present
  session_id       reasoning.session_id, else session.id, else gen_ai.conversation.id (≤ 100 chars)
  trace_id         the hex trace id
  patient_id       reasoning.patient_id, when present
  ``id`` is never set: the service derives it.

Close (``close``), for an opening span
  status ERROR  {"flow_state": "aborted", "abort_reason": the status message lowercased, each
                run of characters outside [a-z0-9_.:-] made "_", trimmed to 200, or "span_error"}
  otherwise     {"flow_state": "completed", "outcome_type": reasoning.outcome_type or
                "span_completed"}, plus outcome_summary from reasoning.outcome_summary when present

Step (``step``), for every other span
  kind              reasoning.kind, else :data:`KIND_BY_OPERATION` (below)
  agent             reasoning.agent, else gen_ai.agent.name, else the resource's service.name
                    (both as labels), else ``otlp``
  summary_text      reasoning.summary_text, else generated from identifiers only (model, tool
                    and span names), never from message content: :data:`GENERATED_SUMMARIES`;
                    one line of plain text, ≤ 280 chars
  span_id           the hex span id
  started_at        the span start, ISO 8601
  latency_ms        reasoning.latency_ms, else the span's duration in whole ms (omitted past
                    the serializer's 2,147,483,647)
  confidence, rationale, llm_call_log_ref, experiment_trace_ref, decision_graph_node_ref,
  memory_claim_ref  reasoning.<same name>
  model             gen_ai.response.model, else gen_ai.request.model (≤ 200 chars)
  input_tokens      gen_ai.usage.input_tokens, else gen_ai.usage.prompt_tokens
  output_tokens     gen_ai.usage.output_tokens, else gen_ai.usage.completion_tokens
  reasoning_tokens  gen_ai.usage.reasoning.output_tokens, gen_ai.usage.reasoning_tokens or
                    gen_ai.usage.output_tokens_details.reasoning_tokens (first present)
  reasoning_content the ``content`` of every part of ``type`` "reasoning" in gen_ai.output.messages
                    (a JSON string, or an OTLP array of kvlists), joined by a blank line
  inputs, outputs, pii_fields   see below
  ``parent_step_id`` is never set: the service resolves parents from ``parent_span_id``.
  Token counts and the model are taken only when they are valid (an int in 0..2,147,483,647,
  a non-blank string); the attributes stay in ``inputs`` either way.

Step kinds (:data:`KIND_BY_OPERATION`), when there is no reasoning.kind
  gen_ai.operation.name chat, text_completion, generate_content   llm_prompt
  gen_ai.operation.name execute_tool                              tool_call
  gen_ai.operation.name embeddings                                embedding
  gen_ai.operation.name retrieval                                 retrieval
  gen_ai.operation.name create_agent                              agent_setup
  no operation above, and db.system, db.system.name or
  gen_ai.data_source.id present                                   retrieval
  anything else                                                   span
  (invoke_agent spans open flows: they are never steps.)

Generated summaries (:data:`GENERATED_SUMMARIES`), by that kind
  llm_prompt "Model call to <model>" / "Model call"; tool_call "Called tool <gen_ai.tool.name>" /
  "Called a tool"; embedding "Embeddings from <model>" / "Computed embeddings"; retrieval
  "Retrieved context"; agent_setup "Set up agent <gen_ai.agent.name>" / "Set up an agent";
  span "Span <span name>" / "Span". The names are cleaned to one line of plain text and the
  summary is cut to 280 chars (ending "…").

Message content (may hold PHI)
  Inputs: gen_ai.input.messages, gen_ai.system_instructions, gen_ai.tool.call.arguments,
  gen_ai.retrieval.query.text, input.value, traceloop.entity.input, db.query.text,
  db.statement, and the families gen_ai.prompt*, llm.input_messages*. Outputs:
  gen_ai.output.messages, gen_ai.tool.call.result, gen_ai.retrieval.documents,
  gen_ai.evaluation.explanation, output.value, traceloop.entity.output, and the families
  gen_ai.completion*, llm.output_messages* (:data:`CONTENT_ATTRIBUTES`, :data:`CONTENT_FAMILIES`).
  * ``message_content="encrypt"``: each goes into ``inputs`` or ``outputs`` (by direction)
    under its attribute name, and the key is listed in ``pii_fields``, whose values the
    service stores only encrypted. A family goes under the family's name as an object
    ``{attribute: value}`` (so a long conversation adds one pii field, not hundreds).
    Span events that carry content (every ``gen_ai.*`` event, whole; from other events only
    their content attributes) go into ``inputs``/``outputs`` under :data:`EVENTS_KEY` as a list
    of ``{"name": event name, "attributes": {...}}``, also listed in ``pii_fields``.
    gen_ai.output.messages is stored without its reasoning parts (those are reasoning_content).
  * ``message_content="drop"``: none of it is kept, reasoning_content included.
  Content never reaches any other field.

Other attributes
  Every other span attribute (the ``reasoning.*`` attributes the mapping did not use
  included) goes into ``inputs`` under its name, at most :data:`MAX_KEPT_ATTRIBUTES` per span
  (the first ones). OTLP values become JSON: string, bool, int, double as scalars (NaN and
  infinities as the strings "NaN", "Infinity", "-Infinity"), bytes as base64, arrays as
  lists, kvlists as objects. NUL and lone surrogates in strings and keys become U+FFFD
  (Postgres cannot store them). Arrays and kvlists nested deeper than
  :data:`MAX_VALUE_DEPTH` levels are kept as their JSON text. An attribute named
  :data:`EVENTS_KEY` is dropped (the key holds event content). Span events other than content
  events, links, the span kind, trace state, a step's status and dropped counts are not mapped.

Span problems (the span is skipped and reported; the rest of the request is mapped)
  * trace_id not 16 bytes or all zero; span_id not 8 bytes or all zero; parent_span_id
    neither empty nor 8 bytes;
  * start_time_unix_nano 0, or the span ending before it starts;
  * more than :data:`MAX_ATTRIBUTES` attributes;
  * a ``reasoning.*`` attribute the mapping uses, of the wrong type (strings must be strings;
    confidence and latency_ms numbers);
  * the same (trace_id, span_id) more than once with a different mapping: every copy is a
    problem. Copies that map identically are kept once.
  A problem's message names the span (its hex id, or its position when the id is unusable)
  and attribute keys, never an attribute's value.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format, unknown_fields
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from core.serializers import FORBIDDEN_TEXT_CATEGORIES

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)

MESSAGE_CONTENT_MODES = ("encrypt", "drop")

# gen_ai.operation.name → step kind. A span without a mapped operation that has db.system,
# db.system.name or gen_ai.data_source.id is a retrieval; any other span is a "span".
KIND_BY_OPERATION: dict[str, str] = {
    "chat": "llm_prompt",
    "text_completion": "llm_prompt",
    "generate_content": "llm_prompt",
    "execute_tool": "tool_call",
    "embeddings": "embedding",
    "retrieval": "retrieval",
    "create_agent": "agent_setup",
}
RETRIEVAL_MARKERS = ("db.system", "db.system.name", "gen_ai.data_source.id")
DEFAULT_KIND = "span"
OPENS_FLOW_OPERATION = "invoke_agent"

# Generated summaries by derived kind: (with the identifier, without it). The identifier is
# the model (llm_prompt, embedding), gen_ai.tool.name (tool_call), gen_ai.agent.name
# (agent_setup) or the span name (span).
GENERATED_SUMMARIES: dict[str, tuple[str, str]] = {
    "llm_prompt": ("Model call to {}", "Model call"),
    "tool_call": ("Called tool {}", "Called a tool"),
    "embedding": ("Embeddings from {}", "Computed embeddings"),
    "retrieval": ("Retrieved context", "Retrieved context"),
    "agent_setup": ("Set up agent {}", "Set up an agent"),
    "span": ("Span {}", "Span"),
}

# Message content (may hold PHI) → whether it is an output: the GenAI conventions' messages,
# instructions and tool calls, their retrieval and evaluation texts, then the names other
# instrumentations (OpenInference, Traceloop) and database spans use for such content.
CONTENT_ATTRIBUTES: dict[str, bool] = {
    "gen_ai.input.messages": False,
    "gen_ai.system_instructions": False,
    "gen_ai.tool.call.arguments": False,
    "gen_ai.output.messages": True,
    "gen_ai.tool.call.result": True,
    "gen_ai.retrieval.query.text": False,
    "gen_ai.retrieval.documents": True,
    "gen_ai.evaluation.explanation": True,
    "input.value": False,
    "output.value": True,
    "traceloop.entity.input": False,
    "traceloop.entity.output": True,
    "db.query.text": False,
    "db.statement": False,
}
# Attribute families: every attribute whose name starts with the family name.
CONTENT_FAMILIES: dict[str, bool] = {
    "gen_ai.prompt": False,
    "gen_ai.completion": True,
    "llm.input_messages": False,
    "llm.output_messages": True,
}
# Span events whose names start with the prefix carry message content whole (gen_ai.content.prompt,
# gen_ai.choice, …); an attribute of theirs that is not itself a content attribute is an input,
# unless the event is one of OUTPUT_EVENTS.
CONTENT_EVENT_PREFIX = "gen_ai."
OUTPUT_EVENTS = ("gen_ai.content.completion", "gen_ai.choice", "gen_ai.completion")
EVENTS_KEY = "otlp.events"
OUTPUT_MESSAGES = "gen_ai.output.messages"

MAX_ATTRIBUTES = 1000
MAX_KEPT_ATTRIBUTES = 128
MAX_VALUE_DEPTH = 5

# Serializer limits the derived values respect.
MAX_SUMMARY = 280
MAX_TRIGGER_REF = 500
MAX_LABEL = 100
MAX_SESSION_ID = 100
MAX_ABORT_REASON = 200
MAX_MODEL = 200
MAX_REASONING_CONTENT = 200_000
MAX_INT = 2_147_483_647

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.:/-]+")
_NOT_LABEL_START = re.compile(r"^[^A-Za-z0-9]+")
_NOT_ABORT_REASON = re.compile(r"[^a-z0-9_.:-]+")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_PARSE_ERROR_FIELD = re.compile(r"Failed to parse (\w+) field: ")
_JSON_TOP_LEVEL = frozenset({"resourceSpans", "resource_spans"})
_JSON_ID_FIELDS = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")

# reasoning.* attributes and the OTLP value types each may have.
_STRING: tuple[str, ...] = ("string_value",)
_NUMBER: tuple[str, ...] = ("double_value", "int_value")
_FLOW_ATTRIBUTES = {
    name: _STRING
    for name in (
        "trigger_type",
        "trigger_ref",
        "trigger_summary",
        "agent",
        "session_id",
        "patient_id",
        "outcome_type",
        "outcome_summary",
    )
}
_STEP_REFS = ("llm_call_log_ref", "experiment_trace_ref", "decision_graph_node_ref", "memory_claim_ref")
_STEP_ATTRIBUTES = {
    **{name: _STRING for name in ("kind", "agent", "summary_text", "rationale", *_STEP_REFS)},
    "confidence": _NUMBER,
    "latency_ms": _NUMBER,
}


class OtlpBodyError(ValueError):
    """The whole body is unusable; the message names the problem, for the client that sent it."""


class UnsupportedContentType(OtlpBodyError):
    """The media type is neither OTLP protobuf nor OTLP JSON."""


@dataclass(frozen=True)
class MappedSpan:
    trace_id: str  # 32 lowercase hex chars
    span_id: str  # 16 lowercase hex chars
    parent_span_id: str  # 16 hex chars, or "" when the span has no parent
    name: str  # NUL and lone surrogates made U+FFFD
    start: datetime  # aware UTC
    end: datetime  # aware UTC
    opens_flow: bool
    flow: dict[str, Any]  # FlowCreateSerializer fields; {} unless opens_flow
    close: dict[str, Any]  # FlowCloseSerializer fields; {} unless opens_flow
    step: dict[str, Any]  # StepCreateSerializer fields; {} when opens_flow


@dataclass(frozen=True)
class SpanProblem:
    trace_id: str  # hex, or "" when not 16 bytes
    span_id: str  # hex, or "" when not 8 bytes
    message: str


# --- Decoding ---------------------------------------------------------------------------


def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """The request in ``body``, OTLP protobuf or OTLP JSON by ``content_type``; gzip is the view's."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == PROTOBUF:
        return _decode_protobuf(body)
    if media_type == JSON:
        return _decode_json(body)
    raise UnsupportedContentType(f"unsupported content type {media_type!r}: send {PROTOBUF} or {JSON}")


def _decode_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise OtlpBodyError(f"not an OTLP traces protobuf: {exc}") from None
    _check_wire_types(request)
    for resource_spans in request.resource_spans:
        _check_wire_types(resource_spans)
        for scope_spans in resource_spans.scope_spans:
            _check_wire_types(scope_spans)
            for span in scope_spans.spans:
                _check_wire_types(span)
    return request


def _check_wire_types(message: ExportTraceServiceRequest | ResourceSpans | ScopeSpans | Span) -> None:
    """Refuse a known field number in the unknown fields: it came with another wire type.

    Another OTLP message parses as a traces request when the wire types happen to line up
    (a metric's ``sum`` lands on the span's ``start_time_unix_nano`` number as bytes, which
    protobuf keeps as an unknown field); a real traces request never does that.
    """
    known = message.DESCRIPTOR.fields_by_number
    for field in unknown_fields.UnknownFieldSet(message):
        if field.field_number in known:
            raise OtlpBodyError(
                f"not an OTLP traces request: field {field.field_number} of {message.DESCRIPTOR.name} has the wrong "
                "wire type (is this a logs or metrics request?)"
            )


def _decode_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise OtlpBodyError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise OtlpBodyError("not valid JSON: nested too deeply") from None
    if not isinstance(document, dict):
        raise OtlpBodyError(f"OTLP JSON must be an object, got {type(document).__name__}")
    # The spec asks receivers to ignore unknown fields (newer SDKs add some), but a top
    # level with anything besides resourceSpans is not a traces export at all.
    strangers = sorted(set(document) - _JSON_TOP_LEVEL)
    if strangers:
        raise OtlpBodyError(
            f"not an OTLP traces request: the top level has no field named {strangers[0]!r} (expected resourceSpans)"
        )
    _check_objects(document, ExportTraceServiceRequest.DESCRIPTOR, "")
    _hex_ids_to_base64(document)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise OtlpBodyError(f"not an OTLP traces request: {_parse_error_detail(exc)}") from None
    except RecursionError:
        raise OtlpBodyError("not an OTLP traces request: nested too deeply") from None
    return request


def _check_objects(document: dict[str, Any], descriptor: Descriptor, path: str) -> None:
    """Every value where the protocol has a message is a JSON object (or null).

    protobuf's JSON parser reads a string there as an empty message: it iterates the string's
    characters as field names, and ignoring unknown fields skips every one (the fuzzer found
    `{"resourceSpans": ["x"]}` acknowledged as an empty export).
    """
    for key, value in document.items():
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None or field.message_type is None or value is None:
            continue
        if field.is_repeated and not isinstance(value, list):
            continue  # the parser's own message says a list belongs here
        name = f"{path}.{field.camelcase_name}" if path else field.camelcase_name
        for index, item in enumerate(value) if field.is_repeated else [(None, value)]:
            where = name if index is None else f"{name}[{index}]"
            if not isinstance(item, dict):
                raise OtlpBodyError(f"not an OTLP traces request: {where} must be an object")
            _check_objects(item, field.message_type, where)


def _parse_error_detail(exc: Exception) -> str:
    """The parser's message as ``field.path: reason``.

    It nests "Failed to parse <field> field: " once per level and lists the available fields
    on later lines.
    """
    detail = str(exc).split("\n", 1)[0]
    fields = _PARSE_ERROR_FIELD.findall(detail)
    if fields:
        detail = f"{'.'.join(fields)}: {_PARSE_ERROR_FIELD.sub('', detail)}"
    return detail[:500]


def _hex_ids_to_base64(document: dict[str, Any]) -> None:
    """Rewrite the hex ids of OTLP JSON as the base64 protobuf's JSON parser reads for bytes."""
    for r, resource_spans in _json_items(document, "resourceSpans", "resource_spans"):
        for s, scope_spans in _json_items(resource_spans, "scopeSpans", "scope_spans"):
            for p, span in _json_items(scope_spans, "spans"):
                path = f"resourceSpans[{r}].scopeSpans[{s}].spans[{p}]"
                _convert_json_ids(span, path)
                for n, link in _json_items(span, "links"):
                    _convert_json_ids(link, f"{path}.links[{n}]")


def _json_items(parent: dict[str, Any], *keys: str) -> list[tuple[int, dict[str, Any]]]:
    """The objects in the list under the first of ``keys`` present; a wrong shape is the parser's to report."""
    for key in keys:
        if isinstance(items := parent.get(key), list):
            return [(index, item) for index, item in enumerate(items) if isinstance(item, dict)]
    return []


def _convert_json_ids(document: dict[str, Any], path: str) -> None:
    for key in _JSON_ID_FIELDS:
        value = document.get(key)
        if isinstance(value, str):
            try:
                raw = binascii.a2b_hex(value)
            except (binascii.Error, ValueError):
                raise OtlpBodyError(f"{path}.{key}: not a hex string (OTLP JSON ids are hex, not base64)") from None
            document[key] = base64.b64encode(raw).decode("ascii")


# --- Mapping ----------------------------------------------------------------------------


class _Problem(Exception):
    """A problem with one span: it is skipped and reported."""


def map_request(
    request: ExportTraceServiceRequest, *, message_content: str = "encrypt"
) -> tuple[list[MappedSpan], list[SpanProblem]]:
    """Every span of every resource and scope: mapped, or reported as a problem (in request order)."""
    if message_content not in MESSAGE_CONTENT_MODES:
        raise ValueError(f"message_content must be one of {MESSAGE_CONTENT_MODES}, not {message_content!r}")
    outcomes: list[tuple[tuple[str, str] | None, MappedSpan | SpanProblem]] = []
    for r, resource_spans in enumerate(request.resource_spans):
        service_name = _service_name(resource_spans)
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for p, span in enumerate(scope_spans.spans):
                position = f"resource_spans[{r}].scope_spans[{s}].spans[{p}]"
                outcomes.append(_map_span(span, service_name, position, keep_content=message_content == "encrypt"))
    return _without_duplicates(outcomes)


def _service_name(resource_spans: ResourceSpans) -> str:
    for attribute in resource_spans.resource.attributes:
        if attribute.key == "service.name" and attribute.value.WhichOneof("value") == "string_value":
            return str(attribute.value.string_value)
    return ""


def _without_duplicates(
    outcomes: list[tuple[tuple[str, str] | None, MappedSpan | SpanProblem]],
) -> tuple[list[MappedSpan], list[SpanProblem]]:
    """Keep one of identical copies of a (trace_id, span_id); report every copy when they differ."""
    copies: dict[tuple[str, str], list[int]] = {}
    for index, (key, _) in enumerate(outcomes):
        if key is not None:
            copies.setdefault(key, []).append(index)
    skipped: set[int] = set()
    conflicting: set[int] = set()
    for indexes in copies.values():
        first = outcomes[indexes[0]][1]
        if all(outcomes[index][1] == first for index in indexes[1:]):
            skipped.update(indexes[1:])
        else:
            conflicting.update(indexes)
    mapped: list[MappedSpan] = []
    problems: list[SpanProblem] = []
    for index, (key, outcome) in enumerate(outcomes):
        if index in skipped:
            continue
        if index in conflicting:
            assert key is not None
            count = len(copies[key])
            problems.append(
                SpanProblem(
                    key[0],
                    key[1],
                    f"span {key[1]}: {count} spans in this request have this trace_id and span_id, with different "
                    "content",
                )
            )
        elif isinstance(outcome, MappedSpan):
            mapped.append(outcome)
        else:
            problems.append(outcome)
    return mapped, problems


def _map_span(
    span: Span, service_name: str, position: str, *, keep_content: bool
) -> tuple[tuple[str, str] | None, MappedSpan | SpanProblem]:
    trace_id = span.trace_id.hex() if len(span.trace_id) == 16 else ""
    span_id = span.span_id.hex() if len(span.span_id) == 8 else ""
    # Only spans with usable ids can be duplicates of each other.
    key = (trace_id, span_id) if trace_id and span_id and any(span.trace_id) and any(span.span_id) else None
    label = span_id if span_id and any(span.span_id) else position
    try:
        return key, _mapped(span, trace_id, span_id, service_name, keep_content=keep_content)
    except _Problem as problem:
        return key, SpanProblem(trace_id, span_id, f"span {label}: {problem}")


def _mapped(span: Span, trace_id: str, span_id: str, service_name: str, *, keep_content: bool) -> MappedSpan:
    _check_ids(span)
    parent_span_id = span.parent_span_id.hex() if any(span.parent_span_id) else ""
    if span.start_time_unix_nano == 0:
        raise _Problem("start_time_unix_nano must be set, got 0")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise _Problem("end_time_unix_nano is before start_time_unix_nano")
    if len(span.attributes) > MAX_ATTRIBUTES:
        raise _Problem(f"has {len(span.attributes)} attributes; at most {MAX_ATTRIBUTES}")
    attributes = {attribute.key: attribute.value for attribute in span.attributes}
    operation = _string(attributes, "gen_ai.operation.name")
    opens_flow = not parent_span_id or operation == OPENS_FLOW_OPERATION
    flow: dict[str, Any] = {}
    close: dict[str, Any] = {}
    step: dict[str, Any] = {}
    if opens_flow:
        flow, close = _flow(span, attributes, trace_id, operation)
    else:
        step = _step(span, attributes, span_id, service_name, operation, keep_content=keep_content)
    return MappedSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=_storable(span.name),
        start=_time(span.start_time_unix_nano),
        end=_time(span.end_time_unix_nano),
        opens_flow=opens_flow,
        flow=flow,
        close=close,
        step=step,
    )


def _check_ids(span: Span) -> None:
    if len(span.trace_id) != 16:
        raise _Problem(f"trace_id must be 16 bytes, got {len(span.trace_id)}")
    if not any(span.trace_id):
        raise _Problem("trace_id must not be all zeros")
    if len(span.span_id) != 8:
        raise _Problem(f"span_id must be 8 bytes, got {len(span.span_id)}")
    if not any(span.span_id):
        raise _Problem("span_id must not be all zeros")
    if span.parent_span_id and len(span.parent_span_id) != 8:
        raise _Problem(f"parent_span_id must be empty or 8 bytes, got {len(span.parent_span_id)}")


def _flow(
    span: Span, attributes: dict[str, AnyValue], trace_id: str, operation: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    own = _reasoning_attributes(attributes, _FLOW_ATTRIBUTES)
    flow: dict[str, Any] = {
        "trigger_type": own.get("trigger_type") or _label(operation or "", MAX_LABEL) or "otlp_trace",
        "trigger_ref": own["trigger_ref"] if "trigger_ref" in own else _storable(span.name)[:MAX_TRIGGER_REF],
        "trace_id": trace_id,
    }
    if "trigger_summary" in own:
        flow["trigger_summary"] = own["trigger_summary"]
    agent = own["agent"] if "agent" in own else _label(_string(attributes, "gen_ai.agent.name") or "", MAX_LABEL)
    if agent:
        flow["agent"] = agent
    session_id = own.get("session_id")
    if session_id is None:
        session_id = _session_id(attributes)
    if session_id is not None:
        flow["session_id"] = session_id
    if "patient_id" in own:
        flow["patient_id"] = own["patient_id"]

    close: dict[str, Any]
    if span.status.code == Status.STATUS_CODE_ERROR:
        close = {"flow_state": "aborted", "abort_reason": _abort_reason(span.status.message)}
    else:
        close = {"flow_state": "completed", "outcome_type": own.get("outcome_type") or "span_completed"}
        if "outcome_summary" in own:
            close["outcome_summary"] = own["outcome_summary"]
    return flow, close


def _session_id(attributes: dict[str, AnyValue]) -> str | None:
    """session.id, else gen_ai.conversation.id; an id too long for the field is left out (it stays an input)."""
    for name in ("session.id", "gen_ai.conversation.id"):
        value = _string(attributes, name)
        if value is not None:
            value = _storable(value).strip()
            return value if value and len(value) <= MAX_SESSION_ID else None
    return None


def _step(
    span: Span,
    attributes: dict[str, AnyValue],
    span_id: str,
    service_name: str,
    operation: str | None,
    *,
    keep_content: bool,
) -> dict[str, Any]:
    own = _reasoning_attributes(attributes, _STEP_ATTRIBUTES)
    derived_kind = _derived_kind(attributes, operation)
    model = _model(attributes)
    agent = own.get("agent")
    if agent is None:
        agent = (
            _label(_string(attributes, "gen_ai.agent.name") or "", MAX_LABEL)
            or _label(service_name, MAX_LABEL)
            or "otlp"
        )
    start = _time(span.start_time_unix_nano)
    step: dict[str, Any] = {
        "kind": own.get("kind", derived_kind),
        "agent": agent,
        "summary_text": own.get("summary_text") or _generated_summary(derived_kind, span, attributes, model),
        "span_id": span_id,
        "started_at": start.isoformat(),
    }
    if "latency_ms" in own:
        step["latency_ms"] = own["latency_ms"]
    elif (duration_ms := (span.end_time_unix_nano - span.start_time_unix_nano) // 1_000_000) <= MAX_INT:
        step["latency_ms"] = duration_ms
    if model:
        step["model"] = model
    for field, names in (
        ("input_tokens", ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")),
        ("output_tokens", ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")),
        (
            "reasoning_tokens",
            (
                "gen_ai.usage.reasoning.output_tokens",
                "gen_ai.usage.reasoning_tokens",
                "gen_ai.usage.output_tokens_details.reasoning_tokens",
            ),
        ),
    ):
        count = _token_count(attributes, names)
        if count is not None:
            step[field] = count
    for name in ("confidence", "rationale", *_STEP_REFS):
        if name in own:
            step[name] = own[name]

    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    pii: list[str] = []
    reasoning: list[str] = []
    remaining = 0
    for name, value in attributes.items():
        if name.startswith("reasoning.") and name.removeprefix("reasoning.") in _STEP_ATTRIBUTES:
            continue
        if name == EVENTS_KEY:  # reserved for the events' content
            continue
        if _content_direction(name) is not None:
            if keep_content:
                _place_content(name, _json_value(value), inputs, outputs, reasoning, pii=pii)
            continue
        if remaining < MAX_KEPT_ATTRIBUTES:
            inputs[_storable(name)] = _json_value(value)
            remaining += 1
    if keep_content:
        _place_events(span, inputs, outputs, reasoning, pii)
        if reasoning:
            step["reasoning_content"] = _storable("\n\n".join(reasoning))[:MAX_REASONING_CONTENT]
    if inputs:
        step["inputs"] = inputs
    if outputs:
        step["outputs"] = outputs
    if pii:
        step["pii_fields"] = pii
    return step


def _reasoning_attributes(attributes: dict[str, AnyValue], wanted: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """The ``reasoning.<name>`` attributes present among ``wanted``, unchanged; a wrong type is a problem.

    An empty string counts as absent (SDKs send "" for unset), so the mapping's default applies.
    """
    found: dict[str, Any] = {}
    for name, types in wanted.items():
        value = attributes.get(f"reasoning.{name}")
        if value is None:
            continue
        which = value.WhichOneof("value")
        if which == "string_value" and not value.string_value:
            continue
        if which not in types:
            expected = "a string" if types == _STRING else "a number"
            raise _Problem(f"attribute reasoning.{name} must be {expected}, got {_type_name(which)}")
        found[name] = getattr(value, which)
    return found


def _type_name(which: str | None) -> str:
    return which.removesuffix("_value") if which else "an empty value"


def _string(attributes: dict[str, AnyValue], name: str) -> str | None:
    """A non-``reasoning.*`` string attribute; another type counts as absent (it stays an input)."""
    value = attributes.get(name)
    if value is None or value.WhichOneof("value") != "string_value":
        return None
    return value.string_value


def _derived_kind(attributes: dict[str, AnyValue], operation: str | None) -> str:
    if operation in KIND_BY_OPERATION:
        return KIND_BY_OPERATION[operation]
    if any(name in attributes for name in RETRIEVAL_MARKERS):
        return "retrieval"
    return DEFAULT_KIND


def _model(attributes: dict[str, AnyValue]) -> str:
    for name in ("gen_ai.response.model", "gen_ai.request.model"):
        model = _plain_line((_string(attributes, name) or "")[: 4 * MAX_MODEL])[:MAX_MODEL].strip()
        if model:
            return model
    return ""


def _token_count(attributes: dict[str, AnyValue], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = attributes.get(name)
        if value is not None:
            if value.WhichOneof("value") == "int_value" and 0 <= value.int_value <= MAX_INT:
                return value.int_value
            return None
    return None


def _generated_summary(kind: str, span: Span, attributes: dict[str, AnyValue], model: str) -> str:
    """From identifiers only (model, tool, agent and span names): never from message content."""
    identifier = {
        "llm_prompt": model,
        "embedding": model,
        "tool_call": _string(attributes, "gen_ai.tool.name") or "",
        "agent_setup": _string(attributes, "gen_ai.agent.name") or "",
        "span": span.name,
    }.get(kind, "")
    with_identifier, without = GENERATED_SUMMARIES[kind]
    identifier = _plain_line(identifier[: 4 * MAX_SUMMARY])
    summary = with_identifier.format(identifier) if identifier else without
    if len(summary) > MAX_SUMMARY:
        summary = summary[: MAX_SUMMARY - 1].rstrip() + "…"
    return summary


# --- Message content --------------------------------------------------------------------


def _content_direction(name: str) -> bool | None:
    """True for output content, False for input content, None for an attribute that is not content."""
    if name in CONTENT_ATTRIBUTES:
        return CONTENT_ATTRIBUTES[name]
    for family, is_output in CONTENT_FAMILIES.items():
        if name.startswith(family):
            return is_output
    return None


def _place_content(
    name: str,
    value: Any,
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    reasoning: list[str],
    *,
    pii: list[str] | None = None,
    default_output: bool = False,
) -> None:
    """Put one content attribute where it belongs.

    ``pii`` (given for span attributes, not for an event's) collects the top-level keys used,
    and a family member goes under the family's key.
    """
    direction = _content_direction(name)
    target = outputs if (default_output if direction is None else direction) else inputs
    if name == OUTPUT_MESSAGES:
        value = _without_reasoning(value, reasoning)
    family = next((family for family in CONTENT_FAMILIES if name.startswith(family)), None)
    if pii is None:
        target[_storable(name)] = value
        return
    key = _storable(family or name)
    if family is not None:
        target.setdefault(key, {})[_storable(name)] = value
    else:
        target[key] = value
    if key not in pii:
        pii.append(key)


def _place_events(
    span: Span, inputs: dict[str, Any], outputs: dict[str, Any], reasoning: list[str], pii: list[str]
) -> None:
    """Content-carrying span events → ``inputs``/``outputs`` under :data:`EVENTS_KEY`."""
    for event in span.events:
        whole = event.name.startswith(CONTENT_EVENT_PREFIX)
        default_output = event.name.startswith(OUTPUT_EVENTS)
        event_inputs: dict[str, Any] = {}
        event_outputs: dict[str, Any] = {}
        for attribute in event.attributes:
            if whole or _content_direction(attribute.key) is not None:
                _place_content(
                    attribute.key,
                    _json_value(attribute.value),
                    event_inputs,
                    event_outputs,
                    reasoning,
                    default_output=default_output,
                )
        for target, attributes in ((inputs, event_inputs), (outputs, event_outputs)):
            if attributes:
                target.setdefault(EVENTS_KEY, []).append({"name": _storable(event.name), "attributes": attributes})
                if EVENTS_KEY not in pii:
                    pii.append(EVENTS_KEY)


def _without_reasoning(messages: Any, reasoning: list[str]) -> Any:
    """gen_ai.output.messages without its reasoning parts, whose texts are appended to ``reasoning``.

    The value is a JSON string (the usual encoding) or a list (an OTLP array of kvlists);
    it is returned in the form it came in. Anything else is returned unchanged.
    """
    if isinstance(messages, str):
        try:
            parsed = json.loads(messages)
        except (ValueError, RecursionError):
            return messages
        if not isinstance(parsed, list):
            return messages
        kept = _without_reasoning(parsed, reasoning)
        return messages if kept == parsed else _storable(json.dumps(kept, ensure_ascii=False))
    if not isinstance(messages, list):
        return messages
    result: list[Any] = []
    for message in messages:
        if isinstance(message, dict) and isinstance(parts := message.get("parts"), list):
            kept_parts = []
            for part in parts:
                if isinstance(part, dict) and part.get("type") == "reasoning":
                    if isinstance(text := part.get("content"), str) and text:
                        reasoning.append(text)
                else:
                    kept_parts.append(part)
            message = {**message, "parts": kept_parts}
        result.append(message)
    return result


# --- Values -----------------------------------------------------------------------------


def _json_value(value: AnyValue, depth: int = 0, *, limited: bool = True) -> Any:
    """An OTLP AnyValue as JSON; an array or kvlist past :data:`MAX_VALUE_DEPTH` levels as its JSON text."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return _storable(value.string_value)
    if which == "bool_value":
        return value.bool_value
    if which == "int_value":
        return value.int_value
    if which == "double_value":
        number = value.double_value
        if math.isfinite(number):
            return number
        return "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if which in ("array_value", "kvlist_value"):
        if limited and depth >= MAX_VALUE_DEPTH:
            return json.dumps(_json_value(value, limited=False), ensure_ascii=False)
        if which == "array_value":
            return [_json_value(item, depth + 1, limited=limited) for item in value.array_value.values]
        return {
            _storable(pair.key): _json_value(pair.value, depth + 1, limited=limited)
            for pair in value.kvlist_value.values
        }
    return None


def _storable(text: str) -> str:
    """NUL and lone surrogates (which Postgres and the serializers refuse) as U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def _plain_line(text: str) -> str:
    """One line of plain text: forbidden characters removed (separators as spaces), whitespace collapsed."""
    kept = []
    for char in text:
        if unicodedata.category(char) in FORBIDDEN_TEXT_CATEGORIES:
            if char.isspace():
                kept.append(" ")
        else:
            kept.append(char)
    return " ".join("".join(kept).split())


def _label(text: str, max_length: int) -> str:
    """``text`` as a label: each run of other characters "_", starting with a letter or digit; or ""."""
    label = _NOT_LABEL_START.sub("", _NOT_LABEL.sub("_", text))
    return label[:max_length].rstrip("_")


def _abort_reason(message: str) -> str:
    reason = _NOT_LABEL_START.sub("", _NOT_ABORT_REASON.sub("_", message.lower()))
    return reason[:MAX_ABORT_REASON].rstrip("_") or "span_error"


def _time(unix_nano: int) -> datetime:
    # Microseconds: what a datetime holds.
    return _EPOCH + timedelta(microseconds=unix_nano // 1000)
