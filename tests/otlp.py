"""Building OTLP/HTTP trace requests for tests: spans from plain Python values, bodies in both encodings.

``span(...)`` makes one span (hex ids, attributes as a dict of Python values, times in ns or
as a duration); ``request(*spans, service_name=...)`` wraps spans in an
ExportTraceServiceRequest; ``protobuf_body`` and ``json_body`` encode it as a client sends it
(OTLP JSON: camelCase keys, hex ids, enums as integers).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TRACE_ID = "5b8efff798038103d269b633813fc60c"
ROOT_SPAN_ID = "eee19b7ec3c1b174"
CHILD_SPAN_ID = "eee19b7ec3c1b175"
# 2023-11-14T22:13:20Z in Unix nanoseconds.
T0 = 1_700_000_000_000_000_000
MS = 1_000_000

STATUS_CODES = {"unset": Status.STATUS_CODE_UNSET, "ok": Status.STATUS_CODE_OK, "error": Status.STATUS_CODE_ERROR}


def any_value(value: object) -> AnyValue:
    """None → an empty AnyValue; bool, int, float, str, bytes, list/tuple, dict → the matching kind."""
    if isinstance(value, AnyValue):
        return value
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[any_value(item) for item in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=key_values(value)))
    raise TypeError(f"no OTLP value for {type(value).__name__}")


def key_values(attributes: Mapping[str, object]) -> list[KeyValue]:
    return [KeyValue(key=key, value=any_value(value)) for key, value in attributes.items()]


def _id(value: str | bytes) -> bytes:
    return bytes.fromhex(value) if isinstance(value, str) else value


def span(
    name: str = "span",
    *,
    trace_id: str | bytes = TRACE_ID,
    span_id: str | bytes = ROOT_SPAN_ID,
    parent_span_id: str | bytes = b"",
    start: int = T0,
    duration_ms: int = 1500,
    end: int | None = None,
    attributes: Mapping[str, object] | None = None,
    events: Sequence[tuple[str, Mapping[str, object]]] = (),
    links: Sequence[tuple[str, str]] = (),
    status: str = "unset",
    status_message: str = "",
    kind: int = Span.SPAN_KIND_INTERNAL,
) -> Span:
    """A span; ids as hex strings (or raw bytes, to make bad ones), ``end`` defaults to start + duration.

    ``events`` are (name, attributes) pairs, ``links`` (trace id, span id) pairs; ``status`` is
    "unset", "ok" or "error".
    """
    return Span(
        trace_id=_id(trace_id),
        span_id=_id(span_id),
        parent_span_id=_id(parent_span_id),
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=start,
        end_time_unix_nano=start + duration_ms * MS if end is None else end,
        attributes=key_values(attributes or {}),
        events=[
            Span.Event(name=event_name, time_unix_nano=start, attributes=key_values(event_attributes))
            for event_name, event_attributes in events
        ],
        links=[Span.Link(trace_id=_id(link_trace), span_id=_id(link_span)) for link_trace, link_span in links],
        status=Status(code=STATUS_CODES[status], message=status_message),
    )


def child(name: str = "child", *, span_id: str | bytes = CHILD_SPAN_ID, **kwargs: Any) -> Span:
    """A span whose parent is the root span (``ROOT_SPAN_ID``): a step."""
    kwargs.setdefault("parent_span_id", ROOT_SPAN_ID)
    return span(name, span_id=span_id, **kwargs)


GRANDCHILD_SPAN_ID = "eee19b7ec3c1b176"


def chat(
    span_id: str = CHILD_SPAN_ID, parent: str = ROOT_SPAN_ID, attributes: Mapping[str, object] | None = None
) -> Span:
    """A GenAI chat span (a model call) under ``parent``."""
    return span(
        "chat gpt-4o",
        span_id=span_id,
        parent_span_id=parent,
        start=T0 + 10 * MS,
        duration_ms=800,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 96,
            **(attributes or {}),
        },
    )


def tool(span_id: str = GRANDCHILD_SPAN_ID, parent: str = CHILD_SPAN_ID) -> Span:
    """A GenAI tool span under ``parent``."""
    return span(
        "execute_tool lookup",
        span_id=span_id,
        parent_span_id=parent,
        start=T0 + 900 * MS,
        duration_ms=40,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_guideline"},
    )


def request(
    *spans: Span,
    service_name: str | None = "test-agent",
    resource_attributes: Mapping[str, object] | None = None,
    scope_name: str = "tests.otlp",
) -> ExportTraceServiceRequest:
    """One resource (with ``service.name`` unless None) and one scope holding ``spans``."""
    attributes = dict(resource_attributes or {})
    if service_name is not None:
        attributes["service.name"] = service_name
    message = ExportTraceServiceRequest()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.extend(key_values(attributes))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = scope_name
    scope_spans.spans.extend(spans)
    return message


def protobuf_body(message: ExportTraceServiceRequest) -> bytes:
    return bytes(message.SerializeToString())


def json_body(message: ExportTraceServiceRequest) -> bytes:
    """OTLP JSON as an exporter sends it: camelCase, ids as hex (protobuf JSON would use base64), enums as ints."""
    document = json_format.MessageToDict(message, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for item in scope_spans.get("spans", []):
                for holder in [item, *item.get("links", [])]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in holder:
                            holder[key] = base64.b64decode(holder[key]).hex()
    return json.dumps(document).encode()
