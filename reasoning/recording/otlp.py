"""OTLP/HTTP traces → flows and steps: decoding a ``/v1/traces`` body and mapping its spans.

Pure: no database, no request object. The view un-gzips the body, calls :func:`decode_request`
(a body it cannot use at all is an :class:`OtlpBodyError`, answered 400), then
:func:`map_request`; ``reasoning.recording.traces`` places and writes what comes back. The mapped dicts
carry the field names of the JSON routes and are validated by their serializers
(``FlowCreateSerializer``, ``FlowCloseSerializer``, ``StepCreateSerializer``) before anything
is written. A value copied verbatim from a ``reasoning.*`` attribute reaches those serializers
unchanged, so a client's mistake is reported to it (an empty ``reasoning.*`` string counts as
absent: SDKs send "" for unset values); every value this module derives (labels, summaries,
ids, counts) is made valid here, so a mapping never fails validation by its own doing.

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

What a span says (``reasoning.recording.conventions``)
  Each telemetry convention (OpenTelemetry GenAI, OpenInference, OpenLLMetry/Traceloop,
  Langfuse, MLflow, Vercel AI SDK, Pydantic Logfire) names the span's kind, model, tokens
  (input, output, reasoning, cached), tool, agent, session, user and error its own way; the
  conventions are asked most specific first and the first usable value wins. A name, model
  or id is usable only as one line of at most 200 characters; a token count only as an
  integer in 0..2,147,483,647 (another value is refused for that field and named in a
  warning: :class:`SpanProblem` with ``stored`` set). ``reasoning.*`` attributes override
  every convention. Without a kind from any convention: a span with ``db.system``,
  ``db.system.name`` or ``gen_ai.data_source.id`` is a retrieval, a span with a model and a
  token count a model call (``llm_prompt``), anything else a ``span``.

Which spans open flows
  A root span (an empty or all-zero ``parent_span_id``) opens a flow (``opens_flow``). A
  root that is itself a call (``llm_prompt``, ``tool_call``, ``embedding``, ``retrieval``,
  ``rerank``) also has a ``step``: the flow's one call. An agent span (kind ``agent``) that
  has a parent gets both ``flow``/``close`` and ``step``: ``reasoning.recording.traces`` decides when it
  places the span whether it nests (its own flow) or is an agent step of its root's flow.
  Every other span has a ``step`` only.

Flow (``flow``)
  trigger_type     reasoning.trigger_type, else gen_ai.operation.name (as a label), else by
                   kind (agent ``invoke_agent``, llm_prompt ``chat``, tool_call ``execute_tool``,
                   embedding ``embeddings``, retrieval ``retrieval``), else ``otlp_trace``
  trigger_ref      reasoning.trigger_ref, else the span name (≤ 500 chars)
  trigger_summary  reasoning.trigger_summary, when present
  agent            reasoning.agent, else the conventions' agent; for an agent span without
                   one, traceloop.entity.name or the span name (less an ``invoke_agent `` prefix);
                   a flow without one takes it when placed (``reasoning.recording.traces``)
  session_id       reasoning.session_id, else the conventions' session (≤ 100 chars)
  user_id          reasoning.user_id, else the conventions' user: the write path keeps only
                   its keyed pseudonym (``user_ref``)
  trace_id         the hex trace id
  patient_id       reasoning.patient_id, when present

Close (``close``)
  failed (status ERROR, an ``exception`` event, error.type, Langfuse level ERROR)
                {"flow_state": "aborted", "abort_reason": the error type, lowercased, as a
                label, or "span_error"}. The status message is never used: it is content.
  otherwise     {"flow_state": "completed", "outcome_type": reasoning.outcome_type or
                "span_completed"}, plus outcome_summary from reasoning.outcome_summary

Step (``step``)
  kind              reasoning.kind, else the conventions' kind
  agent             reasoning.agent, else the conventions' agent, else the resource's
                    gen_ai.agent.name / agent.name, else service.name (as labels), else
                    ``otlp``; a step that names none takes its enclosing agent's when placed
  summary_text      reasoning.summary_text, else generated from identifiers only (model,
                    tool, agent and span names), never from content: :data:`GENERATED_SUMMARIES`
  span_id, started_at, latency_ms (reasoning.latency_ms, else the span's duration)
  model, input_tokens, output_tokens, reasoning_tokens, cached_tokens, tool
  outcome, error_type  ``error`` and the error type's label (an exception class, error.type,
                    an HTTP status) when the span failed; "span_error" when nothing names it
  confidence, rationale, llm_call_log_ref, experiment_trace_ref, decision_graph_node_ref,
  memory_claim_ref  reasoning.<same name>
  inputs, outputs, pii_fields, reasoning_content   below

Clear, content and reasoning
  * Clear: an attribute a convention allow-lists (ids, names, kinds, models, counts, durations,
    statuses, finish reasons, providers), with a value of the allowed shape (a number, a
    boolean, one line of at most 200 characters, an array of those; under a count prefix,
    numbers only), goes into ``inputs`` under its name, at most :data:`MAX_KEPT_ATTRIBUTES`.
  * Content (``message_content="encrypt"``): every other attribute. A convention's known
    content (messages, prompts, tool arguments and results, payloads) goes into ``inputs``
    or ``outputs`` by direction, under its name or its family's (``llm.input_messages``);
    anything else, of any type, into ``inputs`` under :data:`UNKNOWN_KEY`, names and all;
    every span event, whole, under :data:`EVENTS_KEY`. Each of these keys is listed in
    ``pii_fields``: the write path stores them only encrypted.
  * Reasoning: taken out of the content before it is kept (:func:`_fenced`): attributes whose
    name says reasoning, ``reasoning_content``/``reasoning``/``thinking`` keys and reasoning or
    thinking parts of JSON payloads (JSON inside JSON strings too), and JSON-like text that
    mentions reasoning but does not parse, whole. It becomes the step's ``reasoning_content``
    (encrypted, counted, read only with ``reasoning.cot.read``).
  * ``message_content="drop"``: content, unknown attributes, events and reasoning are not kept.
  * The resource's attributes are never stored (service.name and an agent name are read).
  OTLP values become JSON: string, bool, int, double as scalars (NaN and infinities as the
  strings "NaN", "Infinity", "-Infinity"), bytes as base64, arrays as lists, kvlists as
  objects. NUL and lone surrogates become U+FFFD (Postgres cannot store them); arrays and
  kvlists nested deeper than :data:`MAX_VALUE_DEPTH` levels are kept as their JSON text.

Span problems (the span is skipped and reported; the rest of the request is mapped)
  * trace_id not 16 bytes or all zero; span_id not 8 bytes or all zero; parent_span_id
    neither empty nor 8 bytes;
  * start_time_unix_nano 0 or before 2000-01-01 (the earliest time recorded), or the span
    ending before it starts;
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

from core.plain_text import FORBIDDEN_TEXT_CATEGORIES
from reasoning import summary_guard
from reasoning.recording import conventions
from reasoning.recording.conventions import traceloop

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)

MESSAGE_CONTENT_MODES = ("encrypt", "drop")

# A span with no kind from any convention that has one of these is a retrieval; a span with a
# model and a token count is a model call; anything else is a "span".
RETRIEVAL_MARKERS = ("db.system", "db.system.name", "gen_ai.data_source.id")
DEFAULT_KIND = "span"
# The trigger_type of a flow opened by an agent span that names no operation.
AGENT_TRIGGER = "invoke_agent"
# The trigger_type of a flow whose opening span names no gen_ai.operation.name, by its kind: the
# operation names of the GenAI conventions, so flows read alike whichever library sent them.
TRIGGER_BY_KIND = {
    "agent": AGENT_TRIGGER,
    "workflow": "invoke_workflow",
    "llm_prompt": "chat",
    "tool_call": "execute_tool",
    "embedding": "embeddings",
    "retrieval": "retrieval",
}
# OpenTelemetry names an agent span "invoke_agent <agent name>".
AGENT_SPAN_PREFIX = "invoke_agent "

# Generated summaries by kind: (with the identifier, without it). The identifier is the model
# (llm_prompt, embedding, rerank), the tool (tool_call), the agent (agent, agent_setup) or the
# span name (every other kind, whose summary starts with the kind in words).
GENERATED_SUMMARIES: dict[str, tuple[str, str]] = {
    "llm_prompt": ("Model call to {}", "Model call"),
    "tool_call": ("Called tool {}", "Called a tool"),
    "embedding": ("Embeddings from {}", "Computed embeddings"),
    "retrieval": ("Retrieved context", "Retrieved context"),
    "rerank": ("Reranked with {}", "Reranked results"),
    "agent": ("Agent {} ran", "An agent ran"),
    "agent_setup": ("Set up agent {}", "Set up an agent"),
}

# Span events go whole into the encrypted EVENTS_KEY (the name and every attribute): into
# outputs for the events that carry a model's answer, into inputs for every other.
OUTPUT_EVENTS = ("gen_ai.content.completion", "gen_ai.choice", "gen_ai.completion", "gen_ai.assistant.message")
EVENTS_KEY = "otlp.events"
# Attributes no convention knows, whole and encrypted (their names too).
UNKNOWN_KEY = "otlp.attributes"
# Keys of a JSON payload whose text is the model's reasoning, and the part types that hold it.
REASONING_KEYS = frozenset({"reasoning_content", "reasoning", "thinking", "reasoning_text", "reasoningText"})
REASONING_PART_TYPES = frozenset({"reasoning", "thinking", "redacted_thinking"})

MAX_ATTRIBUTES = 1000
# Bounded work per request (docs/ingest.md, "Limits"): a request of more spans is refused whole
# (413); a span with more events or links than this is rejected (partial_success).
MAX_SPANS_PER_REQUEST = 2000
MAX_EVENTS = 1000
MAX_LINKS = 1000
MAX_KEPT_ATTRIBUTES = 128
MAX_VALUE_DEPTH = 5
MAX_JSON_SCAN = 1_000_000  # characters of a JSON payload parsed to fence its reasoning

# Serializer limits the derived values respect.
MAX_SUMMARY = 280
MAX_TRIGGER_REF = 500
MAX_LABEL = 100
MAX_SESSION_ID = 100
MAX_USER_ID = 200
MAX_ABORT_REASON = 200
MAX_MODEL = 200
MAX_TOOL = 200
MAX_REASONING_CONTENT = 200_000
MAX_INT = 2_147_483_647
# reasoning.recording.serializers.EARLIEST_TIME (2000-01-01T00:00:00Z) in Unix nanoseconds.
EARLIEST_UNIX_NANO = 946_684_800 * 1_000_000_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.:/-]+")
_NOT_LABEL_START = re.compile(r"^[^A-Za-z0-9]+")
_NOT_ABORT_REASON = re.compile(r"[^a-z0-9_.:-]+")
_MODEL_KINDS = frozenset({"llm_prompt", "embedding", "rerank"})
_MODEL_DATE = re.compile(r"[-@_](?:19|20)\d\d-?\d\d-?\d\d$")
_PYTHON_CLASS = re.compile(r"<class '([^']{1,200})'>")
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
        "user_id",
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
_USED_REASONING_ATTRIBUTES = frozenset(_FLOW_ATTRIBUTES) | frozenset(_STEP_ATTRIBUTES)


def _keyed(wanted: dict[str, tuple[str, ...]]) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """``_reasoning_attributes``' form of a table: each name with its attribute key, made once."""
    return tuple((f"reasoning.{name}", name, types) for name, types in wanted.items())


