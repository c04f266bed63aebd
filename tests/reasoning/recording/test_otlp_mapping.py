"""reasoning.recording.otlp: decoding OTLP/HTTP trace bodies and mapping spans to flow and step fields.

Pure unit tests: no database, no HTTP. ``tests/otlp.py`` builds the requests.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status as SdkStatus
from opentelemetry.trace import StatusCode

from core.serializers import plain_text_validator
from reasoning.recording.otlp import (
    EVENTS_KEY,
    MappedSpan,
    OtlpBodyError,
    SpanProblem,
    UnsupportedContentType,
    decode_request,
    map_request,
)
from reasoning.recording.serializers import FlowCloseSerializer, FlowCreateSerializer, StepCreateSerializer
from reasoning.recording.traces import SPAN_NAMESPACE, span_uuid
from tests.otlp import (
    CHILD_SPAN_ID,
    MS,
    ROOT_SPAN_ID,
    T0,
    TRACE_ID,
    child,
    json_body,
    protobuf_body,
    request,
    span,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# Planted in every message-content attribute: it must never leave the pii-listed keys.
MARKER = "Jane-Doe-MRN-4417"
OTHER_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def mapped(*spans: Span, service_name: str | None = "test-agent", **kwargs: Any) -> list[MappedSpan]:
    """Map a request of ``spans``; there must be no problems."""
    result, problems = map_request(request(*spans, service_name=service_name), **kwargs)
    assert problems == []
    return result


def only(*spans: Span, **kwargs: Any) -> MappedSpan:
    (result,) = mapped(*spans, **kwargs)
    return result


def step_of(**kwargs: Any) -> dict[str, Any]:
    """The step of one child span built from ``kwargs``."""
    result = only(child(**kwargs))
    assert not result.opens_flow
    return result.step


def problems_of(*spans: Span) -> list[SpanProblem]:
    result, problems = map_request(request(*spans))
    assert result == []
    return problems


def chat_messages(*parts: dict[str, str], role: str = "assistant") -> list[dict[str, Any]]:
    return [{"role": role, "parts": list(parts), "finish_reason": "stop"}]


# --- Decoding ---------------------------------------------------------------------------


def a_rich_trace() -> ExportTraceServiceRequest:
    """A root, an LLM call with content, a failing tool call, a nested agent, every value type."""
    return request(
        span("invoke_agent triage", attributes={"gen_ai.operation.name": "invoke_agent", "session.id": "s-1"}),
        child(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.input.messages": json.dumps(chat_messages({"type": "text", "content": "hi"}, role="user")),
                "gen_ai.output.messages": json.dumps(
                    chat_messages({"type": "reasoning", "content": "think"}, {"type": "text", "content": "hello"})
                ),
                "values": [True, 2, 2.5, "s", b"\x01\xff", {"k": None}],
                "not_a_number": math.nan,
                "infinite": -math.inf,
            },
            events=[("gen_ai.content.prompt", {"gen_ai.prompt": "hi"})],
            links=[(OTHER_TRACE_ID, "b7ad6b7169203331")],
        ),
        child(
            "execute_tool lookup",
            span_id="eee19b7ec3c1b176",
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
            status="error",
            status_message="timeout",
        ),
        child(
            "invoke_agent researcher",
            span_id="eee19b7ec3c1b177",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
            status="error",
            status_message="Gave up",
        ),
    )


def test_protobuf_and_json_bodies_map_to_the_same_spans() -> None:
    trace = a_rich_trace()
    from_protobuf = map_request(decode_request(protobuf_body(trace), PROTOBUF))
    from_json = map_request(decode_request(json_body(trace), JSON))
    assert from_protobuf == from_json
    spans, problems = from_json
    assert problems == []
    assert [(s.span_id, s.opens_flow) for s in spans] == [
        (ROOT_SPAN_ID, True),
        (CHILD_SPAN_ID, False),
        ("eee19b7ec3c1b176", False),
        # A nested agent: whether it opens a flow of its own is decided when it is placed.
        ("eee19b7ec3c1b177", False),
    ]
    nested = spans[3]
    assert (nested.kind, nested.flow["agent"], nested.step["kind"]) == ("agent", "researcher", "agent")


def test_json_link_ids_are_read_as_hex() -> None:
    decoded = decode_request(json_body(a_rich_trace()), JSON)
    (link,) = decoded.resource_spans[0].scope_spans[0].spans[1].links
    assert (link.trace_id.hex(), link.span_id.hex()) == (OTHER_TRACE_ID, "b7ad6b7169203331")


# The trace example of the OTLP specification (opentelemetry-proto, examples/trace.json): hex ids
# in capitals, the time as a string, the span kind as an integer.
SPEC_EXAMPLE = b"""{
  "resourceSpans": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
    "scopeSpans": [{
      "scope": {"name": "my.library", "version": "1.0.0",
                "attributes": [{"key": "my.scope.attribute", "value": {"stringValue": "some scope attribute"}}]},
      "spans": [{
        "traceId": "5B8EFFF798038103D269B633813FC60C",
        "spanId": "EEE19B7EC3C1B174",
        "parentSpanId": "EEE19B7EC3C1B173",
        "name": "I'm a server span",
        "startTimeUnixNano": "1544712660000000000",
        "endTimeUnixNano": "1544712661000000000",
        "kind": 2,
        "attributes": [{"key": "my.span.attr", "value": {"stringValue": "some value"}}]
      }]
    }]
  }]
}"""


def test_the_spec_json_example_maps_like_its_protobuf_twin() -> None:
    twin = request(
        span(
            "I'm a server span",
            parent_span_id="eee19b7ec3c1b173",
            start=1544712660000000000,
            end=1544712661000000000,
            kind=Span.SPAN_KIND_SERVER,
            attributes={"my.span.attr": "some value"},
        ),
        service_name="my.service",
    )
    spans, problems = map_request(decode_request(SPEC_EXAMPLE, JSON))
    assert (spans, problems) == map_request(twin)
    (result,) = spans
    assert (result.trace_id, result.span_id, result.parent_span_id) == (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
        "eee19b7ec3c1b173",
    )
    assert result.start == datetime(2018, 12, 13, 14, 51, tzinfo=UTC)
    assert result.step["agent"] == "my.service"
    # An attribute no convention knows is kept only encrypted, its name included.
    assert result.step["inputs"] == {"otlp.attributes": {"my.span.attr": "some value"}}
    assert result.step["pii_fields"] == ["otlp.attributes"]


@pytest.mark.parametrize(
    ("content_type", "encode"),
    [
        ("application/json; charset=utf-8", json_body),
        ("Application/JSON", json_body),
        (
            "application/x-protobuf; proto=opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest",
            protobuf_body,
        ),
    ],
)
def test_content_type_parameters_and_case_are_ignored(content_type: str, encode: Any) -> None:
    trace = request(span())
    assert decode_request(encode(trace), content_type) == trace


def test_an_empty_protobuf_body_is_an_empty_export() -> None:
    assert map_request(decode_request(b"", PROTOBUF)) == ([], [])


def test_truncated_protobuf_is_a_body_error() -> None:
    body = protobuf_body(a_rich_trace())
    with pytest.raises(OtlpBodyError, match=r"not an OTLP traces protobuf: .*Wire format was corrupt"):
        decode_request(body[: len(body) // 2], PROTOBUF)


def test_random_bytes_are_a_body_error() -> None:
    with pytest.raises(OtlpBodyError, match="not an OTLP traces protobuf"):
        decode_request(random.Random(7).randbytes(256), PROTOBUF)


def a_logs_request() -> bytes:
    logs = ExportLogsServiceRequest()
    record = logs.resource_logs.add().scope_logs.add().log_records.add()
    record.time_unix_nano = T0
    record.severity_text = "INFO"
    record.body.string_value = "started"
    record.trace_id = bytes.fromhex(TRACE_ID)
    return bytes(logs.SerializeToString())


def a_metrics_request() -> bytes:
    # Parses as a traces request: name, description and unit line up with the span's ids and
    # trace state; only the sum arrives where the span has its start time, as another wire type.
    metrics = ExportMetricsServiceRequest()
    metric = metrics.resource_metrics.add().scope_metrics.add().metrics.add(name="requests", unit="1")
    metric.sum.data_points.add(as_int=3, time_unix_nano=T0)
    return bytes(metrics.SerializeToString())


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (a_logs_request(), "not an OTLP traces protobuf"),
        (a_metrics_request(), "not an OTLP traces request: field 7 of Span has the wrong wire type"),
    ],
    ids=["logs", "metrics"],
)
def test_another_otlp_message_is_a_body_error(body: bytes, message: str) -> None:
    with pytest.raises(OtlpBodyError, match=message):
        decode_request(body, PROTOBUF)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"foo": 1}', "the top level has no field named 'foo'"),
        (b'{"resourceSpans": [], "metrics": []}', "the top level has no field named 'metrics'"),
        (b"[]", "OTLP JSON must be an object, got list"),
        (b'[{"resourceSpans": []}]', "OTLP JSON must be an object, got list"),
        (b'"resourceSpans"', "OTLP JSON must be an object, got str"),
        (b'{"resourceSpans": [', "not valid JSON"),
        (b"", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b'{"resourceSpans": 5}', "repeated field resourceSpans must be in"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}',
            "resourceSpans.scopeSpans.spans.startTimeUnixNano: invalid literal",
        ),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_json_that_is_not_otlp_is_a_body_error(body: bytes, message: str) -> None:
    with pytest.raises(OtlpBodyError, match=message):
        decode_request(body, JSON)


def test_unknown_fields_inside_resource_spans_are_ignored_as_the_spec_asks() -> None:
    document = json.loads(json_body(request(child())))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["fieldFromANewerSdk"] = {"x": 1}
    document["resourceSpans"][0]["newResourceThing"] = 7

    decoded = decode_request(json.dumps(document).encode(), JSON)

    assert decoded == decode_request(json_body(request(child())), JSON)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("traceId", "W47/95gDgQPSabYzgT/GDA=="),  # the trace id in base64: protobuf's JSON, not OTLP's
        ("spanId", "not-hex!"),
        ("parentSpanId", "abc"),  # odd length
    ],
)
def test_json_ids_must_be_hex(field: str, value: str) -> None:
    document = json.loads(json_body(request(child())))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0][field] = value
    with pytest.raises(
        OtlpBodyError, match=rf"resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[0\]\.{field}: not a hex string"
    ):
        decode_request(json.dumps(document).encode(), JSON)


FUZZ = settings(max_examples=200, deadline=None)
OTLP_KEYS = [
    "resourceSpans",
    "resource",
    "scopeSpans",
    "spans",
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "attributes",
    "key",
    "value",
    "stringValue",
    "intValue",
    "doubleValue",
    "arrayValue",
    "kvlistValue",
    "values",
    "events",
    "links",
    "status",
    "code",
    "kind",
    "foo",
]
JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.sampled_from([TRACE_ID, ROOT_SPAN_ID, "", "1700000000000000000"]),
)
OTLP_LIKE_JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(OTLP_KEYS), inner, max_size=4),
    max_leaves=30,
)


@FUZZ
@given(OTLP_LIKE_JSON)
def test_any_json_is_decoded_and_mapped_or_is_a_body_error(document: Any) -> None:
    try:
        decoded = decode_request(json.dumps(document).encode(), JSON)
    except OtlpBodyError:
        return
    map_request(decoded)


@FUZZ
@given(st.data())
def test_a_damaged_protobuf_is_decoded_and_mapped_or_is_a_body_error(data: st.DataObject) -> None:
    body = bytearray(protobuf_body(a_rich_trace()))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        decoded = decode_request(bytes(body), PROTOBUF)
    except OtlpBodyError:
        return
    map_request(decoded)


def test_other_content_types_are_unsupported() -> None:
    with pytest.raises(UnsupportedContentType, match="unsupported content type 'text/plain'") as raised:
        decode_request(protobuf_body(request(span())), "text/plain")
    assert isinstance(raised.value, OtlpBodyError)


# --- Flows ------------------------------------------------------------------------------


def test_a_root_span_opens_a_flow_and_completes_it() -> None:
    result = only(span("handle question", status="ok"))
    assert result == MappedSpan(
        trace_id=TRACE_ID,
        span_id=ROOT_SPAN_ID,
        parent_span_id="",
        name="handle question",
        start=datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
        end=datetime(2023, 11, 14, 22, 13, 21, 500_000, tzinfo=UTC),
        opens_flow=True,
        flow={"trigger_type": "otlp_trace", "trigger_ref": "handle question", "trace_id": TRACE_ID},
        close={"flow_state": "completed", "outcome_type": "span_completed"},
        step={},
        kind="span",
        agent_named=False,
        fallback_agent="test-agent",
    )


def test_an_all_zero_parent_counts_as_no_parent() -> None:
    result = only(span(parent_span_id=bytes(8)))
    assert (result.parent_span_id, result.opens_flow) == ("", True)


def test_gen_ai_attributes_fill_the_flow() -> None:
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Triage Bot", "session.id": "s-1"}
    result = only(span("invoke_agent Triage Bot", attributes=attributes))
    assert result.flow == {
        "trigger_type": "invoke_agent",
        "trigger_ref": "invoke_agent Triage Bot",
        "trace_id": TRACE_ID,
        "agent": "Triage_Bot",  # made a label
        "session_id": "s-1",
    }


def test_reasoning_attributes_fill_the_flow_verbatim() -> None:
    attributes = {
        "reasoning.trigger_type": "user question!",  # not a label: the serializer says so, not the mapping
        "reasoning.trigger_ref": "ticket-42",
        "reasoning.trigger_summary": "Asked about a medication interaction",
        "reasoning.agent": "triage",
        "reasoning.session_id": "session-7",
        "reasoning.patient_id": "7d3c1f0e-2b1a-4c5d-9e8f-0a1b2c3d4e5f",
        "reasoning.outcome_type": "answered",
        "reasoning.outcome_summary": "Answered with two sources",
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "other",
        "session.id": "other",
    }
    result = only(span(attributes=attributes))
    assert result.flow == {
        "trigger_type": "user question!",
        "trigger_ref": "ticket-42",
        "trigger_summary": "Asked about a medication interaction",
        "trace_id": TRACE_ID,
        "agent": "triage",
        "session_id": "session-7",
        "patient_id": "7d3c1f0e-2b1a-4c5d-9e8f-0a1b2c3d4e5f",
    }
    assert result.close == {
        "flow_state": "completed",
        "outcome_type": "answered",
        "outcome_summary": "Answered with two sources",
    }


@pytest.mark.parametrize(
    ("attributes", "session_id"),
    [
        ({"gen_ai.conversation.id": "conv-1"}, "conv-1"),
        ({"gen_ai.conversation.id": "conv-1", "session.id": "sess-1"}, "sess-1"),
        ({"session.id": "sess-1", "reasoning.session_id": "mine"}, "mine"),
        ({"session.id": "s" * 101}, None),  # longer than the field: left out
        ({"session.id": 42}, None),  # not a string: not a session id
    ],
)
def test_flow_session_id(attributes: dict[str, Any], session_id: str | None) -> None:
    assert only(span(attributes=attributes)).flow.get("session_id") == session_id


def test_a_long_span_name_is_cut_for_trigger_ref() -> None:
    assert only(span("n" * 600)).flow["trigger_ref"] == "n" * 500


@pytest.mark.parametrize(
    ("attributes", "events", "reason"),
    [
        ({}, [], "span_error"),
        ({"error.type": "Timeout"}, [], "timeout"),
        ({"error.type": "<class 'openai.InternalServerError'>"}, [], "openai.internalservererror"),
        ({"error.type": 503}, [], "503"),
        ({}, [("exception", {"exception.type": "ToolError", "exception.message": MARKER})], "toolerror"),
        ({}, [("exception", {"exception.message": MARKER})], "exception"),
        ({"error.type": "Ünïcode ☃ failure"}, [], "n_code_failure"),
        ({"error.type": "x" * 150}, [], "x" * 100),
        ({"error.type": "x" * 300}, [], "span_error"),  # longer than a name: content, not a label
        ({"error.type": "!!!"}, [], "span_error"),
    ],
)
def test_an_error_status_aborts_with_a_label_safe_reason(
    attributes: dict[str, Any], events: list[tuple[str, dict[str, Any]]], reason: str
) -> None:
    # The status message is content (it often quotes the input that failed): never the reason.
    result = only(
        span(
            status="error",
            status_message=f"Tool failed for {MARKER}",
            attributes={"reasoning.outcome_type": "ignored", **attributes},
            events=events,
        )
    )
    assert result.close == {"flow_state": "aborted", "abort_reason": reason}
    assert MARKER not in json.dumps([result.flow, result.close])


def test_an_exception_event_aborts_even_without_an_error_status() -> None:
    result = only(span(events=[("exception", {"exception.type": "ValueError"})]))
    assert result.close == {"flow_state": "aborted", "abort_reason": "valueerror"}


def test_a_failed_step_says_so_with_a_label() -> None:
    step = step_of(
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
        status="error",
        status_message=f"lookup failed for {MARKER}",
        events=[("exception", {"exception.type": "tools.LookupError", "exception.message": MARKER})],
    )
    assert (step["outcome"], step["error_type"], step["tool"]) == ("error", "tools.LookupError", "lookup")
    assert MARKER not in json.dumps({k: v for k, v in step.items() if k not in ("inputs", "outputs")})
    assert MARKER in json.dumps(step["inputs"]["otlp.events"]) and "otlp.events" in step["pii_fields"]
    assert "outcome" not in step_of()


def test_a_nested_agent_span_may_open_a_flow_or_be_an_agent_step() -> None:
    nested = child("invoke_agent researcher", attributes={"gen_ai.operation.name": "invoke_agent"})
    root, agent = mapped(span(), nested)
    assert root.opens_flow
    # Placing decides (reasoning.recording.traces): both parts are ready.
    assert (agent.opens_flow, agent.parent_span_id, agent.kind) == (False, ROOT_SPAN_ID, "agent")
    assert agent.flow["trigger_type"] == "invoke_agent"
    assert (agent.step["kind"], agent.step["summary_text"]) == ("agent", "Agent researcher ran")


# --- Steps ------------------------------------------------------------------------------


def test_a_child_span_is_a_step() -> None:
    result = only(child("rerank candidates", duration_ms=250, attributes={"candidates": 12}))
    assert (result.opens_flow, result.parent_span_id, result.flow, result.close) == (False, ROOT_SPAN_ID, {}, {})
    assert result.step == {
        "kind": "span",
        "agent": "test-agent",
        "summary_text": "Span rerank candidates",
        "span_id": CHILD_SPAN_ID,
        "started_at": "2023-11-14T22:13:20+00:00",
        "latency_ms": 250,
        "inputs": {"otlp.attributes": {"candidates": 12}},
        "pii_fields": ["otlp.attributes"],
    }


@pytest.mark.parametrize(
    ("operation", "attributes", "kind"),
    [
        ("chat", {}, "llm_prompt"),
        ("text_completion", {}, "llm_prompt"),
        ("generate_content", {}, "llm_prompt"),
        ("execute_tool", {}, "tool_call"),
        ("embeddings", {}, "embedding"),
        ("retrieval", {}, "retrieval"),
        ("create_agent", {}, "agent_setup"),
        (None, {"db.system": "postgresql"}, "retrieval"),
        (None, {"db.system.name": "postgresql"}, "retrieval"),
        (None, {"gen_ai.data_source.id": "guidelines"}, "retrieval"),
        ("chat", {"gen_ai.data_source.id": "guidelines"}, "llm_prompt"),
        ("invoke_workflow", {}, "workflow"),
        (None, {}, "span"),
    ],
)
def test_the_kind_table(operation: str | None, attributes: dict[str, Any], kind: str) -> None:
    if operation:
        attributes = {**attributes, "gen_ai.operation.name": operation}
    assert step_of(attributes=attributes)["kind"] == kind


def test_reasoning_kind_overrides_the_table_verbatim() -> None:
    step = step_of(attributes={"gen_ai.operation.name": "chat", "reasoning.kind": "Not A Label"})
    assert step["kind"] == "Not A Label"
    assert "reasoning.kind" not in step["inputs"]


@pytest.mark.parametrize(
    ("attributes", "service_name", "agent"),
    [
        ({"reasoning.agent": "critic", "gen_ai.agent.name": "x"}, "svc", "critic"),
        ({"gen_ai.agent.name": "Research Assistant"}, "svc", "Research_Assistant"),
        ({"gen_ai.agent.name": "日本語"}, "my service", "my_service"),  # nothing of it is a label
        ({}, "svc", "svc"),
        ({}, None, "otlp"),
    ],
)
def test_the_step_agent(attributes: dict[str, Any], service_name: str | None, agent: str) -> None:
    (result,) = mapped(child(attributes=attributes), service_name=service_name)
    assert result.step["agent"] == agent


@pytest.mark.parametrize(
    ("name", "attributes", "summary"),
    [
        ("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}, "Model call to gpt-4o"),
        (
            "chat",
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-mini"},
            "Model call to gpt-4o-mini",
        ),
        ("chat", {"gen_ai.operation.name": "chat"}, "Model call"),
        ("x", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}, "Called tool lookup"),
        ("x", {"gen_ai.operation.name": "execute_tool"}, "Called tool x"),  # the span names it
        ("", {"gen_ai.operation.name": "execute_tool"}, "Called a tool"),
        ("x", {"gen_ai.operation.name": "embeddings", "gen_ai.request.model": "e5"}, "Embeddings from e5"),
        ("x", {"gen_ai.operation.name": "embeddings"}, "Computed embeddings"),
        ("search kb", {"db.system": "postgresql"}, "Retrieved context"),
        ("x", {"gen_ai.operation.name": "create_agent", "gen_ai.agent.name": "Triage"}, "Set up agent Triage"),
        ("x", {"gen_ai.operation.name": "create_agent"}, "Set up an agent"),
        ("rerank candidates", {}, "Span rerank candidates"),
        ("", {}, "Span"),
        ("Weigh\nevidence\u200b\u202e\tnow", {}, "Span Weigh evidence now"),
    ],
)
def test_generated_summaries(name: str, attributes: dict[str, Any], summary: str) -> None:
    assert step_of(name=name, attributes=attributes)["summary_text"] == summary


def test_a_generated_summary_is_one_plain_line_of_at_most_280_chars() -> None:
    summary = step_of(name="weigh \x00evidence\u2028" * 100)["summary_text"]
    assert len(summary) <= 280
    assert summary.endswith("…")
    plain_text_validator(summary)


def test_reasoning_summary_text_is_taken_verbatim() -> None:
    long = "Compared two evidence branches. " * 10  # too long: the serializer reports it
    assert step_of(attributes={"reasoning.summary_text": long})["summary_text"] == long


def test_an_empty_reasoning_string_counts_as_absent() -> None:
    step = step_of(name="rerank", attributes={"reasoning.summary_text": "", "reasoning.kind": ""})
    assert (step["kind"], step["summary_text"]) == ("span", "Span rerank")


def test_latency_is_the_duration_unless_given() -> None:
    assert step_of(end=T0 + 42 * MS + 999_999)["latency_ms"] == 42
    assert step_of(duration_ms=0)["latency_ms"] == 0
    assert step_of(attributes={"reasoning.latency_ms": 7})["latency_ms"] == 7
    # Longer than the field holds (24.8 days): left out rather than wrong.
    assert "latency_ms" not in step_of(duration_ms=2**31)


def test_reasoning_step_fields_are_taken_verbatim() -> None:
    attributes = {
        "reasoning.confidence": 0.8,
        "reasoning.rationale": "Two sources agree.",
        "reasoning.llm_call_log_ref": "llm-1",
        "reasoning.experiment_trace_ref": "exp-2",
        "reasoning.decision_graph_node_ref": "node-3",
        "reasoning.memory_claim_ref": "claim-4",
    }
    step = step_of(attributes=attributes)
    assert {key: step[key] for key in (name.removeprefix("reasoning.") for name in attributes)} == {
        "confidence": 0.8,
        "rationale": "Two sources agree.",
        "llm_call_log_ref": "llm-1",
        "experiment_trace_ref": "exp-2",
        "decision_graph_node_ref": "node-3",
        "memory_claim_ref": "claim-4",
    }
    assert "inputs" not in step  # consumed, not copied


def test_reasoning_attributes_the_step_does_not_use_are_kept_encrypted() -> None:
    step = step_of(attributes={"reasoning.outcome_type": "answered", "reasoning.custom": 1})
    assert step["inputs"] == {"otlp.attributes": {"reasoning.outcome_type": "answered", "reasoning.custom": 1}}
    assert step["pii_fields"] == ["otlp.attributes"]


def test_model_and_usage_tokens() -> None:
    step = step_of(
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 45,
            "gen_ai.usage.reasoning.output_tokens": 30,
        }
    )
    assert {key: step[key] for key in ("model", "input_tokens", "output_tokens", "reasoning_tokens")} == {
        "model": "gpt-4o-2024-08-06",
        "input_tokens": 120,
        "output_tokens": 45,
        "reasoning_tokens": 30,
    }
    # The attributes are inputs as well.
    assert step["inputs"]["gen_ai.usage.input_tokens"] == 120


def test_the_request_model_when_there_is_no_response_model() -> None:
    assert step_of(attributes={"gen_ai.request.model": "gpt-4o"})["model"] == "gpt-4o"


@pytest.mark.parametrize(
    "name",
    [
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.usage.reasoning_tokens",
        "gen_ai.usage.output_tokens_details.reasoning_tokens",
    ],
)
def test_reasoning_token_attributes(name: str) -> None:
    assert step_of(attributes={name: 30})["reasoning_tokens"] == 30


def test_deprecated_token_attributes() -> None:
    step = step_of(attributes={"gen_ai.usage.prompt_tokens": 10, "gen_ai.usage.completion_tokens": 5})
    assert (step["input_tokens"], step["output_tokens"]) == (10, 5)


def test_unusable_token_counts_and_models_are_not_taken() -> None:
    attributes = {
        "gen_ai.usage.input_tokens": -1,
        "gen_ai.usage.output_tokens": "45",
        "gen_ai.usage.reasoning_tokens": 2**40,
        "gen_ai.request.model": "  ",
    }
    (result,), warnings = map_request(request(child(attributes=attributes)))
    step = result.step
    assert not set(step) & {"model", "input_tokens", "output_tokens", "reasoning_tokens"}
    # Each refused count is named in a warning; the span is stored all the same.
    assert [(w.span_id, w.stored) for w in warnings] == [(CHILD_SPAN_ID, True)] * 3
    assert [w.message.split(": ", 1)[1] for w in warnings] == [
        f"gen_ai.usage.{name} is not a token count (an integer from 0 to 2147483647); {field} not recorded"
        for name, field in (
            ("input_tokens", "input_tokens"),
            ("output_tokens", "output_tokens"),
            ("reasoning_tokens", "reasoning_tokens"),
        )
    ]
    # Counts are kept in clear only as numbers; a string under gen_ai.usage.* is encrypted.
    assert step["inputs"]["gen_ai.usage.input_tokens"] == -1
    assert step["inputs"]["otlp.attributes"] == {"gen_ai.usage.output_tokens": "45"}


# --- Message content --------------------------------------------------------------------


def content_attributes() -> dict[str, Any]:
    """Every kind of message content, each holding MARKER."""
    return {
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": f"Address {MARKER} politely"}]),
        "gen_ai.input.messages": json.dumps(chat_messages({"type": "text", "content": f"I am {MARKER}"}, role="user")),
        "gen_ai.output.messages": json.dumps(chat_messages({"type": "text", "content": f"Hello {MARKER}"})),
        "gen_ai.tool.call.arguments": json.dumps({"patient": MARKER}),
        "gen_ai.tool.call.result": json.dumps({"record": MARKER}),
        "gen_ai.prompt.0.content": MARKER,
        "gen_ai.prompt.0.role": "user",
        "gen_ai.completion.0.content": MARKER,
    }


def content_span(attributes: dict[str, Any] | None = None, **kwargs: Any) -> Span:
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.tool.name": "lookup",
        **content_attributes(),
        **(attributes or {}),
    }
    events = [
        ("gen_ai.content.prompt", {"gen_ai.prompt": MARKER}),
        ("gen_ai.content.completion", {"gen_ai.completion": MARKER}),
    ]
    return child("chat gpt-4o", attributes=attributes, events=events, **kwargs)


def test_message_content_is_kept_only_under_pii_fields() -> None:
    step = only(content_span()).step
    assert step["pii_fields"] == [
        "gen_ai.system_instructions",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.prompt",
        "gen_ai.completion",
        EVENTS_KEY,
    ]
    content = content_attributes()
    assert {key: step["inputs"][key] for key in ("gen_ai.system_instructions", "gen_ai.input.messages")} == {
        key: content[key] for key in ("gen_ai.system_instructions", "gen_ai.input.messages")
    }
    assert step["inputs"]["gen_ai.tool.call.arguments"] == content["gen_ai.tool.call.arguments"]
    assert step["outputs"]["gen_ai.tool.call.result"] == content["gen_ai.tool.call.result"]
    assert step["outputs"]["gen_ai.output.messages"] == content["gen_ai.output.messages"]
    # A family goes under its name: one pii field however long the conversation.
    assert step["inputs"]["gen_ai.prompt"] == {"gen_ai.prompt.0.content": MARKER, "gen_ai.prompt.0.role": "user"}
    assert step["outputs"]["gen_ai.completion"] == {"gen_ai.completion.0.content": MARKER}
    assert step["inputs"][EVENTS_KEY] == [{"name": "gen_ai.content.prompt", "attributes": {"gen_ai.prompt": MARKER}}]
    assert step["outputs"][EVENTS_KEY] == [
        {"name": "gen_ai.content.completion", "attributes": {"gen_ai.completion": MARKER}}
    ]

    # Everything outside the pii-listed keys is free of the marker; the summary names the model only.
    public = {key: value for key, value in step.items() if key not in ("inputs", "outputs")}
    public["inputs"] = {key: value for key, value in step["inputs"].items() if key not in step["pii_fields"]}
    public["outputs"] = {key: value for key, value in step["outputs"].items() if key not in step["pii_fields"]}
    assert MARKER not in json.dumps(public)
    assert step["summary_text"] == "Model call to gpt-4o"


def test_message_content_is_dropped_when_asked() -> None:
    result = only(content_span(), message_content="drop")
    assert MARKER not in repr(result)
    assert "pii_fields" not in result.step
    assert "outputs" not in result.step
    assert result.step["inputs"] == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.tool.name": "lookup",
    }


def test_message_content_of_a_root_span_that_is_no_call_goes_nowhere() -> None:
    root = content_span(parent_span_id="", attributes={"gen_ai.operation.name": "invoke_agent"})
    result = only(root)
    assert (result.opens_flow, result.step) == (True, {})
    assert MARKER not in repr(result)


def test_a_root_call_span_is_also_its_flows_step_with_its_content_encrypted() -> None:
    result = only(content_span(parent_span_id=""))
    assert result.opens_flow and result.flow["trigger_type"] == "chat"
    assert (result.step["kind"], result.step["model"]) == ("llm_prompt", "gpt-4o")
    assert "gen_ai.input.messages" in result.step["pii_fields"]


def test_an_unknown_message_content_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="message_content must be one of"):
        map_request(request(span()), message_content="plaintext")


def test_every_event_is_kept_whole_and_only_encrypted() -> None:
    events = [
        ("gen_ai.user.message", {"content": MARKER}),
        ("gen_ai.choice", {"index": 0, "message": MARKER}),
        ("exception", {"exception.type": "ValueError", "exception.message": MARKER}),
        ("custom", {"gen_ai.prompt": MARKER, "count": 1}),
    ]
    step = step_of(events=events)
    assert step["inputs"][EVENTS_KEY] == [
        {"name": "gen_ai.user.message", "attributes": {"content": MARKER}},
        {"name": "exception", "attributes": {"exception.type": "ValueError", "exception.message": MARKER}},
        {"name": "custom", "attributes": {"gen_ai.prompt": MARKER, "count": 1}},
    ]
    assert step["outputs"][EVENTS_KEY] == [{"name": "gen_ai.choice", "attributes": {"index": 0, "message": MARKER}}]
    assert step["pii_fields"] == [EVENTS_KEY]
    assert (step["outcome"], step["error_type"]) == ("error", "ValueError")


def test_an_attribute_named_like_the_events_key_stays_apart_from_the_events() -> None:
    step = step_of(attributes={EVENTS_KEY: "mine", "kept": 1}, events=[("gen_ai.user.message", {"content": "hi"})])
    assert step["inputs"] == {
        "otlp.attributes": {EVENTS_KEY: "mine", "kept": 1},
        EVENTS_KEY: [{"name": "gen_ai.user.message", "attributes": {"content": "hi"}}],
    }


def test_reasoning_parts_become_reasoning_content() -> None:
    messages = [
        {"role": "assistant", "parts": [{"type": "reasoning", "content": "First, check dose."}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "Then interactions."},
                {"type": "text", "content": "No interaction found."},
            ],
        },
    ]
    step = step_of(attributes={"gen_ai.output.messages": json.dumps(messages)})
    assert step["reasoning_content"] == "First, check dose.\n\nThen interactions."
    assert json.loads(step["outputs"]["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": []},
        {"role": "assistant", "parts": [{"type": "text", "content": "No interaction found."}]},
    ]
    assert "gen_ai.output.messages" in step["pii_fields"]


def test_reasoning_parts_of_an_otlp_array_attribute() -> None:
    messages = chat_messages({"type": "reasoning", "content": "Weigh both."}, {"type": "text", "content": "Done."})
    step = step_of(attributes={"gen_ai.output.messages": messages})  # an array of kvlists, not a JSON string
    assert step["reasoning_content"] == "Weigh both."
    assert step["outputs"]["gen_ai.output.messages"] == chat_messages({"type": "text", "content": "Done."})


def test_output_messages_that_are_not_json_are_kept_as_they_are() -> None:
    step = step_of(attributes={"gen_ai.output.messages": "plain words"})
    assert step["outputs"]["gen_ai.output.messages"] == "plain words"
    assert "reasoning_content" not in step


def test_reasoning_content_is_dropped_with_message_content() -> None:
    messages = chat_messages({"type": "reasoning", "content": MARKER})
    (result,) = mapped(child(attributes={"gen_ai.output.messages": json.dumps(messages)}), message_content="drop")
    assert MARKER not in repr(result)


# --- Other attributes -------------------------------------------------------------------


def test_remaining_attributes_of_every_value_type() -> None:
    attributes = {
        "text": "words",
        "flag": True,
        "count": -7,
        "big": 2**62,
        "ratio": 0.25,
        "not_a_number": math.nan,
        "infinite": math.inf,
        "minus_infinite": -math.inf,
        "raw": b"\x00\x01\xff",
        "list": [1, "two", 3.5, False, None],
        "object": {"a": {"b": [1, {"c": "d"}]}},
        "empty": None,
        "with_nul": "a\x00b",
        "key\x00with_nul": "v",
    }
    assert step_of(attributes=attributes)["inputs"]["otlp.attributes"] == {
        "text": "words",
        "flag": True,
        "count": -7,
        "big": 2**62,
        "ratio": 0.25,
        "not_a_number": "NaN",
        "infinite": "Infinity",
        "minus_infinite": "-Infinity",
        "raw": "AAH/",
        "list": [1, "two", 3.5, False, None],
        "object": {"a": {"b": [1, {"c": "d"}]}},
        "empty": None,
        "with_nul": "a\ufffdb",
        "key\ufffdwith_nul": "v",
    }


def test_values_nested_deeper_than_five_levels_are_kept_as_json_text() -> None:
    attributes = {
        "deep_list": [[[[[[1, 2]]]]]],
        "deep_object": {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}},
        "five_levels": [[[[[1]]]]],
    }
    assert step_of(attributes=attributes)["inputs"]["otlp.attributes"] == {
        "deep_list": [[[[["[1, 2]"]]]]],
        "deep_object": {"a": {"b": {"c": {"d": {"e": '{"f": 1}'}}}}},
        "five_levels": [[[[[1]]]]],
    }


def test_at_most_128_attributes_are_kept_in_clear_and_the_rest_encrypted() -> None:
    attributes: dict[str, Any] = {f"gen_ai.usage.n{index:03d}": index for index in range(200)}
    attributes["gen_ai.input.messages"] = "[]"
    step = step_of(attributes=attributes)
    clear = [key for key in step["inputs"] if key not in step["pii_fields"]]
    assert clear == [f"gen_ai.usage.n{index:03d}" for index in range(128)]
    assert list(step["inputs"]["otlp.attributes"]) == [f"gen_ai.usage.n{index:03d}" for index in range(128, 200)]
    assert step["pii_fields"] == ["otlp.attributes", "gen_ai.input.messages"]


def test_1000_attributes_are_allowed() -> None:
    step = step_of(attributes={f"attr.{index}": index for index in range(1000)})
    assert len(step["inputs"]["otlp.attributes"]) == 1000


@pytest.mark.parametrize("count", [1001, 10_000])
def test_more_than_1000_attributes_is_a_problem(count: int) -> None:
    (problem,) = problems_of(child(attributes={f"attr.{index}": index for index in range(count)}))
    assert problem == SpanProblem(
        TRACE_ID, CHILD_SPAN_ID, f"span {CHILD_SPAN_ID}: has {count} attributes; at most 1000"
    )


# --- Span problems ----------------------------------------------------------------------

POSITION = "resource_spans[0].scope_spans[0].spans[0]"


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        ({"trace_id": b""}, SpanProblem("", ROOT_SPAN_ID, f"span {ROOT_SPAN_ID}: trace_id must be 16 bytes, got 0")),
        (
            {"trace_id": bytes(range(1, 16))},
            SpanProblem("", ROOT_SPAN_ID, f"span {ROOT_SPAN_ID}: trace_id must be 16 bytes, got 15"),
        ),
        (
            {"trace_id": bytes(16)},
            SpanProblem("0" * 32, ROOT_SPAN_ID, f"span {ROOT_SPAN_ID}: trace_id must not be all zeros"),
        ),
        ({"span_id": b""}, SpanProblem(TRACE_ID, "", f"span {POSITION}: span_id must be 8 bytes, got 0")),
        ({"span_id": b"\x01" * 7}, SpanProblem(TRACE_ID, "", f"span {POSITION}: span_id must be 8 bytes, got 7")),
        ({"span_id": bytes(8)}, SpanProblem(TRACE_ID, "0" * 16, f"span {POSITION}: span_id must not be all zeros")),
        (
            {"parent_span_id": b"\x01\x02\x03"},
            SpanProblem(TRACE_ID, ROOT_SPAN_ID, f"span {ROOT_SPAN_ID}: parent_span_id must be empty or 8 bytes, got 3"),
        ),
    ],
)
def test_bad_ids_are_problems(ids: dict[str, Any], problem: SpanProblem) -> None:
    assert problems_of(span(**ids)) == [problem]


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ({"start": 0, "end": T0}, "start_time_unix_nano must be set, got 0"),
        ({"start": T0, "end": T0 - 1}, "end_time_unix_nano is before start_time_unix_nano"),
        ({"start": T0, "end": 0}, "end_time_unix_nano is before start_time_unix_nano"),
    ],
)
def test_bad_times_are_problems(times: dict[str, Any], message: str) -> None:
    assert problems_of(span(**times)) == [SpanProblem(TRACE_ID, ROOT_SPAN_ID, f"span {ROOT_SPAN_ID}: {message}")]


@pytest.mark.parametrize(
    ("parent", "attribute", "value", "message"),
    [
        (ROOT_SPAN_ID, "reasoning.kind", 5, "attribute reasoning.kind must be a string, got int"),
        (ROOT_SPAN_ID, "reasoning.summary_text", ["a"], "attribute reasoning.summary_text must be a string, got array"),
        (ROOT_SPAN_ID, "reasoning.confidence", "high", "attribute reasoning.confidence must be a number, got string"),
        (
            ROOT_SPAN_ID,
            "reasoning.latency_ms",
            None,
            "attribute reasoning.latency_ms must be a number, got an empty value",
        ),
        ("", "reasoning.trigger_type", True, "attribute reasoning.trigger_type must be a string, got bool"),
        ("", "reasoning.patient_id", b"\x01", "attribute reasoning.patient_id must be a string, got bytes"),
    ],
)
def test_a_reasoning_attribute_of_the_wrong_type_is_a_problem(
    parent: str, attribute: str, value: Any, message: str
) -> None:
    (problem,) = problems_of(span(span_id=CHILD_SPAN_ID, parent_span_id=parent, attributes={attribute: value}))
    assert problem.message == f"span {CHILD_SPAN_ID}: {message}"


def test_a_problem_span_does_not_stop_the_others() -> None:
    spans, problems = map_request(request(span(), child(span_id=bytes(8)), child("fine", span_id="eee19b7ec3c1b176")))
    assert [s.span_id for s in spans] == [ROOT_SPAN_ID, "eee19b7ec3c1b176"]
    assert [p.message for p in problems] == [
        "span resource_spans[0].scope_spans[0].spans[1]: span_id must not be all zeros"
    ]


def test_problems_across_resources_and_scopes_name_their_position() -> None:
    message = request(span())
    second = message.resource_spans.add()
    second.scope_spans.add()
    second.scope_spans.add().spans.append(span(span_id=b""))
    (problem,) = map_request(message)[1]
    assert problem.message == "span resource_spans[1].scope_spans[1].spans[0]: span_id must be 8 bytes, got 0"


def test_identical_duplicates_are_kept_once() -> None:
    assert len(mapped(span(), child(), child())) == 2


def test_duplicates_that_differ_are_problems() -> None:
    spans, problems = map_request(request(span(), child("first"), child("second")))
    assert [s.span_id for s in spans] == [ROOT_SPAN_ID]
    message = f"span {CHILD_SPAN_ID}: 2 spans in this request have this trace_id and span_id, with different content"
    assert problems == [SpanProblem(TRACE_ID, CHILD_SPAN_ID, message)] * 2


def test_the_same_span_id_in_another_trace_is_not_a_duplicate() -> None:
    assert len(mapped(span(), span(trace_id=OTHER_TRACE_ID))) == 2


# --- What the serializers see -----------------------------------------------------------


def awkward_spans() -> list[Span]:
    """Spans whose derived values need cleaning: control characters, odd names, lengths past the limits."""
    weird = "  \x00chat\n\u200b\u202e with\tcontrol\u2028 " + "x" * 3000
    return [
        span(
            weird,
            attributes={
                "gen_ai.operation.name": "Weird Op!",
                "gen_ai.agent.name": "Médecin Agent!!",
                "session.id": "s",
            },
            status="error",
            status_message="Ünïcode ☃ failure\n" * 30,
        ),
        child(
            weird,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "\x00tool\u202e" * 100,
                "gen_ai.agent.name": "___",
                "key\x00": "value\x00",
                "deep": [[[[[[[[{"a": "b\x00"}]]]]]]]],
            },
        ),
        child(
            weird,
            span_id="eee19b7ec3c1b176",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.response.model": "m\x00" * 150,
                "gen_ai.output.messages": json.dumps(
                    chat_messages({"type": "reasoning", "content": "r\x00" * 10}, {"type": "text", "content": "t\x00"})
                ),
                **{f"gen_ai.prompt.{index}.content": "p" for index in range(300)},
            },
        ),
        child(weird, span_id="eee19b7ec3c1b177", attributes={"gen_ai.operation.name": "embeddings"}),
        child("", span_id="eee19b7ec3c1b178", duration_ms=0),
        span(
            "\u2028",
            span_id="eee19b7ec3c1b179",
            parent_span_id=ROOT_SPAN_ID,
            attributes={"gen_ai.operation.name": "invoke_agent"},
            status="error",
        ),
    ]


def test_every_derived_value_passes_the_serializers() -> None:
    spans, problems = map_request(request(*awkward_spans(), service_name="my service/1"))
    assert problems == []
    assert [s.opens_flow for s in spans] == [True, False, False, False, False, False]
    for result in spans:
        if result.flow:
            flow, close = FlowCreateSerializer(data=result.flow), FlowCloseSerializer(data=result.close)
            assert flow.is_valid(), flow.errors
            assert close.is_valid(), close.errors
        if not result.step:
            continue
        step = StepCreateSerializer(data=result.step)
        assert step.is_valid(), step.errors
        assert datetime.fromisoformat(result.step["started_at"]) == result.start
        if "model" in result.step:
            assert 0 < len(result.step["model"]) <= 200
            plain_text_validator(result.step["model"])
    assert spans[0].flow["trigger_type"] == "Weird_Op"
    assert spans[0].flow["agent"] == "M_decin_Agent"


# --- A trace from the OpenTelemetry SDK -------------------------------------------------


def test_a_trace_from_the_opentelemetry_sdk() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "triage-service"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.reasoning")
    output = chat_messages({"type": "reasoning", "content": "Check the dose."}, {"type": "text", "content": MARKER})
    with tracer.start_as_current_span(
        "invoke_agent triage", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage"}
    ) as root:
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(chat_messages({"type": "text", "content": MARKER}, role="user")),
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.usage.output_tokens": 45,
                "gen_ai.request.stop_sequences": ["\n\n"],
                "gen_ai.request.temperature": 0.2,
            },
        ) as chat:
            chat.set_attribute("gen_ai.output.messages", json.dumps(output))
            chat.set_attribute("gen_ai.response.model", "gpt-4o-2024-08-06")
        with tracer.start_as_current_span(
            "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
        ) as tool:
            tool.set_status(SdkStatus(StatusCode.ERROR, "timeout"))
        root.set_status(SdkStatus(StatusCode.ERROR, "Tool failed"))
    provider.shutdown()
    finished = exporter.get_finished_spans()
    body = encode_spans(finished).SerializeToString()

    spans, problems = map_request(decode_request(body, PROTOBUF))

    assert problems == []
    by_name = {s.name: s for s in spans}
    flow, llm, tool_call = by_name["invoke_agent triage"], by_name["chat gpt-4o"], by_name["execute_tool lookup"]
    root_context = root.get_span_context()
    assert (flow.trace_id, flow.span_id) == (f"{root_context.trace_id:032x}", f"{root_context.span_id:016x}")
    assert flow.opens_flow
    assert flow.flow == {
        "trigger_type": "invoke_agent",
        "trigger_ref": "invoke_agent triage",
        "trace_id": flow.trace_id,
        "agent": "triage",
    }
    # The status message ("Tool failed") is content: the abort names no more than that it failed.
    assert flow.close == {"flow_state": "aborted", "abort_reason": "span_error"}
    assert (llm.parent_span_id, tool_call.parent_span_id) == (flow.span_id, flow.span_id)
    sdk_chat = next(s for s in finished if s.name == "chat gpt-4o")
    assert sdk_chat.start_time is not None
    assert sdk_chat.end_time is not None
    assert llm.start == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=sdk_chat.start_time // 1000)
    assert llm.step["latency_ms"] == (sdk_chat.end_time - sdk_chat.start_time) // 1_000_000
    assert {key: llm.step[key] for key in ("kind", "agent", "summary_text", "model", "input_tokens")} == {
        "kind": "llm_prompt",
        "agent": "triage-service",
        "summary_text": "Model call to gpt-4o",
        "model": "gpt-4o-2024-08-06",
        "input_tokens": 120,
    }
    assert llm.step["reasoning_content"] == "Check the dose."
    assert llm.step["inputs"]["gen_ai.request.stop_sequences"] == ["\n\n"]  # free text: encrypted
    assert llm.step["inputs"]["gen_ai.request.temperature"] == 0.2
    assert llm.step["pii_fields"] == [
        "gen_ai.input.messages",
        "gen_ai.request.stop_sequences",
        "gen_ai.output.messages",
    ]
    assert (tool_call.step["outcome"], tool_call.step["error_type"]) == ("error", "span_error")
    assert (tool_call.step["kind"], tool_call.step["summary_text"]) == ("tool_call", "Called tool lookup")
    assert MARKER not in repr([flow, tool_call])


@settings(max_examples=300, deadline=None)
@given(trace_id=st.text(), span_id=st.text())
def test_a_spans_id_is_the_uuid5_of_its_trace_and_span_ids(trace_id: str, span_id: str) -> None:
    # traces.span_uuid builds the UUID without uuid.uuid5's checks: the same value, version and variant.
    made, expected = span_uuid(trace_id, span_id), uuid.uuid5(SPAN_NAMESPACE, f"{trace_id}:{span_id}")
    assert (made, str(made), hash(made), made.version, made.variant) == (
        expected,
        str(expected),
        hash(expected),
        5,
        uuid.RFC_4122,
    )
