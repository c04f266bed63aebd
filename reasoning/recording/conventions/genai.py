"""OpenTelemetry GenAI semantic conventions: the current names and the deprecated ones still emitted.

The names every other instrumentation may also send, so this convention is asked last.
Content: messages and system instructions, tool definitions, call arguments and results,
retrieval queries and documents, evaluation explanations; the deprecated indexed families
``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``; the ``gen_ai.*`` span events (which
``reasoning.recording.otlp`` encrypts with every other event).
"""

from __future__ import annotations

from reasoning.recording.conventions.base import AGENT, EMBEDDING, LLM, RETRIEVAL, TOOL, Convention

OPERATIONS = {
    "chat": LLM,
    "text_completion": LLM,
    "generate_content": LLM,
    "execute_tool": TOOL,
    "embeddings": EMBEDDING,
    "retrieval": RETRIEVAL,
    "create_agent": "agent_setup",
    "invoke_agent": AGENT,
    "invoke_workflow": "workflow",
    # OpenLLMetry's agent frameworks (LangGraph, CrewAI) name their task spans so.
    "execute_task": "task",
    # The Vercel AI SDK (7) wraps each round of an agent's loop so.
    "agent_step": "agent_step",
}

CONVENTION = Convention(
    name="OpenTelemetry GenAI",
    kinds={"gen_ai.operation.name": OPERATIONS},
    model=("gen_ai.response.model", "gen_ai.request.model"),
    input_tokens=("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
    output_tokens=("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    reasoning_tokens=(
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.usage.reasoning_tokens",
        "gen_ai.usage.output_tokens_details.reasoning_tokens",
        "gen_ai.usage.details.reasoning_tokens",
    ),
    cached_tokens=(
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_read_input_tokens",
        "gen_ai.usage.cached_tokens",
        "gen_ai.usage.input_tokens_details.cached_tokens",
        "gen_ai.usage.details.cache_read_tokens",
    ),
    tool=("gen_ai.tool.name",),
    agent=("gen_ai.agent.name",),
    session=("gen_ai.conversation.id", "session.id"),
    user=("user.id", "enduser.id"),
    error_type=("error.type",),
    clear=frozenset(
        {
            "gen_ai.operation.name",
            "gen_ai.provider.name",
            "gen_ai.system",
            "gen_ai.request.model",
            "gen_ai.response.model",
            "gen_ai.response.id",
            "gen_ai.response.finish_reasons",
            "gen_ai.request.temperature",
            "gen_ai.request.top_p",
            "gen_ai.request.top_k",
            "gen_ai.request.max_tokens",
            "gen_ai.request.frequency_penalty",
            "gen_ai.request.presence_penalty",
            "gen_ai.request.seed",
            "gen_ai.request.choice.count",
            "gen_ai.request.encoding_formats",
            "gen_ai.request.stream",
            "gen_ai.output.type",
            "gen_ai.embeddings.dimension.count",
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.type",
            "gen_ai.agent.name",
            "gen_ai.agent.id",
            "gen_ai.conversation.id",
            "gen_ai.data_source.id",
            "gen_ai.openai.request.service_tier",
            "gen_ai.openai.response.service_tier",
            "gen_ai.openai.response.system_fingerprint",
            "gen_ai.openai.request.response_format",
            "openai.request.service_tier",
            "openai.response.service_tier",
            "openai.response.system_fingerprint",
            "session.id",
            "server.address",
            "server.port",
            "error.type",
            "http.response.status_code",
            "http.status_code",
            "db.system",
            "db.system.name",
            "db.operation.name",
            "db.collection.name",
        }
    ),
    # Counts, costs and durations: numbers only.
    clear_prefixes=("gen_ai.usage.", "gen_ai.client.", "gen_ai.execute_tool.", "gen_ai.server."),
    inputs=(
        "gen_ai.input.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.description",
        "gen_ai.agent.description",
        "gen_ai.retrieval.query.text",
        "gen_ai.request.stop_sequences",
        "db.query.text",
        "db.statement",
        "gen_ai.prompt.",
        "gen_ai.prompt",
    ),
    outputs=(
        "gen_ai.output.messages",
        "gen_ai.tool.call.result",
        "gen_ai.retrieval.documents",
        "gen_ai.evaluation.explanation",
        "gen_ai.completion.",
        "gen_ai.completion",
    ),
)
