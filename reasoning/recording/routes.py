"""The bulk write routes: ``POST /api/reasoning/ingest`` (whole flows as JSON) and
``POST /v1/traces`` (OpenTelemetry OTLP/HTTP). Thin: validate, call ``reasoning.recording.ingest``
(through ``reasoning.recording.traces`` for spans), shape the per-item answer."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import ERRORS, ApiView, flat_errors
from core.compiled_serializers import one_time_zone
from core.errors import ServiceError
from core.serializers import validated
from reasoning.auth import CanWrite, changes_only_own_flows
from reasoning.recording import ingest, otlp, traces
from reasoning.recording.serializers import (
    MAX_INGEST_FLOWS,
    MAX_INGEST_STEPS,
    IngestItemSerializer,
    IngestResultSerializer,
    IngestSerializer,
    OtlpExportResponseSerializer,
    OtlpStatusSerializer,
)

_CREATE_ONLY = ("steps", "close", "id")


def _error_body(error: ServiceError, where: str) -> dict[str, list[str]]:
    return {error.field or where: [error.detail]}


def _check_envelope(data: Any) -> list[Any]:
    """The body must be ``{"flows": [...]}`` with 1 to 100 items and at most 1,000 steps in all."""
    if not isinstance(data, dict):
        raise ValidationError({"detail": 'Expected a JSON object: {"flows": [...]}.'})
    unknown = sorted(set(data) - {"flows"})
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in unknown})
    flows = data.get("flows")
    if not isinstance(flows, list):
        raise ValidationError({"flows": ["Required: a list of flows."]})
    if not 1 <= len(flows) <= MAX_INGEST_FLOWS:
        raise ValidationError({"flows": [f"Send 1 to {MAX_INGEST_FLOWS} flows per request (got {len(flows)})."]})
    total = sum(len(item["steps"]) for item in flows if isinstance(item, dict) and isinstance(item.get("steps"), list))
    if total > MAX_INGEST_STEPS:
        raise ValidationError({"flows": [f"At most {MAX_INGEST_STEPS} steps in all per request (got {total})."]})
    return flows


class IngestView(ApiView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="ingest",
        summary="Record whole flows in one request",
        description=f"Needs `reasoning.write`. Up to {MAX_INGEST_FLOWS} flows and {MAX_INGEST_STEPS} steps in "
        f"all; the body may be up to INGEST_MAX_BYTES ({settings.INGEST_MAX_BYTES // 1_048_576} MiB by default, "
        "also after `Content-Encoding: gzip` is undone). Each item opens a flow (its fields as "
        "`POST /api/reasoning/flows` takes them, with a client-chosen `id`), appends `steps` in order (as the "
        "step route takes them; parents by id, earlier in the item or already stored) and optionally `close`s it "
        "(as the `PATCH` takes it). An item with only `id`, `steps` and `close` appends to (or closes) a stored "
        "active flow, so a long-running agent can send a flow in pieces.\n\n"
        "Each item is all or none and items are independent: the answer lists every item as `created`, "
        "`replayed` (the same ids with the same bodies were already stored: safe to retry) or `rejected` with "
        "its field errors named from the body's root (`flows[3].steps[2].summary_text`), so a client resends "
        "only what failed. 200 when no item was rejected, 207 when some were. The same validation, PII split, "
        "encryption, audit events (one per flow started, step created, flow closed) and close (summary guard, "
        "radar snapshot, pathway extraction, backlog producers) as the single routes. A body that is not "
        '`{"flows": [...]}` is a plain 400; too large, 413; not JSON, 415.',
        request=IngestSerializer,
        responses={
            200: IngestResultSerializer,
            207: OpenApiResponse(IngestResultSerializer, description="Some items were rejected (see `errors`)."),
            413: OpenApiResponse(OpenApiTypes.OBJECT, description="The body is larger than INGEST_MAX_BYTES."),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "A whole flow: open, two steps, close",
                request_only=True,
                value={
                    "flows": [
                        {
                            "id": "7d0c8d8e-3f53-4a35-9f3e-0d5f3c6b9a11",
                            "trigger_type": "user_question",
                            "trigger_ref": "benchmark/run-7/case-12",
                            "agent": "researcher",
                            "steps": [
                                {
                                    "id": "1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b",
                                    "kind": "retrieval",
                                    "agent": "researcher",
                                    "summary_text": "Retrieved the current guideline",
                                    "confidence": 0.9,
                                },
                                {
                                    "kind": "llm_prompt",
                                    "agent": "researcher",
                                    "summary_text": "Asked the model to weigh the guideline",
                                    "parent_step_id": "1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b",
                                    "model": "gpt-4o-2024-08-06",
                                    "input_tokens": 812,
                                    "output_tokens": 96,
                                },
                            ],
                            "close": {"flow_state": "completed", "outcome_type": "recommendation_delivered"},
                        }
                    ]
                },
            ),
            OpenApiExample(
                "One created, one rejected",
                response_only=True,
                status_codes=["207"],
                value={
                    "flows": [
                        {
                            "index": 0,
                            "id": "7d0c8d8e-3f53-4a35-9f3e-0d5f3c6b9a11",
                            "status": "created",
                            "flow_state": "completed",
                            "step_count": 2,
                            "errors": {},
                        },
                        {
                            "index": 1,
                            "id": "0b8f7a36-9d1e-4c47-8a51-2f0d0f1c6e22",
                            "status": "rejected",
                            "flow_state": None,
                            "step_count": None,
                            "errors": {"flows[1].steps[0].summary_text": ["This field is required."]},
                        },
                    ],
                    "created": 1,
                    "replayed": 0,
                    "rejected": 1,
                },
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        raw_items = _check_envelope(request.data)
        answers: list[dict[str, Any] | None] = [None] * len(raw_items)
        items: list[ingest.Item] = []
        positions: list[int] = []
        with one_time_zone():  # the items' date-times in one time zone, read once
            for index, raw in enumerate(raw_items):
                where = f"flows[{index}]"
                try:
                    fields = validated(IngestItemSerializer, raw)
                except ValidationError as exc:
                    answers[index] = _rejected(index, _echoed_id(raw), flat_errors(exc.detail, where))
                    continue
                flow_id = fields.pop("id", None)
                steps = fields.pop("steps", [])
                close = fields.pop("close", None)
                # The agent's own times (not part of the open request a replay compares).
                started_at = fields.pop("started_at", None)
                ended_at = close.pop("ended_at", None) if close else None
                create = fields if "trigger_type" in fields else None
                items.append(
                    ingest.Item(
                        flow_id=flow_id,
                        create=create,
                        steps=steps,
                        close=close,
                        where=f"{where}.",
                        created_at=started_at,
                        closed_at=ended_at,
                    )
                )
                positions.append(index)
        written = ingest.write(items, actor=actor_for(request), opener_only=changes_only_own_flows(request))
        for index, item, result in zip(positions, items, written, strict=True):
            if result.error is not None:
                answers[index] = _rejected(index, item.flow_id, _error_body(result.error, f"flows[{index}]"))
            else:
                assert result.flow is not None
                answers[index] = {
                    "index": index,
                    "id": result.flow.pk,
                    "status": result.status,
                    "flow_state": result.flow.flow_state,
                    "step_count": result.flow.step_count,
                    "errors": {},
                }
        counts = {"created": 0, "replayed": 0, "rejected": 0}
        for answer in answers:
            assert answer is not None
            counts[answer["status"]] += 1
        return Response(
            {"flows": answers, **counts},
            status=status.HTTP_207_MULTI_STATUS if counts["rejected"] else status.HTTP_200_OK,
        )


def _echoed_id(raw: Any) -> uuid.UUID | None:
    """The id a rejected item gave, when it is one."""
    try:
        return uuid.UUID(raw["id"]) if isinstance(raw, dict) and isinstance(raw.get("id"), str) else None
    except ValueError:
        return None


def _rejected(index: int, flow_id: Any, errors: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "index": index,
        "id": flow_id,
        "status": "rejected",
        "flow_state": None,
        "step_count": None,
        "errors": errors,
    }


# --- POST /v1/traces -------------------------------------------------------------------------

_OTLP_MEDIA_TYPES = {otlp.PROTOBUF: "protobuf", otlp.JSON: "json"}
_MAX_PROBLEMS_IN_MESSAGE = 5


def _listed(problems: list[otlp.SpanProblem]) -> str:
    """The first problems' messages; the rest counted."""
    shown = "; ".join(problem.message for problem in problems[:_MAX_PROBLEMS_IN_MESSAGE])
    more = len(problems) - _MAX_PROBLEMS_IN_MESSAGE
    return f"{shown}; and {more} more" if more > 0 else shown


