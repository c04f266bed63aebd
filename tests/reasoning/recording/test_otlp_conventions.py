"""reasoning.recording.conventions: each convention's names feed the step and flow fields, and
only allow-listed attributes are kept in clear; reasoning is fenced out of every convention's content.

Pure unit tests (no database); ``test_otlp_interop.py`` replays what the real libraries send.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from reasoning.recording.conventions import CONVENTIONS
from reasoning.recording.otlp import UNKNOWN_KEY, map_request
from tests.otlp import CHILD_SPAN_ID, child, request, span

MARKER = "Jane-Doe-MRN-4417"


def mapped_step(attributes: dict[str, Any], name: str = "work", **kwargs: Any) -> dict[str, Any]:
    (result,), problems = map_request(request(child(name, attributes=attributes, **kwargs)))
    assert [problem for problem in problems if not problem.stored] == []
    return result.step


def clear(step: dict[str, Any]) -> dict[str, Any]:
    """What is stored in clear: the step's fields and the inputs/outputs keys that are not pii."""
    pii = set(step.get("pii_fields", []))
    public = {key: value for key, value in step.items() if key not in ("inputs", "outputs", "reasoning_content")}
    for part in ("inputs", "outputs"):
        public[part] = {key: value for key, value in step.get(part, {}).items() if key not in pii}
    return public


# --- Each convention's fields -----------------------------------------------------------------------

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "OpenInference LLM",
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.token_count.prompt": 21,
            "llm.token_count.completion": 34,
            "llm.token_count.completion_details.reasoning": 13,
            "llm.token_count.prompt_details.cache_read": 5,
        },
        {
            "kind": "llm_prompt",
            "model": "gpt-4o-mini",
            "input_tokens": 21,
            "output_tokens": 34,
            "reasoning_tokens": 13,
            "cached_tokens": 5,
        },
    ),
    (
        "OpenInference TOOL",
        {"openinference.span.kind": "TOOL", "tool.name": "lookup_guideline"},
        {"kind": "tool_call", "tool": "lookup_guideline", "summary_text": "Called tool lookup_guideline"},
    ),
    ("OpenInference RETRIEVER", {"openinference.span.kind": "RETRIEVER"}, {"kind": "retrieval"}),
    (
        "OpenInference EMBEDDING",
        {"openinference.span.kind": "EMBEDDING", "embedding.model_name": "e5"},
        {"kind": "embedding", "model": "e5"},
    ),
    ("OpenInference RERANKER", {"openinference.span.kind": "RERANKER"}, {"kind": "rerank"}),
    ("OpenInference GUARDRAIL", {"openinference.span.kind": "GUARDRAIL"}, {"kind": "guardrail"}),
    ("OpenInference CHAIN", {"openinference.span.kind": "CHAIN"}, {"kind": "chain", "summary_text": "Chain work"}),
    (
        "Traceloop task and LLM request type",
        {"traceloop.span.kind": "task", "traceloop.entity.name": "plan"},
        {"kind": "task", "summary_text": "Task work"},
    ),
    (
        "Traceloop tool",
        {"traceloop.span.kind": "tool", "traceloop.entity.name": "lookup_guideline"},
        {"kind": "tool_call", "tool": "lookup_guideline"},
    ),
    (
        "OpenLLMetry llm.request.type",
        {
            "llm.request.type": "chat",
            "gen_ai.request.model": "gpt-4o",
            "llm.usage.prompt_tokens": 10,
            "llm.usage.completion_tokens": 3,
        },
        {"kind": "llm_prompt", "model": "gpt-4o", "input_tokens": 10, "output_tokens": 3},
    ),
    (
        "Langfuse generation",
        {
            "langfuse.observation.type": "generation",
            "langfuse.observation.model.name": "gpt-4o-mini",
            "langfuse.observation.usage_details": json.dumps(
                {
                    "prompt_tokens": 21,
                    "completion_tokens": 34,
                    "completion_tokens_details": {"reasoning_tokens": 13},
                    "prompt_tokens_details": {"cached_tokens": 5},
                }
            ),
        },
        {
            "kind": "llm_prompt",
            "model": "gpt-4o-mini",
            "input_tokens": 21,
            "output_tokens": 34,
            "reasoning_tokens": 13,
            "cached_tokens": 5,
        },
    ),
    (
        "Langfuse usage with its own keys",
        {"langfuse.observation.type": "generation", "langfuse.observation.usage_details": '{"input": 7, "output": 2}'},
        {"kind": "llm_prompt", "input_tokens": 7, "output_tokens": 2},
    ),
    (
        "Langfuse level ERROR",
        {
            "langfuse.observation.type": "tool",
            "langfuse.observation.level": "ERROR",
            "langfuse.observation.status_message": MARKER,
        },
        {"kind": "tool_call", "outcome": "error", "error_type": "span_error", "tool": "work"},
    ),
    (
        "MLflow, every value JSON-encoded",
        {
            "mlflow.spanType": '"CHAT_MODEL"',
            "mlflow.llm.model": '"gpt-4o-mini"',
            "mlflow.chat.tokenUsage": json.dumps(
                {"input_tokens": 21, "output_tokens": 34, "cache_read_input_tokens": 5}
            ),
        },
        {"kind": "llm_prompt", "model": "gpt-4o-mini", "input_tokens": 21, "output_tokens": 34, "cached_tokens": 5},
    ),
    ("MLflow TOOL", {"mlflow.spanType": '"TOOL"'}, {"kind": "tool_call", "tool": "work"}),
    (
        "Vercel AI SDK model call",
        {
            "ai.operationId": "ai.generateText.doGenerate",
            "ai.model.id": "gpt-4o-mini",
            "ai.response.model": "gpt-4o-mini-2024-07-18",
            "ai.usage.inputTokens": 21,
            "ai.usage.outputTokens": 34,
            "ai.usage.reasoningTokens": 13,
            "ai.usage.cachedInputTokens": 5,
        },
        {
            "kind": "llm_prompt",
            "model": "gpt-4o-mini-2024-07-18",
            "input_tokens": 21,
            "output_tokens": 34,
            "reasoning_tokens": 13,
            "cached_tokens": 5,
        },
    ),
    (
        "Vercel AI SDK tool call",
        {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "lookup_guideline", "ai.toolCall.args": MARKER},
        {"kind": "tool_call", "tool": "lookup_guideline"},
    ),
    (
        "Pydantic AI (Logfire) details",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.details.reasoning_tokens": 13,
            "gen_ai.usage.cache_read.input_tokens": 5,
        },
        {"kind": "llm_prompt", "reasoning_tokens": 13, "cached_tokens": 5},
    ),
    (
        "GenAI, deprecated names",
        {
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4",
            "gen_ai.usage.prompt_tokens": 9,
            "gen_ai.usage.completion_tokens": 4,
        },
        {"kind": "llm_prompt", "model": "gpt-4", "input_tokens": 9, "output_tokens": 4},
    ),
    (
        "The more specific convention wins (OpenInference over GenAI)",
        {"openinference.span.kind": "TOOL", "gen_ai.operation.name": "chat", "tool.name": "a", "gen_ai.tool.name": "b"},
        {"kind": "tool_call", "tool": "a"},
    ),
    (
        "error.type without an error status",
        {"gen_ai.operation.name": "chat", "error.type": "<class 'openai.RateLimitError'>"},
        {"outcome": "error", "error_type": "openai.RateLimitError"},
    ),
]


