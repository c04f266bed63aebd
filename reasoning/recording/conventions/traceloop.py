"""OpenLLMetry / Traceloop: ``traceloop.span.kind``, ``traceloop.entity.*``, ``llm.*``, association properties.

Traceloop's SDK marks its decorated functions with ``traceloop.span.kind`` (workflow, task,
agent, tool) and names them in ``traceloop.entity.name``; its instrumentations describe model
calls with ``llm.request.type`` and the GenAI names (asked after this convention). Session and
user come from the association properties the application sets
(``traceloop.association.properties.session_id`` / ``user_id``); every other association
property is the application's own data, hence content. Content: the entities' and tasks'
input and output, request functions, headers.
"""

from __future__ import annotations

from reasoning.recording.conventions.base import AGENT, EMBEDDING, LLM, RERANK, TOOL, Convention

ASSOCIATION = "traceloop.association.properties."

CONVENTION = Convention(
    name="OpenLLMetry / Traceloop",
    kinds={
        "traceloop.span.kind": {"workflow": "workflow", "task": "task", "agent": AGENT, "tool": TOOL},
        "llm.request.type": {"chat": LLM, "completion": LLM, "embedding": EMBEDDING, "rerank": RERANK},
    },
    model=("llm.response.model", "llm.request.model"),
    input_tokens=("llm.usage.prompt_tokens",),
    output_tokens=("llm.usage.completion_tokens",),
    reasoning_tokens=("llm.usage.reasoning_tokens",),
    cached_tokens=("gen_ai.usage.cache_read_input_tokens",),
    # A tool's or an agent's entity name (only read for spans of that kind: see reasoning.recording.otlp).
    tool=(),
    agent=(),
    session=(f"{ASSOCIATION}session_id", f"{ASSOCIATION}session.id", f"{ASSOCIATION}conversation_id"),
    user=(f"{ASSOCIATION}user_id", f"{ASSOCIATION}user.id"),
    clear=frozenset(
        {
            "traceloop.span.kind",
            "traceloop.workflow.name",
            "traceloop.entity.name",
            "traceloop.entity.path",
            "traceloop.entity.version",
            "llm.request.type",
            "llm.request.model",
            "llm.response.model",
            "llm.is_streaming",
            "llm.request.max_tokens",
            "llm.request.temperature",
            "llm.request.top_p",
            "llm.frequency_penalty",
            "llm.presence_penalty",
            "llm.response.finish_reason",
            "llm.response.stop_reason",
            "llm.openai.api_base",
            f"{ASSOCIATION}session_id",
            f"{ASSOCIATION}session.id",
            f"{ASSOCIATION}conversation_id",
        }
    ),
    clear_prefixes=("llm.usage.",),
    inputs=(
        "traceloop.entity.input",
        "gen_ai.task.input",
        "llm.request.functions.",
        "llm.headers",
        "llm.user",
        "llm.prompts.",
        "traceloop.prompt.",
        ASSOCIATION,
    ),
    outputs=("traceloop.entity.output", "gen_ai.task.output", "llm.completions."),
)

# Spans of these Traceloop kinds name their tool or agent in traceloop.entity.name.
ENTITY_NAME = "traceloop.entity.name"
