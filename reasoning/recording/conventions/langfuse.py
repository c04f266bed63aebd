"""Langfuse (its OpenTelemetry-based Python and JS SDKs): ``langfuse.observation.*``, ``langfuse.trace.*``.

An observation's type (span, generation, agent, tool, chain, retriever, embedding, evaluator,
guardrail, event) gives the kind; ``model.name`` the model; ``usage_details`` (a JSON object:
input, output, and the provider's details) the tokens; ``level`` ERROR a failure.
Content: the observations' and traces' input, output, metadata and status message, model
parameters, prompts.
"""

from __future__ import annotations

from reasoning.recording.conventions.base import AGENT, EMBEDDING, LLM, RETRIEVAL, TOOL, Convention

OBSERVATION = "langfuse.observation."
TRACE = "langfuse.trace."
USAGE = f"{OBSERVATION}usage_details"

CONVENTION = Convention(
    name="Langfuse",
    kinds={
        f"{OBSERVATION}type": {
            "generation": LLM,
            "agent": AGENT,
            "tool": TOOL,
            "chain": "chain",
            "retriever": RETRIEVAL,
            "embedding": EMBEDDING,
            "evaluator": "evaluation",
            "guardrail": "guardrail",
            "event": "event",
            "span": "span",
        }
    },
    model=(f"{OBSERVATION}model.name",),
    input_tokens=((USAGE, "input"), (USAGE, "prompt_tokens"), (USAGE, "input_tokens")),
    output_tokens=((USAGE, "output"), (USAGE, "completion_tokens"), (USAGE, "output_tokens")),
    reasoning_tokens=(
        (USAGE, "output_reasoning_tokens"),
        (USAGE, "output_reasoning"),
        (USAGE, "completion_tokens_details.reasoning_tokens"),
        (USAGE, "reasoning_tokens"),
    ),
    cached_tokens=(
        (USAGE, "input_cached_tokens"),
        (USAGE, "input_cache_read"),
        (USAGE, "prompt_tokens_details.cached_tokens"),
        (USAGE, "cache_read_input_tokens"),
    ),
    session=(f"{TRACE}session_id", "session.id"),
    user=(f"{TRACE}user_id", "user.id"),
    error_when={f"{OBSERVATION}level": frozenset({"error"})},
    clear=frozenset(
        {
            f"{OBSERVATION}type",
            f"{OBSERVATION}level",
            f"{OBSERVATION}model.name",
            f"{OBSERVATION}completion_start_time",
            f"{OBSERVATION}prompt.name",
            f"{OBSERVATION}prompt.version",
            f"{OBSERVATION}version",
            f"{TRACE}name",
            f"{TRACE}public",
            f"{TRACE}session_id",
            "langfuse.release",
            "langfuse.version",
            "langfuse.environment",
            "langfuse.internal.as_root",
            "langfuse.internal.is_app_root",
        }
    ),
    inputs=(
        f"{OBSERVATION}input",
        f"{TRACE}input",
        f"{OBSERVATION}model.parameters",
        f"{OBSERVATION}metadata",
        f"{OBSERVATION}metadata.",
        f"{TRACE}metadata",
        f"{TRACE}metadata.",
        f"{TRACE}tags",
        f"{TRACE}user_id",
        "user.id",
    ),
    outputs=(
        f"{OBSERVATION}output",
        f"{TRACE}output",
        f"{OBSERVATION}status_message",
        f"{OBSERVATION}usage_details",
        f"{OBSERVATION}cost_details",
    ),
)