_FLOW_KEYS, _STEP_KEYS = _keyed(_FLOW_ATTRIBUTES), _keyed(_STEP_ATTRIBUTES)
_STEP_NAMES = frozenset(_STEP_ATTRIBUTES)


class OtlpBodyError(ValueError):
    """The whole body is unusable; the message names the problem, for the client that sent it."""


class UnsupportedContentType(OtlpBodyError):
    """The media type is neither OTLP protobuf nor OTLP JSON."""


@dataclass(init=False)
class MappedSpan:
    trace_id: str  # 32 lowercase hex chars
    span_id: str  # 16 lowercase hex chars
    parent_span_id: str  # 16 hex chars, or "" when the span has no parent
    name: str  # NUL and lone surrogates made U+FFFD
    start: datetime  # aware UTC
    end: datetime  # aware UTC
    opens_flow: bool  # a root span: it always opens a flow
    flow: dict[str, Any]  # FlowCreateSerializer fields; for a root, and for an agent span (a nested flow)
    close: dict[str, Any]  # FlowCloseSerializer fields; filled with flow
    step: dict[str, Any]  # StepCreateSerializer fields; {} for a root span that is no call
    kind: str  # the derived step kind ("agent" for agent spans)
    agent_named: bool  # the span names its agent itself (else step["agent"] is the fallback)
    # An agent span that names its agent by an attribute: an agent within it nests (reasoning.recording.traces).
    agent_scope: bool
    # A root agent's span-name label, else the resource's agent or service.name, as a label.
    fallback_agent: str

    # An explicit __init__ (the dataclass makes __eq__ and __repr__): compiled (core.compiled), it is a
    # native call, where a generated one runs as Python (a frozen one through object.__setattr__).
    def __init__(
        self,
        trace_id: str,
        span_id: str,
        parent_span_id: str,
        name: str,
        start: datetime,
        end: datetime,
        opens_flow: bool,
        flow: dict[str, Any],
        close: dict[str, Any],
        step: dict[str, Any],
        kind: str = DEFAULT_KIND,
        agent_named: bool = False,
        agent_scope: bool = False,
        fallback_agent: str = "otlp",
    ) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.name = name
        self.start = start
        self.end = end
        self.opens_flow = opens_flow
        self.flow = flow
        self.close = close
        self.step = step
        self.kind = kind
        self.agent_named = agent_named
        self.agent_scope = agent_scope
        self.fallback_agent = fallback_agent


