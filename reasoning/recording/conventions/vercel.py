"""Vercel AI SDK (``experimental_telemetry``): ``ai.*`` spans and attributes.

``ai.operationId`` names the operation (``ai.generateText``, its ``.doGenerate`` model call,
``ai.toolCall``, ``ai.embed``, …); the model call spans also carry the GenAI names.
``ai.telemetry.functionId`` names the function, which is the agent. Session and user come
from the telemetry metadata the application passes (``ai.telemetry.metadata.sessionId`` /
``userId``); other metadata is the application's data, hence content. Content: prompts,
messages, tool calls and results, response text and reasoning, embedded values.
"""

from __future__ import annotations

from reasoning.recording.conventions.base import AGENT, EMBEDDING, LLM, TOOL, Convention

META = "ai.telemetry.metadata."
# The runtime context an application passes (ai 7).
CONTEXT = "ai.settings.context."

CONVENTION = Convention(
    name="Vercel AI SDK",
    kinds={
        "ai.operationId": {
            "ai.generatetext": AGENT,
            "ai.streamtext": AGENT,
            "ai.generateobject": AGENT,
            "ai.streamobject": AGENT,
            "ai.generatetext.dogenerate": LLM,
            "ai.streamtext.dostream": LLM,
            "ai.generateobject.dogenerate": LLM,
            "ai.streamobject.dostream": LLM,
            "ai.toolcall": TOOL,
            "ai.embed": EMBEDDING,
            "ai.embedmany": EMBEDDING,
            "ai.embed.doembed": EMBEDDING,
            "ai.embedmany.doembed": EMBEDDING,
        }
    },
    model=("ai.response.model", "ai.model.id"),
    input_tokens=("ai.usage.inputTokens", "ai.usage.promptTokens"),
    output_tokens=("ai.usage.outputTokens", "ai.usage.completionTokens"),
    reasoning_tokens=("ai.usage.reasoningTokens", "ai.usage.outputTokenDetails.reasoningTokens"),
    cached_tokens=("ai.usage.cachedInputTokens", "ai.usage.inputTokenDetails.cacheReadTokens"),
    tool=("ai.toolCall.name",),
    agent=("ai.telemetry.functionId",),
    session=(f"{META}sessionId", f"{META}session_id", f"{META}session.id", f"{CONTEXT}sessionId"),
    user=(f"{META}userId", f"{META}user_id", f"{META}user.id", f"{CONTEXT}userId"),
    clear=frozenset(
        {
            "ai.operationId",
            "operation.name",
            "ai.model.id",
            "ai.model.provider",
            "ai.response.model",
            "ai.response.id",
            "ai.response.finishReason",
            "ai.response.timestamp",
            "ai.response.msToFirstChunk",
            "ai.response.msToFinish",
            "ai.response.avgCompletionTokensPerSecond",
            "ai.response.avgOutputTokensPerSecond",
            "ai.toolCall.name",
            "ai.toolCall.id",
            "ai.telemetry.functionId",
            "ai.settings.maxRetries",
            "ai.settings.maxSteps",
            "ai.settings.maxOutputTokens",
            "ai.settings.temperature",
            "ai.settings.topP",
            "ai.value.dimensions",
            f"{META}sessionId",
            f"{META}session_id",
            f"{META}session.id",
            f"{CONTEXT}sessionId",
            "resource.name",
        }
    ),
    clear_prefixes=("ai.usage.",),
    inputs=(
        "ai.prompt",
        "ai.prompt.",
        "ai.toolCall.args",
        "ai.toolCall.input",
        "ai.value",
        "ai.values",
        "ai.schema",
        "ai.schema.",
        "ai.request.headers.",
        META,
        CONTEXT,
    ),
    outputs=(
        "ai.response.text",
        "ai.response.reasoning",
        "ai.response.toolCalls",
        "ai.response.object",
        "ai.response.providerMetadata",
        "ai.toolCall.result",
        "ai.toolCall.output",
        "ai.embedding",
        "ai.embeddings",
        "ai.result.",
        "ai.response.files",
        "ai.response.sources",
    ),
)
