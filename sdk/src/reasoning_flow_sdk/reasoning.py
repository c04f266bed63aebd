"""Model responses: the answer, the raw reasoning, and the usage of an OpenAI-style completion.

Providers put a thinking model's reasoning in different places (seed 001 §2.2):
``choices[0].message.reasoning_content`` (DashScope, DeepSeek, vLLM), ``choices[0].message.reasoning``
(OpenRouter), or, in older responses, a top-level ``reasoning_content``. Responses may be
dicts or SDK objects (the ``openai`` package's pydantic models).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reasoning_flow_sdk._log import warn_once


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    value = getattr(obj, key, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)  # pydantic v2 keeps unknown fields here
        if isinstance(extra, Mapping):
            value = extra.get(key)
    return value


def _first(sequence: Any) -> Any:
    if isinstance(sequence, Sequence) and not isinstance(sequence, str | bytes) and sequence:
        return sequence[0]
    return None


def _text(value: Any) -> str | None:
    """A string, or the text parts of a content list."""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes):
        parts = [_get(part, "text") for part in value]
        texts = [part for part in parts if isinstance(part, str)]
        return "".join(texts) if texts else None
    return None


def extract_reasoning(response: Any, *, thinking: bool = False) -> tuple[str | None, str | None]:
    """``(answer_text, reasoning_content)`` of a chat completion; either may be None.

    ``thinking``: the caller asked for reasoning. When none came back, one warning per process
    (``reasoning_content_shape_unknown``) says so, so a provider's schema change is noticed.
    """
    message = _get(_first(_get(response, "choices")), "message")
    answer = _text(_get(message, "content"))
    reasoning = None
    for source, key in ((message, "reasoning_content"), (message, "reasoning"), (response, "reasoning_content")):
        reasoning = _text(_get(source, key))
        if reasoning:
            break
    else:
        reasoning = None
        if thinking:
            warn_once(
                "reasoning_content_shape_unknown",
                "reasoning_content_shape_unknown: thinking was requested but the response carries no "
                "reasoning (looked at choices[0].message.reasoning_content, .reasoning, reasoning_content)",
            )
    return answer, reasoning


def usage_of(response: Any) -> dict[str, Any]:
    """The model and token counts of a completion, as step fields (only those present)."""
    fields: dict[str, Any] = {}
    model = _get(response, "model")
    if isinstance(model, str) and model:
        fields["model"] = model[:200]
    usage = _get(response, "usage")
    for name, keys in (
        ("input_tokens", ("prompt_tokens", "input_tokens")),
        ("output_tokens", ("completion_tokens", "output_tokens")),
    ):
        for key in keys:
            value = _get(usage, key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                fields[name] = value
                break
    for details in ("completion_tokens_details", "output_tokens_details"):
        value = _get(_get(usage, details), "reasoning_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            fields["reasoning_tokens"] = value
            break
    return fields