@dataclass(frozen=True)
class SpanProblem:
    trace_id: str  # hex, or "" when not 16 bytes
    span_id: str  # hex, or "" when not 8 bytes
    message: str
    # A warning: the span was stored, one of its values was refused (a token count out of range).
    stored: bool = False


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


@dataclass(frozen=True)
class _Resource:
    service_name: str  # "" when absent
    agent: str  # the resource's gen_ai.agent.name or agent.name, as a label; "" when absent
    fallback_agent: str  # the agent of its spans that name none: its agent, else its service's name, else "otlp"


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def map_request(
    request: ExportTraceServiceRequest, *, message_content: str = "encrypt"
) -> tuple[list[MappedSpan], list[SpanProblem]]:
    """Every span of every resource and scope: mapped, or reported as a problem (in request order).

    Problems with ``stored`` set are warnings about spans that were mapped (a refused token count).
    """
    if message_content not in MESSAGE_CONTENT_MODES:
        raise ValueError(f"message_content must be one of {MESSAGE_CONTENT_MODES}, not {message_content!r}")
    outcomes: list[tuple[tuple[str, str] | None, MappedSpan | SpanProblem]] = []
    warnings: list[SpanProblem] = []
    for r, resource_spans in enumerate(request.resource_spans[:]):
        resource = _resource(resource_spans)
        for s, scope_spans in enumerate(resource_spans.scope_spans[:]):
            for p, span in enumerate(scope_spans.spans[:]):
                position = f"resource_spans[{r}].scope_spans[{s}].spans[{p}]"
                key, outcome, warned = _map_span(span, resource, position, keep_content=message_content == "encrypt")
                outcomes.append((key, outcome))
                warnings.extend(warned)
    mapped, problems = _without_duplicates(outcomes)
    stored = {(span.trace_id, span.span_id) for span in mapped}
    return mapped, [*problems, *dict.fromkeys(w for w in warnings if (w.trace_id, w.span_id) in stored)]


