"""MLflow tracing in its default mode: ``mlflow.spanType``, ``mlflow.chat.tokenUsage``, ``mlflow.spanInputs``.

MLflow encodes every attribute value as JSON (a span type arrives as ``"\\"LLM\\""``), which
:func:`reasoning.recording.conventions.text` decodes. Its inputs and outputs are whole
request and response payloads -- the provider's raw ``reasoning_content`` included -- so
they are content, with the reasoning fenced out (``reasoning.recording.otlp``). With
``MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true`` MLflow sends the GenAI names instead.
"""

from __future__ import annotations

from reasoning.recording.conventions.base import AGENT, EMBEDDING, LLM, RERANK, RETRIEVAL, TOOL, Convention

USAGE = "mlflow.chat.tokenUsage"

CONVENTION = Convention(
    name="MLflow",
    kinds={
        "mlflow.spanType": {
            "llm": LLM,
            "chat_model": LLM,
            "tool": TOOL,
            "agent": AGENT,
            "chain": "chain",
            "retriever": RETRIEVAL,
            "embedding": EMBEDDING,
            "reranker": RERANK,
            "parser": "parser",
            "unknown": "span",
        }
    },
    model=("mlflow.llm.model",),
    input_tokens=((USAGE, "input_tokens"),),
    output_tokens=((USAGE, "output_tokens"),),
    reasoning_tokens=((USAGE, "reasoning_tokens"),),
    cached_tokens=((USAGE, "cached_tokens"), (USAGE, "cache_read_input_tokens")),
    session=("mlflow.trace.session",),
    user=("mlflow.trace.user",),
    clear=frozenset(
        {
            "mlflow.spanType",
            "mlflow.traceRequestId",
            "mlflow.spanFunctionName",
            "mlflow.llm.model",
            "mlflow.llm.provider",
            "mlflow.message.format",
            "mlflow.trace.session",
        }
    ),
    inputs=("mlflow.spanInputs", "mlflow.chat.messages", "mlflow.chat.tools", "mlflow.trace.user"),
    outputs=("mlflow.spanOutputs", USAGE, "mlflow.llm.cost"),
)
