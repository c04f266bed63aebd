"""POST /v1/traces: OpenTelemetry traces (OTLP/HTTP) become flows and steps, through the same write path."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.jobs import decay_stale_flows
from reasoning.models import PendingSpan, ReasoningFlow, ReasoningStep
from reasoning.recording.traces import span_uuid
from tests import otlp
from tests.otlp import chat, tool

pytestmark = pytest.mark.django_db

URL = "/v1/traces"
TRACE = otlp.TRACE_ID
ROOT, CHILD = otlp.ROOT_SPAN_ID, otlp.CHILD_SPAN_ID
GRANDCHILD = otlp.GRANDCHILD_SPAN_ID
MARKER = "Jane-Example-MRN-7781"


def send(client: APIClient, *spans: Span, encoding: str = "protobuf", **kwargs: Any) -> ExportTraceServiceResponse:
    message = otlp.request(*spans, **kwargs)
    response = post(client, message, encoding)
    assert response.status_code == 200, response.content
    return answer_of(response)


def post(client: APIClient, message: ExportTraceServiceRequest, encoding: str = "protobuf") -> Any:
    if encoding == "protobuf":
        return client.post(URL, otlp.protobuf_body(message), content_type="application/x-protobuf")
    return client.post(URL, otlp.json_body(message), content_type="application/json")


def answer_of(response: Any) -> ExportTraceServiceResponse:
    answer = ExportTraceServiceResponse()
    if response["Content-Type"] == "application/json":
        from google.protobuf import json_format

        json_format.Parse(response.content, answer)
    else:
        answer.ParseFromString(response.content)
    return answer


def status_of(response: Any) -> Status:
    status = Status()
    status.ParseFromString(response.content)
    return status


def agent_root(**kwargs: Any) -> Span:
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage", "session.id": "s-1"}
    return otlp.span("invoke_agent triage", attributes={**attributes, **kwargs.pop("attributes", {})}, **kwargs)


def steps_in_order(flow: ReasoningFlow) -> list[ReasoningStep]:
    return list(ReasoningStep.objects.filter(flow=flow).order_by("started_at", "position"))


# --- Mapping --------------------------------------------------------------------------------------


def test_an_agent_turn_becomes_a_closed_flow_with_its_steps(agent: APIClient) -> None:
    answer = send(agent, tool(), chat(), agent_root())

    assert not answer.HasField("partial_success")
    flow = ReasoningFlow.objects.get()
    assert flow.pk == span_uuid(TRACE, ROOT)
    assert (flow.trigger_type, flow.trigger_ref, flow.agent, flow.session_id) == (
        "invoke_agent",
        "invoke_agent triage",
        "triage",
        "s-1",
    )
    assert (flow.trace_id, flow.root_span_id, flow.flow_state, flow.outcome_type) == (
        TRACE,
        ROOT,
        "completed",
        "span_completed",
    )
    assert flow.created_at == datetime.fromtimestamp(otlp.T0 / 1e9, UTC)
    assert flow.closed_at == flow.created_at + timedelta(milliseconds=1500)
    model_call, lookup = steps_in_order(flow)
    assert (model_call.kind, model_call.summary_text, model_call.parent_step_id) == (
        "llm_prompt",
        "Model call to gpt-4o",  # the dated snapshot is the model field's, not the summary's
        None,
    )
    assert (model_call.model, model_call.input_tokens, model_call.output_tokens) == ("gpt-4o-2024-08-06", 812, 96)
    # A step that names no agent is its enclosing agent's, not the service's.
    assert (model_call.latency_ms, model_call.span_id, model_call.agent) == (800, CHILD, "triage")
    assert (lookup.kind, lookup.summary_text, lookup.parent_step_id) == (
        "tool_call",
        "Called tool lookup_guideline",
        model_call.pk,
    )
    assert flow.step_count == 2
    events = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert [e for e in events if e.startswith(("reasoning.flow", "reasoning.step"))] == [
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.step.created",
        "reasoning.flow.completed",
    ]


def test_reasoning_attributes_override_the_generated_fields(agent: APIClient) -> None:
    root = agent_root(
        attributes={
            "reasoning.trigger_type": "user_question",
            "reasoning.trigger_ref": "case/12",
            "reasoning.outcome_type": "recommendation_delivered",
        }
    )
    step = chat(
        attributes={
            "reasoning.kind": "evidence_review",
            "reasoning.summary_text": "Weighed the guideline against the history",
            "reasoning.confidence": 0.91,
            "reasoning.latency_ms": 12,
            "reasoning.llm_call_log_ref": "llm-77",
        }
    )

    send(agent, step, root)

    flow = ReasoningFlow.objects.get()
    assert (flow.trigger_type, flow.trigger_ref, flow.outcome_type) == (
        "user_question",
        "case/12",
        "recommendation_delivered",
    )
    (stored,) = steps_in_order(flow)
    assert (stored.kind, stored.summary_text, stored.confidence, stored.latency_ms, stored.llm_call_log_ref) == (
        "evidence_review",
        "Weighed the guideline against the history",
        0.91,
        12,
        "llm-77",
    )
    assert flow.outcome_confidence == 0.91


def test_an_error_status_aborts_the_flow_with_a_label_safe_reason(agent: APIClient) -> None:
    root = agent_root(
        status="error", status_message=f"Tool timed out for {MARKER}", attributes={"error.type": "ToolTimeout"}
    )
    send(agent, chat(), root)

    flow = ReasoningFlow.objects.get()
    # The status message is content; the error's type names the abort.
    assert (flow.flow_state, flow.abort_reason) == ("aborted", "tooltimeout")
    assert MARKER not in json.dumps(list(ReasoningFlow.objects.values()), default=str)


def test_a_nested_agent_opens_its_own_flow_with_the_same_trace_id(agent: APIClient) -> None:
    sub_agent = otlp.span(
        "invoke_agent researcher",
        span_id="aaaaaaaaaaaaaaa1",
        parent_span_id=CHILD,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
    )
    sub_step = tool(span_id="aaaaaaaaaaaaaaa2", parent="aaaaaaaaaaaaaaa1")

    send(agent, sub_step, sub_agent, chat(), agent_root())

    flows = {flow.agent: flow for flow in ReasoningFlow.objects.filter(trace_id=TRACE)}
    assert set(flows) == {"triage", "researcher"}
    assert [s.kind for s in steps_in_order(flows["triage"])] == ["llm_prompt"]
    assert [s.kind for s in steps_in_order(flows["researcher"])] == ["tool_call"]


def wrapper_root(**kwargs: Any) -> Span:
    """A root span that is no agent and no call: a workflow around the run."""
    return otlp.span("workflow triage_workflow", attributes={"traceloop.span.kind": "workflow"}, **kwargs)


def outer_agent(span_id: str = CHILD, parent: str = ROOT) -> Span:
    return otlp.span(
        "triage-agent",
        span_id=span_id,
        parent_span_id=parent,
        start=otlp.T0 + 5 * otlp.MS,
        duration_ms=1000,
        attributes={"openinference.span.kind": "AGENT", "agent.name": "triage-agent"},
    )


@pytest.mark.parametrize("in_pieces", [False, True])
def test_a_wrapper_around_one_agent_is_one_flow_with_the_agent_as_a_step(agent: APIClient, in_pieces: bool) -> None:
    spans = [chat(span_id=GRANDCHILD, parent=CHILD), outer_agent(), wrapper_root()]
    if in_pieces:  # children first, one request each, as a SimpleSpanProcessor sends them
        for span in spans:
            send(agent, span)
    else:
        send(agent, *spans)

    flow = ReasoningFlow.objects.get()  # no second, empty flow for the wrapper
    assert (flow.pk, flow.agent, flow.trigger_type) == (span_uuid(TRACE, ROOT), "triage-agent", "invoke_workflow")
    agent_step, model_call = steps_in_order(flow)
    assert (agent_step.kind, agent_step.agent, agent_step.summary_text) == (
        "agent",
        "triage-agent",
        "Agent triage-agent ran",
    )
    assert (model_call.parent_step_id, model_call.agent, model_call.model) == (
        agent_step.pk,
        "triage-agent",
        "gpt-4o-2024-08-06",
    )
    assert not PendingSpan.objects.exists()


def test_an_agent_inside_an_agent_step_opens_a_nested_flow_linked_to_its_caller(
    agent: APIClient, operator: APIClient
) -> None:
    inner = otlp.span(
        "researcher",
        span_id="aaaaaaaaaaaaaaa1",
        parent_span_id=CHILD,
        start=otlp.T0 + 50 * otlp.MS,
        attributes={"openinference.span.kind": "AGENT", "agent.name": "researcher"},
    )
    inner_tool = tool(span_id="aaaaaaaaaaaaaaa2", parent="aaaaaaaaaaaaaaa1")

    send(agent, inner_tool, inner, outer_agent(), wrapper_root())

    flows = {flow.agent: flow for flow in ReasoningFlow.objects.filter(trace_id=TRACE)}
    assert set(flows) == {"triage-agent", "researcher"}
    outer, nested = flows["triage-agent"], flows["researcher"]
    assert (nested.parent_span_id, nested.trigger_type) == (CHILD, "invoke_agent")
    assert [s.kind for s in steps_in_order(nested)] == ["tool_call"]
    (agent_step,) = steps_in_order(outer)
    graph = operator.get(f"/admin/v1/reasoning/turns/{TRACE}").json()["graph"]
    assert {
        "from": str(agent_step.pk),
        "to": str(steps_in_order(nested)[0].pk),
        "kind": "cross_flow",
        "reason": "nested_agent",
    } in graph["edges"]


def test_a_bare_model_call_is_a_flow_of_one_step_with_its_usage(agent: APIClient) -> None:
    call = otlp.span(
        "ChatCompletion",
        attributes={
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.token_count.prompt": 21,
            "llm.token_count.completion": 34,
            "llm.token_count.prompt_details.cache_read": 5,
            "input.value": json.dumps({"messages": [{"role": "user", "content": MARKER}]}),
            "output.value": json.dumps({"choices": [{"message": {"content": "ok", "reasoning_content": "Think."}}]}),
        },
    )

    send(agent, call)

    flow = ReasoningFlow.objects.get()
    assert (flow.trigger_type, flow.flow_state, flow.step_count) == ("chat", "completed", 1)
    (step,) = steps_in_order(flow)
    assert (step.kind, step.model, step.input_tokens, step.output_tokens, step.cached_tokens) == (
        "llm_prompt",
        "gpt-4o-mini",
        21,
        34,
        5,
    )
    assert step.reasoning_content == "Think." and "Think." not in (step.outputs_pii or "")
    assert MARKER in (step.inputs_pii or "") and MARKER not in json.dumps(step.inputs)


def test_a_failed_call_and_a_failing_tool_are_failed_steps_and_the_flow_list_finds_them(
    agent: APIClient, operator: APIClient
) -> None:
    failing_tool = otlp.span(
        "execute_tool lookup",
        span_id=GRANDCHILD,
        parent_span_id=ROOT,
        start=otlp.T0 + 900 * otlp.MS,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_guideline"},
        status="error",
        status_message=f"lookup failed for {MARKER}",
        events=[("exception", {"exception.type": "LookupError", "exception.message": MARKER})],
    )
    send(agent, chat(), failing_tool, agent_root())
    other = "0af7651916cd43dd8448eb211c80319c"
    send(agent, otlp.span("ok", trace_id=other, attributes={"gen_ai.operation.name": "invoke_agent"}))

    flow = ReasoningFlow.objects.get(trace_id=TRACE)
    model_call, lookup = steps_in_order(flow)
    assert (model_call.outcome, model_call.error_type) == ("ok", "")
    assert (lookup.outcome, lookup.error_type, lookup.tool) == ("error", "LookupError", "lookup_guideline")
    # The message is content: kept encrypted with the events, nowhere in clear.
    assert MARKER in (lookup.inputs_pii or "")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM reasoning_step s WHERE s::text LIKE %s", [f"%{MARKER}%"])
        assert cursor.fetchone() == (0,)

    failed = operator.get("/admin/v1/reasoning/flows?failed=true").json()
    assert [row["id"] for row in failed] == [str(flow.pk)]
    clean = operator.get("/admin/v1/reasoning/flows?failed=false").json()
    assert str(flow.pk) not in {row["id"] for row in clean} and len(clean) == 1
    bad = operator.get("/admin/v1/reasoning/flows?failed=maybe")
    assert bad.status_code == 400 and "failed" in bad.content.decode()


def test_a_user_id_is_kept_only_as_a_pseudonym(agent: APIClient) -> None:
    send(agent, agent_root(attributes={"user.id": "patient.jane@example.org"}))
    other = "0af7651916cd43dd8448eb211c80319c"
    send(agent, otlp.span(trace_id=other, attributes={"enduser.id": "patient.jane@example.org"}))

    first, second = ReasoningFlow.objects.order_by("trace_id")
    assert first.user_ref and first.user_ref == second.user_ref  # the same user, grouped
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM reasoning_flow f WHERE f::text LIKE '%jane@example%'")
        assert cursor.fetchone() == (0,)


def test_non_utf8_in_a_string_field_is_a_400_naming_the_problem(agent: APIClient) -> None:
    body = otlp.protobuf_body(otlp.request(chat(attributes={"kkkk": "vvvv"}), agent_root()))
    response = agent.post(URL, body.replace(b"kkkk", b"k\xff\xfek"), content_type="application/x-protobuf")
    assert response.status_code == 400
    assert "UTF-8" in status_of(response).message
    assert not ReasoningFlow.objects.exists()


def test_a_span_dated_before_2000_is_rejected_naming_the_time(agent: APIClient) -> None:
    answer = send(agent, chat(), agent_root(start=1, end=2 * otlp.MS))  # 1970: an unset clock

    assert answer.partial_success.rejected_spans == 1
    assert "start_time_unix_nano is before 2000-01-01T00:00:00Z" in answer.partial_success.error_message
    # No flow dated 1970; its child waits for a root that can be stored (or the decay job).
    assert not ReasoningFlow.objects.exists() and PendingSpan.objects.count() == 1


def test_negative_and_absurd_token_counts_are_refused_for_their_field_and_named(agent: APIClient) -> None:
    answer = send(
        agent, chat(attributes={"gen_ai.usage.input_tokens": -3, "gen_ai.usage.output_tokens": 10**15}), agent_root()
    )

    assert answer.partial_success.rejected_spans == 0
    message = answer.partial_success.error_message
    assert (
        "2 warnings" in message and "gen_ai.usage.input_tokens" in message and "gen_ai.usage.output_tokens" in message
    )
    (step,) = ReasoningStep.objects.all()
    assert (step.input_tokens, step.output_tokens, step.model) == (None, None, "gpt-4o-2024-08-06")


def test_message_content_is_stored_only_encrypted(agent: APIClient) -> None:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": f"My MRN is {MARKER}"}]}])
    output = json.dumps(
        [
            {
                "role": "assistant",
                "parts": [
                    {"type": "reasoning", "content": "Think about the dose first."},
                    {"type": "text", "content": f"Noted {MARKER}"},
                ],
            }
        ]
    )

    send(agent, chat(attributes={"gen_ai.input.messages": messages, "gen_ai.output.messages": output}), agent_root())

    stored = ReasoningStep.objects.get()
    assert stored.reasoning_content == "Think about the dose first."
    assert stored.reasoning_content_chars == len("Think about the dose first.")
    assert MARKER in (stored.inputs_pii or "") and MARKER in (stored.outputs_pii or "")
    assert {"gen_ai.input.messages", "gen_ai.output.messages"} <= set(stored.pii_fields)
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(s)::text FROM reasoning_step s")
        (row,) = cursor.fetchone()
        cursor.execute("SELECT string_agg(payload::text, ' ') FROM audit_event")
        (payloads,) = cursor.fetchone()
    assert MARKER not in row and "dose" not in row
    assert MARKER not in payloads


def test_message_content_is_dropped_when_configured(agent: APIClient, settings: Settings) -> None:
    settings.OTLP_MESSAGE_CONTENT = "drop"
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": MARKER}]}])

    send(agent, chat(attributes={"gen_ai.input.messages": messages}), agent_root())

    stored = ReasoningStep.objects.get()
    assert stored.inputs_pii is None
    assert MARKER not in json.dumps(stored.inputs)


def test_the_otlp_json_encoding_gives_the_same_flow(agent: APIClient) -> None:
    answer = send(agent, chat(), agent_root(), encoding="json")

    assert not answer.HasField("partial_success")
    assert ReasoningFlow.objects.get().step_count == 1


def test_a_gzip_body_is_accepted(agent: APIClient) -> None:
    body = gzip.compress(otlp.protobuf_body(otlp.request(chat(), agent_root())))

    response = agent.post(URL, body, content_type="application/x-protobuf", headers={"Content-Encoding": "gzip"})

    assert response.status_code == 200
    assert ReasoningFlow.objects.filter(flow_state="completed").count() == 1


# --- Arrival in any order, across requests --------------------------------------------------------


def test_children_that_come_first_wait_durably_and_attach_when_their_parents_come(agent: APIClient) -> None:
    first = send(agent, tool())
    assert not first.HasField("partial_success")
    assert PendingSpan.objects.count() == 1
    assert not ReasoningStep.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT mapped FROM reasoning_pending_span")
        (mapped,) = cursor.fetchone()
    assert "lookup_guideline" not in mapped  # encrypted at rest

    send(agent, chat())
    assert PendingSpan.objects.count() == 2

    send(agent, agent_root())

    assert PendingSpan.objects.count() == 0
    flow = ReasoningFlow.objects.get()
    model_call, lookup = steps_in_order(flow)
    assert lookup.parent_step_id == model_call.pk
    assert flow.flow_state == "completed" and flow.step_count == 2


def test_a_replayed_request_writes_nothing_twice(agent: APIClient) -> None:
    spans = (tool(), chat(), agent_root())
    send(agent, *spans)
    events = AuditEvent.objects.count()

    again = send(agent, *spans)

    assert not again.HasField("partial_success")
    assert AuditEvent.objects.count() == events
    assert ReasoningStep.objects.count() == 2 and ReasoningFlow.objects.count() == 1


def test_a_replayed_parked_span_is_parked_once(agent: APIClient) -> None:
    send(agent, tool())
    send(agent, tool())

    assert PendingSpan.objects.count() == 1


def test_a_child_that_arrives_after_its_flow_closed_is_reported(agent: APIClient) -> None:
    send(agent, agent_root())

    late = send(agent, chat())

    assert late.partial_success.rejected_spans == 1
    assert "no longer accepts changes" in late.partial_success.error_message


def test_spans_whose_root_never_comes_become_an_aborted_flow_at_decay(agent: APIClient, settings: Settings) -> None:
    send(agent, chat(), tool())
    PendingSpan.objects.update(received_at=datetime.now(UTC) - timedelta(hours=settings.FLOW_DECAY_HOURS + 1))

    decay_stale_flows()

    assert not PendingSpan.objects.exists()
    flow = ReasoningFlow.objects.get()
    assert (flow.trigger_type, flow.trace_id, flow.flow_state, flow.abort_reason) == (
        "otlp_trace",
        TRACE,
        "aborted",
        "timeout",
    )
    model_call, lookup = steps_in_order(flow)
    assert lookup.parent_step_id == model_call.pk


# --- Bad input --------------------------------------------------------------------------------------


def test_a_summary_over_280_characters_rejects_its_trace_only(agent: APIClient) -> None:
    other_trace = "0af7651916cd43dd8448eb211c80319c"
    good = [
        otlp.span("root", trace_id=other_trace, span_id="b7ad6b7169203331"),
        otlp.span("step", trace_id=other_trace, span_id="b7ad6b7169203332", parent_span_id="b7ad6b7169203331"),
    ]

    answer = send(agent, chat(attributes={"reasoning.summary_text": "x" * 281}), agent_root(), *good)

    assert answer.partial_success.rejected_spans == 2
    assert f"span {CHILD}: reasoning.summary_text" in answer.partial_success.error_message
    assert list(ReasoningFlow.objects.values_list("trace_id", flat=True)) == [other_trace]
    assert not PendingSpan.objects.exists()


def test_a_summary_that_is_not_plain_text_is_rejected(agent: APIClient) -> None:
    answer = send(agent, chat(attributes={"reasoning.summary_text": "line one\nline two"}), agent_root())

    assert answer.partial_success.rejected_spans == 2
    assert not ReasoningFlow.objects.exists()


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (otlp.span("zero trace", trace_id=b"\0" * 16), "trace_id"),
        (otlp.span("short trace", trace_id=b"\1" * 8), "trace_id"),
        (otlp.span("zero span", span_id=b"\0" * 8), "span_id"),
        (otlp.span("long span", span_id=b"\1" * 9), "span_id"),
        (otlp.span("bad parent", parent_span_id=b"\1" * 3), "parent_span_id"),
        (otlp.span("many attributes", attributes={f"a{n}": n for n in range(10_000)}), "10000 attributes"),
        (otlp.span("typed", parent_span_id=ROOT, attributes={"reasoning.kind": 7}), "reasoning.kind"),
    ],
)
def test_a_broken_span_is_reported_in_partial_success(agent: APIClient, bad: Span, says: str) -> None:
    answer = send(agent, bad)

    assert answer.partial_success.rejected_spans == 1
    assert says in answer.partial_success.error_message
    assert not ReasoningFlow.objects.exists() and not PendingSpan.objects.exists()


def test_a_span_whose_parent_is_in_another_trace_is_rejected(agent: APIClient) -> None:
    other_trace = "0af7651916cd43dd8448eb211c80319c"
    stray = otlp.span("stray", trace_id=other_trace, span_id="b7ad6b7169203332", parent_span_id=ROOT)

    answer = send(agent, chat(), agent_root(), stray)

    assert answer.partial_success.rejected_spans == 1
    assert f"its parent span {ROOT} is in trace {TRACE}" in answer.partial_success.error_message
    assert ReasoningFlow.objects.get().trace_id == TRACE
    assert not PendingSpan.objects.exists()


def test_duplicate_span_ids_with_different_content_are_rejected(agent: APIClient) -> None:
    answer = send(agent, chat(), chat(attributes={"gen_ai.usage.input_tokens": 5}), agent_root())

    assert answer.partial_success.rejected_spans >= 2
    assert not ReasoningStep.objects.exists()


def test_attributes_of_every_value_type_are_kept(agent: APIClient) -> None:
    values = {
        "x.text": "a",
        "x.flag": True,
        "x.count": 3,
        "x.ratio": 0.5,
        "x.raw": b"\x01\x02",
        "x.list": ["a", 1],
        "x.map": {"k": {"n": [1, 2]}},
    }

    send(agent, chat(attributes=values), agent_root())

    stored = ReasoningStep.objects.get()
    # Attributes no convention knows are kept, and only encrypted.
    assert "otlp.attributes" not in stored.inputs and "otlp.attributes" in stored.pii_fields
    inputs = json.loads(stored.inputs_pii or "{}")["otlp.attributes"]
    assert inputs["x.text"] == "a" and inputs["x.flag"] is True and inputs["x.count"] == 3
    assert inputs["x.ratio"] == 0.5 and inputs["x.raw"] == "AQI=" and inputs["x.list"] == ["a", 1]
    assert inputs["x.map"] == {"k": {"n": [1, 2]}}


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\x0a\xff\xff", "application/x-protobuf", 400),  # truncated
        (b'{"foo": 1}', "application/json", 400),
        (b"[1, 2]", "application/json", 400),
        (b"{not json", "application/json", 400),
        (b"<traces/>", "application/xml", 415),
    ],
)
def test_a_body_that_is_not_an_otlp_traces_request_is_4xx(
    agent: APIClient, body: bytes, content_type: str, status: int
) -> None:
    response = agent.post(URL, body, content_type=content_type)

    assert response.status_code == status, response.content
    if content_type == "application/x-protobuf":
        assert status_of(response).message
    assert not ReasoningFlow.objects.exists()


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ({"resourceSpans": ["x"]}, "resourceSpans[0]"),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "a"}, "b"]}]}]},
            "resourceSpans[0].scopeSpans[0].spans[1]",
        ),
        ({"resourceSpans": [{"resource": "r"}]}, "resourceSpans[0].resource"),
    ],
)
def test_otlp_json_with_a_string_where_an_object_belongs_is_400_naming_it(
    agent: APIClient, document: dict[str, Any], names: str
) -> None:
    # Found by the fuzzer: protobuf's JSON parser read such a string as an empty message, and the
    # export was acknowledged with nothing in it.
    response = agent.post(URL, document, format="json")

    assert response.status_code == 400, response.content
    assert f"{names} must be an object" in response.json()["message"]
    assert not ReasoningFlow.objects.exists() and not PendingSpan.objects.exists()


def test_protobuf_of_another_message_type_is_refused(agent: APIClient) -> None:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

    metrics = ExportMetricsServiceRequest()
    metrics.resource_metrics.add().scope_metrics.add().metrics.append(Metric(name="cpu", description="x"))

    response = agent.post(URL, metrics.SerializeToString(), content_type="application/x-protobuf")

    # Its fields line up with a traces request's wire types, so it parses: as a span whose
    # "trace id" is the metric's name, which is refused by name.
    if response.status_code != 400:
        assert response.status_code == 200
        answer = answer_of(response)
        assert answer.partial_success.rejected_spans == 1
        assert "trace_id" in answer.partial_success.error_message
    assert not ReasoningFlow.objects.exists() and not PendingSpan.objects.exists()


def test_authentication_errors_are_google_rpc_status(anonymous: APIClient, reader: APIClient) -> None:
    body = otlp.protobuf_body(otlp.request(agent_root()))

    missing = anonymous.post(URL, body, content_type="application/x-protobuf")
    forbidden = reader.post(URL, body, content_type="application/x-protobuf")

    assert missing.status_code == 401 and missing["Content-Type"] == "application/x-protobuf"
    assert status_of(missing).code == 16 and missing["WWW-Authenticate"]
    assert forbidden.status_code == 403 and status_of(forbidden).code == 7
    assert "reasoning.write" in status_of(forbidden).message
    assert not ReasoningFlow.objects.exists()


def test_the_route_is_documented_with_both_content_types(client_for: Callable[[str | None], APIClient]) -> None:
    schema = client_for(None).get("/api/schema/", {"format": "json"}).json()

    operation = schema["paths"]["/v1/traces"]["post"]
    assert set(operation["requestBody"]["content"]) == {"application/x-protobuf", "application/json"}
    assert {"200", "400", "401", "403", "413", "415"} <= set(operation["responses"])


# --- A real OpenTelemetry SDK exporter, against a live server -------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_opentelemetry_sdk_exporter_records_an_agent_turn(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status as SpanStatus
    from opentelemetry.trace import StatusCode

    from reasoning.tokens import create_api_token

    _, raw = create_api_token(name="otel-agent", scopes=["reasoning.write"], actor="system:test")
    # As an operator would configure it: the exporter reads the endpoint and the token header from the environment.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{live_server.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{raw}")
    provider = TracerProvider(resource=Resource.create({"service.name": "triage-agent"}))
    # SimpleSpanProcessor exports every span as it ends, one request each: children before parents.
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("tests.agent")

    with tracer.start_as_current_span(
        "invoke_agent triage",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage", "session.id": "s-9"},
    ) as root:
        with (
            tracer.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 120,
                    "gen_ai.usage.output_tokens": 30,
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": MARKER}]}]
                    ),
                },
            ),
            tracer.start_as_current_span(
                "execute_tool lookup",
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
            ),
        ):
            pass
        with tracer.start_as_current_span(
            "invoke_agent researcher",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "researcher"},
        ) as sub_agent:
            with tracer.start_as_current_span(
                "retrieve", attributes={"reasoning.kind": "retrieval", "reasoning.summary_text": "Read the guideline"}
            ):
                pass
            sub_agent.set_status(SpanStatus(StatusCode.ERROR, "Source unavailable"))
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()

    flows = {flow.agent: flow for flow in ReasoningFlow.objects.filter(trace_id=trace_id)}
    assert set(flows) == {"triage", "researcher"}
    triage, researcher = flows["triage"], flows["researcher"]
    assert (triage.flow_state, triage.trigger_type, triage.session_id) == ("completed", "invoke_agent", "s-9")
    assert (researcher.flow_state, researcher.abort_reason) == ("aborted", "span_error")
    # The nested agent's flow names its caller: the turn view draws the edge.
    assert (researcher.parent_span_id, triage.parent_span_id) == (triage.root_span_id, "")
    model_call, lookup = steps_in_order(triage)
    assert (model_call.kind, model_call.model, model_call.input_tokens, model_call.agent) == (
        "llm_prompt",
        "gpt-4o",
        120,
        "triage",
    )
    assert lookup.kind == "tool_call" and lookup.parent_step_id == model_call.pk
    assert MARKER not in json.dumps(model_call.inputs) and MARKER in (model_call.inputs_pii or "")
    assert [(s.kind, s.summary_text) for s in steps_in_order(researcher)] == [("retrieval", "Read the guideline")]
    assert not PendingSpan.objects.exists()


def test_a_body_over_the_limit_is_413_as_a_google_rpc_status(agent: APIClient, settings: Settings) -> None:
    settings.INGEST_MAX_BYTES = 2048
    big = otlp.protobuf_body(otlp.request(*[chat(span_id=f"{n:016x}") for n in range(1, 40)], agent_root()))
    assert len(big) > 2048

    response = agent.post(URL, big, content_type="application/x-protobuf")
    bomb = agent.post(
        URL, gzip.compress(b"\0" * 100_000), content_type="application/x-protobuf", headers={"Content-Encoding": "gzip"}
    )

    assert response.status_code == 413 and response["Content-Type"] == "application/x-protobuf"
    assert status_of(response).message == "Request body is too large."
    assert bomb.status_code == 413 and status_of(bomb).code == 3
    assert not ReasoningFlow.objects.exists()


# --- Bounded work per request (docs/ingest.md, "Limits"; timed in tests/test_bounded_work.py) ---


def test_a_request_of_more_spans_than_the_limit_is_refused_whole_naming_it(agent: APIClient) -> None:
    from reasoning.recording.otlp import MAX_SPANS_PER_REQUEST

    spans = [otlp.span(f"s{n}", span_id=f"{n + 1:016x}", parent_span_id=ROOT) for n in range(MAX_SPANS_PER_REQUEST)]
    response = post(agent, otlp.request(otlp.span("root"), *spans))

    assert response.status_code == 413
    status = Status.FromString(response.content)
    assert status.message.startswith(f"resource_spans: {MAX_SPANS_PER_REQUEST + 1} spans in one request; at most")
    assert not ReasoningFlow.objects.exists() and not PendingSpan.objects.exists()


def test_a_span_with_more_events_than_the_limit_is_rejected_naming_it(agent: APIClient) -> None:
    from reasoning.recording.otlp import MAX_EVENTS

    events: list[tuple[str, Mapping[str, object]]] = [("tick", {}) for _ in range(MAX_EVENTS + 1)]
    answer = send(agent, otlp.span("root"), otlp.child(events=events))

    assert answer.partial_success.rejected_spans == 1
    assert f"span {CHILD}: has {MAX_EVENTS + 1} events; at most {MAX_EVENTS}" in answer.partial_success.error_message
    assert ReasoningFlow.objects.count() == 1 and not ReasoningStep.objects.exists()


def test_spans_waiting_for_their_parent_are_bounded_per_trace(agent: APIClient, settings: Settings) -> None:
    from reasoning.recording import traces

    settings_limit = 3
    original, traces.MAX_PENDING_PER_TRACE = traces.MAX_PENDING_PER_TRACE, settings_limit
    try:
        orphans = [otlp.child(f"o{n}", span_id=f"{n + 16:016x}", parent_span_id="ab" * 8) for n in range(4)]
        answer = send(agent, *orphans)
        assert answer.partial_success.rejected_spans == 1
        assert "already has 3 spans waiting for their parent span (the limit)" in answer.partial_success.error_message
        assert PendingSpan.objects.count() == 3
        # Another trace is not affected.
        assert (
            send(agent, otlp.child("other", trace_id="cd" * 16, parent_span_id="ef" * 8)).partial_success.rejected_spans
            == 0
        )
    finally:
        traces.MAX_PENDING_PER_TRACE = original


def test_a_chain_sent_child_first_is_stored_parents_first(agent: APIClient) -> None:
    ids = [f"{n + 32:016x}" for n in range(30)]
    chain = [
        otlp.span(f"step {n}", span_id=span_id, parent_span_id=ROOT if n == 0 else ids[n - 1], start=otlp.T0 + n)
        for n, span_id in enumerate(ids)
    ]
    send(agent, *reversed(chain), otlp.span("root"))

    steps = list(ReasoningStep.objects.order_by("position").values_list("span_id", "parent_step_id", "id"))
    assert [span_id for span_id, _, _ in steps] == ids
    positions = {step_id: n for n, (_, _, step_id) in enumerate(steps)}
    assert all(parent is None or positions[parent] < n for n, (_, parent, _) in enumerate(steps))


@pytest.mark.django_db(transaction=True)
def test_the_readmes_trace_makes_a_flow_with_its_agent_named(live_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's "Try it" trace, as printed: the dashboard and the agents page must not see a
    # "(no agent)" flow (reported against an earlier main: agent "—" on the flow).
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from reasoning.tokens import create_api_token

    _, raw = create_api_token(name="readme-agent", scopes=["reasoning.write"], actor="system:test")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{live_server.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{raw}")
    provider = TracerProvider(resource=Resource.create({"service.name": "triage-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("try-it")
    with (
        tracer.start_as_current_span("invoke_agent triage", attributes={"gen_ai.operation.name": "invoke_agent"}),
        tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.usage.output_tokens": 30,
            },
        ),
    ):
        pass
    provider.shutdown()

    flow = ReasoningFlow.objects.get(trigger_type="invoke_agent")
    assert (flow.agent, flow.flow_state) == ("triage", "completed")
    assert list(ReasoningStep.objects.filter(flow=flow).values_list("kind", "agent")) == [("llm_prompt", "triage")]