def _resource(resource_spans: ResourceSpans) -> _Resource:
    """Only these two names are read from a resource; no resource attribute is stored."""
    found: dict[str, str] = {}
    for attribute in resource_spans.resource.attributes[:]:
        if attribute.key in ("service.name", "gen_ai.agent.name", "agent.name"):
            value = conventions.text(attribute.value)
            if value is not None:
                found.setdefault(attribute.key, value)
    agent = _label(found.get("gen_ai.agent.name") or found.get("agent.name") or "", MAX_LABEL)
    service_name = found.get("service.name", "")
    return _Resource(service_name, agent, agent or _label(service_name, MAX_LABEL) or "otlp")


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
    span: Span, resource: _Resource, position: str, *, keep_content: bool
) -> tuple[tuple[str, str] | None, MappedSpan | SpanProblem, list[SpanProblem]]:
    # Each field read once: a protobuf field read builds a new Python object every time.
    raw_trace_id, raw_span_id = span.trace_id, span.span_id
    trace_id = raw_trace_id.hex() if len(raw_trace_id) == 16 else ""
    span_id = raw_span_id.hex() if len(raw_span_id) == 8 else ""
    # Only spans with usable ids can be duplicates of each other.
    key = (trace_id, span_id) if trace_id and span_id and any(raw_trace_id) and any(raw_span_id) else None
    label = span_id if span_id and any(raw_span_id) else position
    try:
        _check_ids(raw_trace_id, raw_span_id, span.parent_span_id)
        mapped, bad_counts = _mapped(span, trace_id, span_id, resource, keep_content=keep_content)
    except _Problem as problem:
        return key, SpanProblem(trace_id, span_id, f"span {label}: {problem}"), []
    warnings = [
        SpanProblem(
            trace_id,
            span_id,
            f"span {label}: {attribute} is not a token count (an integer from 0 to {MAX_INT}); {field} not recorded",
            stored=True,
        )
        for field, attribute in bad_counts
    ]
    return key, mapped, warnings