@pytest.mark.parametrize(("attributes", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_conventions_names_fill_the_step(attributes: dict[str, Any], expected: dict[str, Any]) -> None:
    step = mapped_step(attributes)
    assert {key: step.get(key) for key in expected} == expected
    assert MARKER not in json.dumps(clear(step))


@pytest.mark.parametrize(
    ("attributes", "agent"),
    [
        ({"agent.name": "Triage Bot"}, "Triage_Bot"),  # OpenInference
        ({"ai.telemetry.functionId": "triage-agent"}, "triage-agent"),  # Vercel AI SDK
        ({"agent_name": "triage"}, "triage"),  # Pydantic AI
        ({"gen_ai.agent.name": "triage"}, "triage"),
        ({}, "test-agent"),  # the resource's service.name
    ],
)
def test_a_step_names_its_agent_by_any_convention(attributes: dict[str, Any], agent: str) -> None:
    assert mapped_step(attributes)["agent"] == agent


@pytest.mark.parametrize(
    ("attributes", "kind"),
    [
        ({"openinference.span.kind": "AGENT"}, "agent"),
        ({"traceloop.span.kind": "agent", "traceloop.entity.name": "triage"}, "agent"),
        ({"langfuse.observation.type": "agent"}, "agent"),
        ({"mlflow.spanType": '"AGENT"'}, "agent"),
        ({"ai.operationId": "ai.generateText"}, "agent"),
    ],
)
def test_agent_spans_of_every_convention_may_open_a_flow(attributes: dict[str, Any], kind: str) -> None:
    (result,), _ = map_request(request(child("triage", attributes=attributes)))
    assert result.kind == kind and result.flow["trigger_type"] == "invoke_agent" and result.flow["agent"] == "triage"


@pytest.mark.parametrize(
    ("attributes", "session_id", "user"),
    [
        ({"session.id": "s-1", "user.id": MARKER}, "s-1", True),
        ({"langfuse.trace.session_id": "s-1", "langfuse.trace.user_id": MARKER}, "s-1", True),
        (
            {"traceloop.association.properties.session_id": "s-1", "traceloop.association.properties.user_id": MARKER},
            "s-1",
            True,
        ),
        ({"ai.telemetry.metadata.sessionId": "s-1", "ai.telemetry.metadata.userId": MARKER}, "s-1", True),
        ({"gen_ai.conversation.id": "s-1"}, "s-1", False),
    ],
)
def test_session_and_user_of_every_convention(attributes: dict[str, Any], session_id: str, user: bool) -> None:
    (result,), _ = map_request(request(span(attributes=attributes)))
    assert result.flow.get("session_id") == session_id
    # The user's id goes to the write path, which keeps only its keyed pseudonym.
    assert (result.flow.get("user_id") == MARKER) is user


def test_the_conventions_are_asked_most_specific_first() -> None:
    assert [convention.name for convention in CONVENTIONS][-1] == "OpenTelemetry GenAI"


# --- Nothing in clear by default ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "attributes",
    [
        {"my.custom.note": MARKER},  # unknown: content
        {"gen_ai.request.model": MARKER + "\n" + MARKER},  # allow-listed, but not one line
        {"gen_ai.agent.name": MARKER * 20},  # allow-listed, but longer than 200
        {"gen_ai.usage.note": MARKER},  # a counts prefix takes numbers only
        {"gen_ai.response.finish_reasons": [MARKER * 20]},  # an array of a text too long
        {"session.id": {"nested": MARKER}},  # a map is never clear
        {"input.value": MARKER, "output.value": MARKER},
        {"gen_ai.task.input": MARKER, "gen_ai.task.output": MARKER},  # Traceloop's tasks
        {"langfuse.observation.input": MARKER, "langfuse.observation.output": MARKER},
        {"mlflow.spanInputs": json.dumps({"q": MARKER}), "mlflow.spanOutputs": json.dumps(MARKER)},
        {"traceloop.association.properties.diagnosis": MARKER},
        {"ai.prompt.messages": MARKER, "ai.response.text": MARKER},
        {"llm.input_messages.0.message.content": MARKER},
        {"tool.parameters": MARKER, "tool.description": MARKER},
        {"gen_ai.tool.call.arguments": MARKER, "gen_ai.tool.call.result": MARKER},
        {"request_data": json.dumps({"messages": [MARKER]}), "logfire.msg": MARKER},
    ],
)
def test_what_is_not_allow_listed_is_only_encrypted(attributes: dict[str, Any]) -> None:
    step = mapped_step(
        attributes, events=[("exception", {"exception.message": MARKER})], status="error", status_message=MARKER
    )
    assert MARKER not in json.dumps(clear(step))
    assert MARKER in json.dumps(step["inputs"]) + json.dumps(step.get("outputs", {}))


def test_allow_listed_attributes_are_kept_in_clear() -> None:
    attributes = {
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.request.temperature": 0.2,
        "llm.token_count.total": 55,
        "openinference.span.kind": "LLM",
        "mlflow.spanType": '"LLM"',
        "ai.response.finishReason": "stop",
    }
    assert clear(mapped_step(attributes))["inputs"] == attributes


def test_dropping_content_drops_everything_not_allow_listed() -> None:
    (result,), _ = map_request(
        request(child(attributes={"my.note": MARKER, "gen_ai.request.model": "gpt-4o"}, events=[("e", {"x": MARKER})])),
        message_content="drop",
    )
    assert MARKER not in repr(result) and result.step["inputs"] == {"gen_ai.request.model": "gpt-4o"}


def test_only_two_resource_attributes_are_read_and_none_is_stored() -> None:
    (result,), _ = map_request(
        request(child(), resource_attributes={"host.name": MARKER, "gen_ai.agent.name": "triage"}, service_name="svc")
    )
    assert MARKER not in repr(result) and result.step["agent"] == "triage"


# --- Reasoning, fenced whatever the convention ----------------------------------------------------------


@pytest.mark.parametrize(
    "attributes",
    [
        # OpenInference: the raw response in output.value.
        {"output.value": json.dumps({"choices": [{"message": {"content": "a", "reasoning_content": MARKER}}]})},
        # MLflow: JSON inside a JSON string.
        {"mlflow.spanOutputs": json.dumps(json.dumps({"choices": [{"message": {"reasoning_content": MARKER}}]}))},
        # OTel GenAI: a part of type reasoning; Pydantic AI: of type thinking.
        {
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "thinking", "content": MARKER}]}]
            )
        },
        # Vercel AI SDK: an attribute that is reasoning through and through.
        {"ai.response.reasoning": MARKER},
        # Traceloop: an indexed completion's reasoning.
        {"gen_ai.completion.0.reasoning": MARKER},
        # A payload that looks like JSON, mentions reasoning, but does not parse: it cannot be separated.
        {"langfuse.observation.output": '{"reasoning": "' + MARKER},
    ],
)
def test_reasoning_becomes_reasoning_content_and_leaves_the_content(attributes: dict[str, Any]) -> None:
    step = mapped_step(attributes)
    assert MARKER in step["reasoning_content"]
    assert MARKER not in json.dumps(step.get("inputs", {})) + json.dumps(step.get("outputs", {}))