def _otlp_encoding(content_type: str) -> str:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return _OTLP_MEDIA_TYPES.get(media_type, "json")


def _otlp_answer(message: Any, encoding: str, status_code: int) -> HttpResponse:
    if encoding == "protobuf":
        return HttpResponse(message.SerializeToString(), status=status_code, content_type=otlp.PROTOBUF)
    return HttpResponse(json_format.MessageToJson(message, indent=None), status=status_code, content_type=otlp.JSON)


# The OTLP JSON request as the server reads it (reasoning.recording.otlp._decode_json): an object whose only top-level
# field is `resourceSpans` (or its proto name); what the spans hold is the OTLP specification's.
_OTLP_RESOURCE_SPANS = {
    "type": "array",
    "items": {"type": "object", "description": "An OTLP `ResourceSpans`: `resource` and `scopeSpans`."},
}
OTLP_JSON_REQUEST = {
    "type": "object",
    "properties": {"resourceSpans": _OTLP_RESOURCE_SPANS, "resource_spans": _OTLP_RESOURCE_SPANS},
    "additionalProperties": False,
    "description": "An OTLP `ExportTraceServiceRequest` in the OTLP JSON encoding (ids as hex strings).",
}


class OtlpTracesView(ApiView):
    """OTLP/HTTP traces. Errors are answered as ``google.rpc.Status`` in the request's encoding,
    as the OTLP/HTTP specification asks."""

    permission_classes = [CanWrite]
    # The body is decoded here (reasoning.recording.otlp), not by DRF; the middleware has undone gzip.
    parser_classes: list[Any] = []
    openapi_request_body_required = True  # without one: 415 (core.api_views.AutoSchema)

    @extend_schema(
        operation_id="otlp_traces",
        summary="Record OpenTelemetry traces (OTLP/HTTP)",
        description="Needs `reasoning.write`, as `Authorization: Bearer <token>` (set "
        "`OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>`). The body is an OTLP "
        "`ExportTraceServiceRequest`, as `application/x-protobuf` or `application/json` (the OTLP JSON "
        "encoding), optionally `Content-Encoding: gzip`. A root span (or an `invoke_agent` span) opens and closes "
        "a flow; its descendants become steps; spans whose parents have not arrived are stored and attached "
        "when they come (docs/ingest.md has the mapping). The answer is an `ExportTraceServiceResponse`; spans "
        "that could not be stored are counted in `partial_success.rejected_spans`, with the reasons in "
        "`error_message`. 400 for a body that is not an OTLP traces request, 401/403 for the token, 413 above "
        "INGEST_MAX_BYTES, 415 for another content type, 429 (with `Retry-After`, which OTLP exporters honour) past "
        "the token's write rate limit; error bodies are a `google.rpc.Status`.",
        request={otlp.PROTOBUF: OpenApiTypes.BINARY, otlp.JSON: OTLP_JSON_REQUEST},
        responses={
            (200, otlp.PROTOBUF): OpenApiResponse(
                OpenApiTypes.BINARY, description="ExportTraceServiceResponse (protobuf)."
            ),
            (200, otlp.JSON): OpenApiResponse(
                OtlpExportResponseSerializer, description="ExportTraceServiceResponse (OTLP JSON)."
            ),
            (400, otlp.JSON): OpenApiResponse(OtlpStatusSerializer, description="Not an OTLP traces request."),
            (401, otlp.JSON): OpenApiResponse(OtlpStatusSerializer, description="Missing or invalid token."),
            (403, otlp.JSON): OpenApiResponse(OtlpStatusSerializer, description="The token lacks reasoning.write."),
            (413, otlp.JSON): OpenApiResponse(OtlpStatusSerializer, description="Larger than INGEST_MAX_BYTES."),
            (415, otlp.JSON): OpenApiResponse(OtlpStatusSerializer, description="Not protobuf or OTLP JSON."),
            (429, otlp.JSON): OpenApiResponse(
                OtlpStatusSerializer, description="Past the token's write rate limit: see `Retry-After`."
            ),
        },
        examples=[
            OpenApiExample(
                "One agent turn (OTLP JSON)",
                request_only=True,
                media_type=otlp.JSON,
                value={
                    "resourceSpans": [
                        {
                            "resource": {
                                "attributes": [{"key": "service.name", "value": {"stringValue": "triage-agent"}}]
                            },
                            "scopeSpans": [
                                {
                                    "spans": [
                                        {
                                            "traceId": "5b8efff798038103d269b633813fc60c",
                                            "spanId": "eee19b7ec3c1b174",
                                            "name": "invoke_agent triage",
                                            "startTimeUnixNano": "1764579600000000000",
                                            "endTimeUnixNano": "1764579601500000000",
                                            "attributes": [
                                                {
                                                    "key": "gen_ai.operation.name",
                                                    "value": {"stringValue": "invoke_agent"},
                                                }
                                            ],
                                        },
                                        {
                                            "traceId": "5b8efff798038103d269b633813fc60c",
                                            "spanId": "eee19b7ec3c1b175",
                                            "parentSpanId": "eee19b7ec3c1b174",
                                            "name": "chat gpt-4o",
                                            "startTimeUnixNano": "1764579600100000000",
                                            "endTimeUnixNano": "1764579601200000000",
                                            "attributes": [
                                                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                                {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
                                                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "812"}},
                                            ],
                                        },
                                    ]
                                }
                            ],
                        }
                    ]
                },
            ),
            OpenApiExample(
                "Some spans rejected",
                response_only=True,
                media_type=otlp.JSON,
                value={
                    "partialSuccess": {
                        "rejectedSpans": "1",
                        "errorMessage": "1 span rejected: span eee19b7ec3c1b175: reasoning.summary_text: "
                        "Ensure this field has no more than 280 characters.",
                    }
                },
            ),
        ],
    )
    def post(self, request: Request) -> HttpResponse:
        return export_spans(
            request._request.body,
            request.content_type or "",
            actor=actor_for(request),
            opener_only=changes_only_own_flows(request),
        )

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(response, Response):
            return otlp_refusal(response, request.content_type or "")
        return super().finalize_response(request, response, *args, **kwargs)