def _mapped(
    span: Span, trace_id: str, span_id: str, resource: _Resource, *, keep_content: bool
) -> tuple[MappedSpan, list[tuple[str, str]]]:
    # Each field read once (a read builds a new Python object), repeated ones as lists: iterating a
    # protobuf container ends in an IndexError, whose message is formatted every time.
    raw_parent_span_id = span.parent_span_id
    parent_span_id = raw_parent_span_id.hex() if any(raw_parent_span_id) else ""
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    if start_ns == 0:
        raise _Problem("start_time_unix_nano must be set, got 0")
    if start_ns < EARLIEST_UNIX_NANO:
        raise _Problem("start_time_unix_nano is before 2000-01-01T00:00:00Z, the earliest time recorded")
    if end_ns < start_ns:
        raise _Problem("end_time_unix_nano is before start_time_unix_nano")
    # Counted before they are copied: a span past the limits is refused without building them.
    if (count := len(span.attributes)) > MAX_ATTRIBUTES:
        raise _Problem(f"has {count} attributes; at most {MAX_ATTRIBUTES}")
    if (count := len(span.events)) > MAX_EVENTS:
        raise _Problem(f"has {count} events; at most {MAX_EVENTS}")
    span_attributes = span.attributes[:]
    events = span.events[:]
    if len(span.links) > MAX_LINKS:
        raise _Problem(f"has {len(span.links)} links; at most {MAX_LINKS}")
    for event in events:
        if len(event.attributes) > MAX_ATTRIBUTES:
            raise _Problem(f"has an event with {len(event.attributes)} attributes; at most {MAX_ATTRIBUTES}")
    attributes = {attribute.key: attribute.value for attribute in span_attributes}
    own_flow = _reasoning_attributes(attributes, _FLOW_KEYS)
    own_step = _reasoning_attributes(attributes, _STEP_KEYS)
    failed = span.status.code == Status.STATUS_CODE_ERROR
    facts = conventions.read(attributes, status_error=failed, exception_type=_exception_type(events))
    kind = _kind(facts, attributes)
    # Agent and tool spans may name themselves only by their entity name, else by their span name.
    agent = facts.agent
    if agent is None and kind == conventions.AGENT:
        agent = conventions.text(attributes.get(traceloop.ENTITY_NAME))
    tool = facts.tool
    if tool is None and kind == conventions.TOOL:
        tool = conventions.text(attributes.get(traceloop.ENTITY_NAME)) or span.name
    # Named by an attribute: an agent span named so opens an agent's scope (reasoning.recording.traces).
    attribute_agent = own_step.get("agent") or own_flow.get("agent") or _label(agent or "", MAX_LABEL)
    span_name_agent = _label(span.name.removeprefix(AGENT_SPAN_PREFIX), MAX_LABEL) if kind == conventions.AGENT else ""
    agent_label = attribute_agent or span_name_agent
    error_type = _error_label(facts.error_type or "") if facts.failed else ""
    if facts.failed and not error_type:
        error_type = "span_error"

    opens_flow = not parent_span_id
    start = _time(start_ns)
    flow: dict[str, Any] = {}
    close: dict[str, Any] = {}
    if opens_flow or kind == conventions.AGENT:
        # A root names its flow's agent by an attribute only: one named by its span alone ("Agent
        # workflow") yields to the first agent its steps name (reasoning.recording.traces).
        flow_agent = attribute_agent if opens_flow else agent_label
        flow, close = _flow(span, own_flow, trace_id, kind, attributes, facts, flow_agent, error_type)
    step: dict[str, Any] = {}
    if not opens_flow or kind in conventions.CALL_KINDS:
        step = _step(
            span,
            attributes,
            own_step,
            span_id,
            kind,
            facts,
            agent_label or resource.fallback_agent,
            agent_label,
            tool,
            error_type,
            start,
            (end_ns - start_ns) // 1_000_000,
            events,
            keep_content=keep_content,
            used=_USED_REASONING_ATTRIBUTES if flow else _STEP_NAMES,
        )
    mapped = MappedSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=_storable(span.name),
        start=start,
        end=_time(end_ns),
        opens_flow=opens_flow,
        flow=flow,
        close=close,
        step=step,
        kind=own_step.get("kind") or kind,
        agent_named=bool(agent_label),
        agent_scope=kind == conventions.AGENT and bool(attribute_agent),
        fallback_agent=(span_name_agent if opens_flow else "") or resource.fallback_agent,
    )
    return mapped, facts.bad_counts


def _check_ids(trace_id: bytes, span_id: bytes, parent_span_id: bytes) -> None:
    if len(trace_id) != 16:
        raise _Problem(f"trace_id must be 16 bytes, got {len(trace_id)}")
    if not any(trace_id):
        raise _Problem("trace_id must not be all zeros")
    if len(span_id) != 8:
        raise _Problem(f"span_id must be 8 bytes, got {len(span_id)}")
    if not any(span_id):
        raise _Problem("span_id must not be all zeros")
    if parent_span_id and len(parent_span_id) != 8:
        raise _Problem(f"parent_span_id must be empty or 8 bytes, got {len(parent_span_id)}")