def test_reasoning_in_a_streamed_chunk_event_is_fenced_too() -> None:
    chunk = json.dumps({"choices": [{"delta": {"reasoning_content": MARKER}}]})
    step = mapped_step({}, events=[("mlflow.chunk.item.1", {"mlflow.chunk.value": chunk})])
    assert step["reasoning_content"] == MARKER and MARKER not in json.dumps(step["inputs"])


def test_content_that_is_not_valid_json_is_kept_encrypted_as_it_came() -> None:
    step = mapped_step({"input.value": '{"broken": ' + MARKER})
    assert step["inputs"]["input.value"] == '{"broken": ' + MARKER and "input.value" in step["pii_fields"]


# --- Bad input -----------------------------------------------------------------------------------------


def test_absurd_token_counts_are_refused_for_their_field_and_named() -> None:
    attributes = {"llm.token_count.prompt": -5, "llm.token_count.completion": 10**12, "openinference.span.kind": "LLM"}
    (result,), problems = map_request(request(child(attributes=attributes)))
    assert "input_tokens" not in result.step and "output_tokens" not in result.step
    assert [problem.stored for problem in problems] == [True, True]
    assert "llm.token_count.prompt" in problems[0].message and "llm.token_count.completion" in problems[1].message


def test_a_huge_content_value_is_kept_encrypted() -> None:
    step = mapped_step({"input.value": MARKER * 100_000})
    assert len(step["inputs"]["input.value"]) == len(MARKER) * 100_000 and "input.value" in step["pii_fields"]