def export_spans(body: bytes, content_type: str, *, actor: str, opener_only: bool) -> HttpResponse:
    """``POST /v1/traces``'s answer to a caller that may write: the body decoded, mapped and
    recorded; an ``ExportTraceServiceResponse`` (or a ``google.rpc.Status`` for a body that is not
    one), in the request's encoding. The view's, and the hot path's (``reasoning.recording.hot_writes``)."""
    encoding = _otlp_encoding(content_type)
    try:
        decoded = otlp.decode_request(body, content_type)
    except otlp.UnsupportedContentType as exc:
        return _otlp_answer(Status(code=3, message=str(exc)), encoding, status.HTTP_415_UNSUPPORTED_MEDIA_TYPE)
    except otlp.OtlpBodyError as exc:
        return _otlp_answer(Status(code=3, message=str(exc)), encoding, status.HTTP_400_BAD_REQUEST)
    if (count := otlp.span_count(decoded)) > otlp.MAX_SPANS_PER_REQUEST:
        message = (
            f"resource_spans: {count} spans in one request; at most {otlp.MAX_SPANS_PER_REQUEST} are accepted "
            "per request (send smaller batches: OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512 by default)"
        )
        return _otlp_answer(Status(code=3, message=message), encoding, status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    spans, problems = otlp.map_request(decoded, message_content=settings.OTLP_MESSAGE_CONTENT)
    outcome = traces.record_spans(spans, actor=actor, opener_only=opener_only)
    everything = [*problems, *outcome.rejected]
    rejected = [problem for problem in everything if not problem.stored]
    # Warnings: a value refused from a span that was stored (a token count out of range), another
    # writer's pending span left out of a flow of this caller's.
    refused = [problem for problem in everything if problem.stored]
    answer = ExportTraceServiceResponse()
    messages = []
    if rejected:
        noun = "span" if len(rejected) == 1 else "spans"
        messages.append(f"{len(rejected)} {noun} rejected: {_listed(rejected)}")
        answer.partial_success.rejected_spans = len(rejected)
    if refused:
        noun = "warning" if len(refused) == 1 else "warnings"
        messages.append(f"{len(refused)} {noun}: {_listed(refused)}")
    if messages:
        answer.partial_success.error_message = "; ".join(messages)
    return _otlp_answer(answer, encoding, status.HTTP_200_OK)


def otlp_refusal(response: Response, content_type: str) -> HttpResponse:
    """An error DRF produced (401, 403, 405, 429, ...) as OTLP answers it: the same status and
    headers, the message as a ``google.rpc.Status`` in the request's encoding."""
    data = response.data if isinstance(response.data, dict) else {}
    message = str(data["detail"]) if "detail" in data else _described(data)
    answer = _otlp_answer(
        Status(code=_RPC_CODES.get(response.status_code, 2), message=message),
        _otlp_encoding(content_type),
        response.status_code,
    )
    for header in ("WWW-Authenticate", "Retry-After", "Allow"):
        if header in response:
            answer[header] = response[header]
    return answer


def _described(errors: Any) -> str:
    """Field errors as one line naming each field: ``colour: Unknown query parameter. …``."""
    return "; ".join(f"{name}: {' '.join(messages)}" for name, messages in flat_errors(errors).items()) or "error"


# google.rpc.Code for an HTTP status (UNKNOWN otherwise).
_RPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 405: 12, 413: 3, 415: 3, 429: 8, 503: 14}