def _exception_type(events: list[Span.Event]) -> str | None:
    """The ``exception.type`` of the span's first ``exception`` event (a class name); "exception"
    for such an event without one. The message and stack trace are content (encrypted with the events)."""
    for event in events:
        if event.name == "exception":
            for attribute in event.attributes[:]:
                if attribute.key == "exception.type" and (value := conventions.text(attribute.value)):
                    return value
            return "exception"
    return None


def _kind(facts: conventions.Facts, attributes: dict[str, AnyValue]) -> str:
    if facts.kind is not None:
        return facts.kind
    if any(name in attributes for name in RETRIEVAL_MARKERS):
        return conventions.RETRIEVAL
    if facts.model and (facts.input_tokens is not None or facts.output_tokens is not None):
        return conventions.LLM
    return DEFAULT_KIND


def _flow(
    span: Span,
    own: dict[str, Any],
    trace_id: str,
    kind: str,
    attributes: dict[str, AnyValue],
    facts: conventions.Facts,
    agent: str,
    error_type: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    operation = conventions.text(attributes.get("gen_ai.operation.name"))
    default_trigger = _label(operation or "", MAX_LABEL) or TRIGGER_BY_KIND.get(kind, "")
    flow: dict[str, Any] = {
        "trigger_type": own.get("trigger_type") or default_trigger or "otlp_trace",
        "trigger_ref": own["trigger_ref"] if "trigger_ref" in own else _storable(span.name)[:MAX_TRIGGER_REF],
        "trace_id": trace_id,
    }
    if "trigger_summary" in own:
        flow["trigger_summary"] = own["trigger_summary"]
    if agent:
        flow["agent"] = agent
    session_id = own.get("session_id")
    if session_id is None and facts.session is not None:
        session_id = _storable(facts.session).strip()
        session_id = session_id if len(session_id) <= MAX_SESSION_ID else None
    if session_id:
        flow["session_id"] = session_id
    user_id = own.get("user_id") or facts.user
    if user_id:
        flow["user_id"] = _storable(user_id)[:MAX_USER_ID]
    if "patient_id" in own:
        flow["patient_id"] = own["patient_id"]

    close: dict[str, Any]
    if error_type:
        # The status message is content (it often quotes the failed input): only the error's type names the abort.
        close = {"flow_state": "aborted", "abort_reason": _abort_reason(error_type)}
    else:
        close = {"flow_state": "completed", "outcome_type": own.get("outcome_type") or "span_completed"}
        if "outcome_summary" in own:
            close["outcome_summary"] = own["outcome_summary"]
    return flow, close


def _step(
    span: Span,
    attributes: dict[str, AnyValue],
    own: dict[str, Any],
    span_id: str,
    kind: str,
    facts: conventions.Facts,
    agent: str,
    named_agent: str,
    tool: str | None,
    error_type: str,
    start: datetime,
    duration_ms: int,
    events: list[Span.Event],
    *,
    keep_content: bool,
    used: frozenset[str],
) -> dict[str, Any]:
    """The step fields of a span. ``agent``: its agent or the fallback; ``named_agent``: the one it
    names ("" when none); ``start``: its start time; ``duration_ms``: its length; ``events``: its
    events; ``used``: the ``reasoning.*`` attribute names this span's mapping took."""
    model = _plain_line((facts.model or "")[: 4 * MAX_MODEL])[:MAX_MODEL].strip()
    tool_name = _plain_line((tool or "")[: 4 * MAX_TOOL])[:MAX_TOOL].strip()
    step: dict[str, Any] = {
        "kind": own.get("kind", kind),
        "agent": agent,
        "summary_text": own.get("summary_text") or _generated_summary(kind, span, model, tool_name, named_agent),
        "span_id": span_id,
        "started_at": start.isoformat(),
    }
    if "latency_ms" in own:
        step["latency_ms"] = own["latency_ms"]
    elif duration_ms <= MAX_INT:
        step["latency_ms"] = duration_ms
    if model:
        step["model"] = model
    if tool_name and kind == conventions.TOOL:
        step["tool"] = tool_name
    for field in ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens"):
        if (count := getattr(facts, field)) is not None:
            step[field] = count
    if error_type:
        step["outcome"] = "error"
        step["error_type"] = error_type
    for name in ("confidence", "rationale", *_STEP_REFS):
        if name in own:
            step[name] = own[name]

    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    pii: list[str] = []
    reasoning: list[str] = []
    kept = 0
    for name, value in attributes.items():
        if name.startswith("reasoning.") and name.removeprefix("reasoning.") in used:
            continue
        direction, family = conventions.content_of(name)
        if direction is None and kept < MAX_KEPT_ATTRIBUTES and conventions.is_clear(name, value):
            inputs[_storable(name)] = _json_value(value)
            kept += 1
            continue
        if not keep_content:
            continue
        # Content, or an attribute no convention lets us keep in clear: encrypted, never in clear.
        cleaned = _fenced(name, _json_value(value), reasoning)
        if cleaned is _FENCED_WHOLE:
            continue
        if direction is None:
            target, key = inputs.setdefault(UNKNOWN_KEY, {}), _storable(name)
            _add_pii(pii, UNKNOWN_KEY)
        else:
            holder = outputs if direction else inputs
            if family is not None:
                target, key = holder.setdefault(_storable(family), {}), _storable(name)
                _add_pii(pii, _storable(family))
            else:
                target, key = holder, _storable(name)
                _add_pii(pii, key)
        target[key] = cleaned
    if keep_content:
        _place_events(events, inputs, outputs, reasoning, pii)
        if reasoning:
            step["reasoning_content"] = _storable("\n\n".join(reasoning))[:MAX_REASONING_CONTENT]
    if inputs:
        step["inputs"] = inputs
    if outputs:
        step["outputs"] = outputs
    if pii:
        step["pii_fields"] = pii
    return step


def _add_pii(pii: list[str], key: str) -> None:
    if key not in pii:
        pii.append(key)


def _reasoning_attributes(
    attributes: dict[str, AnyValue], wanted: tuple[tuple[str, str, tuple[str, ...]], ...]
) -> dict[str, Any]:
    """The ``reasoning.<name>`` attributes present among ``wanted`` (``_keyed``), unchanged; a wrong
    type is a problem.

    An empty string counts as absent (SDKs send "" for unset), so the mapping's default applies.
    """
    found: dict[str, Any] = {}
    for key, name, types in wanted:
        value = attributes.get(key)
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


def _generated_summary(kind: str, span: Span, model: str, tool: str, agent: str) -> str:
    """From identifiers only (model, tool, agent and span names): never from message content."""
    if kind in GENERATED_SUMMARIES:
        identifier = {"llm_prompt": model, "embedding": model, "rerank": model, "tool_call": tool}.get(kind, agent)
        if kind == "retrieval":
            identifier = ""
        with_identifier, without = GENERATED_SUMMARIES[kind]
    else:
        words = _plain_line(kind.replace("_", " ")).capitalize() or "Span"
        identifier, with_identifier, without = span.name, words + " {}", words
    if kind in _MODEL_KINDS:
        # A model's dated snapshot ("gpt-4o-mini-2024-07-18") reads as a date to the summary guard.
        identifier = _MODEL_DATE.sub("", identifier)
    identifier = _plain_line(identifier[: 4 * MAX_SUMMARY])
    summary = with_identifier.format(identifier) if identifier else without
    if len(summary) > MAX_SUMMARY:
        summary = summary[: MAX_SUMMARY - 1].rstrip() + "…"
    # A generated summary never blocks a flow for patients: a name the guard refuses (a tool
    # named like an email address, a span name with a date) is left out.
    if identifier and not summary_guard.check_summary(summary).ok:
        summary = without
    return summary


# --- Message content and reasoning ----------------------------------------------------------


class _Whole:
    """The value was reasoning through and through: it went whole into reasoning_content."""


_FENCED_WHOLE = _Whole()


def _fenced(name: str, value: Any, reasoning: list[str]) -> Any:
    """``value`` without the model's reasoning, whose texts are appended to ``reasoning``.

    1. An attribute whose name says reasoning (``gen_ai.completion.0.reasoning``,
       ``ai.response.reasoning``) is reasoning whole.
    2. JSON (a list or object, or a string holding one, at any depth of JSON-in-JSON): the
       values under :data:`REASONING_KEYS` and the parts whose ``type`` is in
       :data:`REASONING_PART_TYPES` are taken out; the rest keeps its form.
    3. A string that looks like JSON but does not parse, and mentions reasoning, cannot be
       separated: it is reasoning whole.
    """
    if _says_reasoning(name) and isinstance(value, str | list | dict):
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if text:
            reasoning.append(_storable(text))
        return _FENCED_WHOLE
    return _without_reasoning(value, reasoning, 0)


def _says_reasoning(name: str) -> bool:
    """Whether an attribute's name says its value is reasoning (``_fenced``, 1.). The cheapest
    test first: most names are this project's own or say nothing of reasoning."""
    return (
        not name.startswith("reasoning.")  # this project's own attributes
        and "reasoning" in name.lower()
        and name.rsplit(".", 1)[-1] != "reasoning_tokens"
    )


def _without_reasoning(value: Any, reasoning: list[str], depth: int) -> Any:
    if depth > 2 * MAX_VALUE_DEPTH:
        return value
    if isinstance(value, str):
        stripped = value.lstrip()
        if stripped.startswith('"') and len(value) <= MAX_JSON_SCAN:
            # A JSON string literal (MLflow encodes every value so): look inside it.
            try:
                inner = json.loads(value)
            except (ValueError, RecursionError):
                return value
            if not isinstance(inner, str):
                return value
            found = len(reasoning)
            kept_inner = _without_reasoning(inner, reasoning, depth + 1)
            return value if len(reasoning) == found else _storable(json.dumps(kept_inner, ensure_ascii=False))
        if not stripped.startswith(("{", "[")) or len(value) > MAX_JSON_SCAN:
            return value
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            lowered = value.lower()
            if "reasoning" in lowered or "thinking" in lowered:
                reasoning.append(_storable(value))
                return ""
            return value
        found = len(reasoning)
        kept = _without_reasoning(parsed, reasoning, depth + 1)
        return value if len(reasoning) == found else _storable(json.dumps(kept, ensure_ascii=False))
    if isinstance(value, list):
        result = []
        for item in value:
            if isinstance(item, dict) and str(item.get("type", "")).lower() in REASONING_PART_TYPES:
                _take_reasoning(item, reasoning)
                continue
            result.append(_without_reasoning(item, reasoning, depth + 1))
        return result
    if isinstance(value, dict):
        result_object: dict[str, Any] = {}
        for key, item in value.items():
            # Text (or parts holding it) only: a count under such a key (LangChain's
            # output_token_details.reasoning) is no reasoning.
            if key in REASONING_KEYS and isinstance(item, str | list | dict) and item:
                text = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
                reasoning.append(_storable(text))
                continue
            result_object[key] = _without_reasoning(item, reasoning, depth + 1)
        return result_object
    return value


def _take_reasoning(part: dict[str, Any], reasoning: list[str]) -> None:
    for key in ("content", "text", "thinking", "reasoning", "summary", "data"):
        text = part.get(key)
        if isinstance(text, str) and text:
            reasoning.append(_storable(text))
            return
    reasoning.append(_storable(json.dumps(part, ensure_ascii=False)))


def _place_events(
    events: list[Span.Event], inputs: dict[str, Any], outputs: dict[str, Any], reasoning: list[str], pii: list[str]
) -> None:
    """Every span event, whole (name and attributes), into the encrypted :data:`EVENTS_KEY`."""
    for event in events:
        attributes: dict[str, Any] = {}
        for attribute in event.attributes[:]:
            cleaned = _fenced(attribute.key, _json_value(attribute.value), reasoning)
            if cleaned is not _FENCED_WHOLE:
                attributes[_storable(attribute.key)] = cleaned
        target = outputs if event.name.startswith(OUTPUT_EVENTS) else inputs
        target.setdefault(EVENTS_KEY, []).append({"name": _storable(event.name), "attributes": attributes})
        _add_pii(pii, EVENTS_KEY)


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
            return [_json_value(item, depth + 1, limited=limited) for item in value.array_value.values[:]]
        return {
            _storable(pair.key): _json_value(pair.value, depth + 1, limited=limited)
            for pair in value.kvlist_value.values[:]
        }
    return None


def _storable(text: str) -> str:
    """NUL and lone surrogates (which Postgres and the serializers refuse) as U+FFFD."""
    if text.isascii() and "\x00" not in text:  # no surrogate is ASCII: most text, without the pattern's scan
        return text
    return _UNSTORABLE.sub("\ufffd", text)


def _plain_line(text: str) -> str:
    """One line of plain text: forbidden characters removed (separators as spaces), whitespace collapsed."""
    if text.isascii() and text.isprintable():
        return " ".join(text.split())  # no ASCII character but a control one is forbidden (Cc)
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


def _error_label(error_type: str) -> str:
    """An error type as a label; Python's ``<class 'openai.InternalServerError'>`` as the class name."""
    if match := _PYTHON_CLASS.fullmatch(error_type.strip()):
        error_type = match[1]
    return _label(error_type, MAX_LABEL)


def _abort_reason(message: str) -> str:
    reason = _NOT_LABEL_START.sub("", _NOT_ABORT_REASON.sub("_", message.lower()))
    return reason[:MAX_ABORT_REASON].rstrip("_") or "span_error"


def _time(unix_nano: int) -> datetime:
    # Microseconds: what a datetime holds (positional: timedelta's keyword parsing costs more).
    return _EPOCH + timedelta(0, 0, unix_nano // 1000)