def test_values_of_every_type_at_depth_under_an_unknown_key() -> None:
    deep: Any = MARKER
    for _ in range(12):
        deep = {"k": [deep, 1, 2.5, True, b"\x00"]}
    step = mapped_step({"x": deep})
    assert MARKER in json.dumps(step["inputs"][UNKNOWN_KEY]) and MARKER not in json.dumps(clear(step))


def test_span_id_is_reported_in_the_warning() -> None:
    _, problems = map_request(request(child(attributes={"gen_ai.usage.input_tokens": -1})))
    assert problems[0].span_id == CHILD_SPAN_ID


def test_the_ingest_guide_lists_every_name_each_convention_reads() -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "ingest.md").read_text()
    for convention in CONVENTIONS:
        names = [*convention.clear, *convention.inputs, *convention.outputs, *convention.kinds]
        names += [name for name in (*convention.model, *convention.tool, *convention.agent) if isinstance(name, str)]
        for name in names:
            shown = f"`{name}*`" if name.endswith(".") else f"`{name}`"
            assert shown in guide, f"{convention.name}: {shown} is not in docs/ingest.md"


@pytest.mark.parametrize(
    ("attributes", "name", "summary"),
    [
        # A dated snapshot reads as a date of birth to the summary guard: the summary names the model without it.
        (
            {"gen_ai.operation.name": "chat", "gen_ai.response.model": "gpt-4o-mini-2024-07-18"},
            "chat",
            "Model call to gpt-4o-mini",
        ),
        (
            {"gen_ai.operation.name": "chat", "gen_ai.response.model": "claude-3-5-sonnet-20241022"},
            "chat",
            "Model call to claude-3-5-sonnet",
        ),
        # A name the guard refuses is left out of the summary.
        (
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "mail_jane.roe@example.com"},
            "x",
            "Called a tool",
        ),
        ({"openinference.span.kind": "CHAIN"}, "visit on 1970-01-02", "Chain"),
    ],
)
def test_a_generated_summary_never_blocks_a_flow_for_patients(
    attributes: dict[str, Any], name: str, summary: str
) -> None:
    from reasoning.summary_guard import check_summary

    step = mapped_step(attributes, name=name)
    assert step["summary_text"] == summary and check_summary(summary).ok
    # The step keeps the model exactly as it was named.
    assert step.get("model") == attributes.get("gen_ai.response.model")


def test_a_count_under_a_reasoning_key_is_no_reasoning() -> None:
    output = json.dumps({"usage_metadata": {"output_token_details": {"reasoning": 13}}, "content": MARKER})
    step = mapped_step({"output.value": output})
    assert "reasoning_content" not in step and step["outputs"]["output.value"] == output
