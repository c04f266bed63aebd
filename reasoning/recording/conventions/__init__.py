"""What each telemetry convention says about a span, and which of its attributes may be kept in clear.

Every common LLM instrumentation describes the same things with its own attribute names: what
kind of work a span did, the model, the tokens, the tool, the agent, the session and user, and
whether it failed. One module per convention declares its names (:class:`Convention`);
:func:`read` asks them in order, most specific first (:data:`CONVENTIONS`: Langfuse, MLflow,
OpenInference, OpenLLMetry/Traceloop, Vercel AI SDK, Pydantic Logfire, then the OpenTelemetry
GenAI names every one of them may also send), and the first convention that has a usable value
for a field gives it.

Clear or content. An attribute is kept in clear (the step's ``inputs``) only when a convention
lists its name in ``clear`` and its value is a number, a boolean, a string of at most
:data:`MAX_CLEAR_TEXT` characters on one line, or an array of those; or when its name is under
a prefix of ``clear_prefixes`` (token counts, costs) and its value is a number. Everything
else -- message content, tool arguments and results, JSON payloads, unknown attributes of any
type -- is content: stored only encrypted, or dropped. ``inputs`` and ``outputs`` name the
content a convention knows, and in which direction it flows; any other attribute goes into
the step's encrypted ``otlp.attributes`` whole.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from reasoning.recording.conventions import genai, langfuse, logfire, mlflow, openinference, traceloop, vercel
from reasoning.recording.conventions.base import (
    AGENT,
    CALL_KINDS,
    EMBEDDING,
    LLM,
    RERANK,
    RETRIEVAL,
    TOOL,
    Convention,
    JsonKey,
    TokenSource,
)

MAX_CLEAR_TEXT = 200
MAX_INT = 2_147_483_647


@dataclass(init=False)
class Facts:
    """What the conventions say about one span (None: nobody said)."""

    kind: str | None
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    cached_tokens: int | None
    tool: str | None
    agent: str | None
    session: str | None
    user: str | None
    failed: bool
    error_type: str | None
    # Token attributes present with a value that is not a count in 0..MAX_INT: (field, attribute).
    bad_counts: list[tuple[str, str]]

    # An explicit __init__ (the dataclass makes __eq__ and __repr__): compiled (core.compiled), it is a
    # native call, where a generated one runs as Python. Nobody has said anything yet: the conventions
    # fill the fields in.
    def __init__(self, *, failed: bool = False) -> None:
        self.kind = None
        self.model = None
        self.input_tokens = None
        self.output_tokens = None
        self.reasoning_tokens = None
        self.cached_tokens = None
        self.tool = None
        self.agent = None
        self.session = None
        self.user = None
        self.failed = failed
        self.error_type = None
        self.bad_counts = []


def text(value: AnyValue | None) -> str | None:
    """A string attribute's value, stripped; a JSON string literal (MLflow encodes every value
    as JSON) is decoded. Another type, or an empty string, is None."""
    if value is None or value.WhichOneof("value") != "string_value":
        return None
    result = value.string_value.strip()
    if len(result) >= 2 and result[0] == result[-1] == '"':
        try:
            decoded = json.loads(result)
        except ValueError:
            decoded = None
        if isinstance(decoded, str):
            result = decoded.strip()
    return result or None


def _json_object(value: AnyValue | None) -> Mapping[str, object] | None:
    if value is None:
        return None
    which = value.WhichOneof("value")
    if which == "kvlist_value":
        return {pair.key: _scalar(pair.value) for pair in value.kvlist_value.values[:]}
    if which != "string_value" or len(value.string_value) > 100_000:
        return None
    try:
        parsed = json.loads(value.string_value)
    except (ValueError, RecursionError):
        return None
    if isinstance(parsed, str):  # JSON inside a JSON string (MLflow)
        try:
            parsed = json.loads(parsed)
        except (ValueError, RecursionError):
            return None
    return parsed if isinstance(parsed, dict) else None


def _scalar(value: AnyValue) -> object:
    which = value.WhichOneof("value")
    return getattr(value, which) if which in ("int_value", "double_value", "string_value", "bool_value") else None


def _dotted(document: Mapping[str, object], key: str) -> object:
    """``document[key]``, else the value at the dotted path ``key`` (``completion_tokens_details.reasoning_tokens``)."""
    if key in document:
        return document[key]
    value: object = document
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


_NOT_COUNT = object()


def _count(raw: object) -> int | object | None:
    """A token count: an integer (or an integral double) in 0..MAX_INT; _NOT_COUNT for anything else."""
    if isinstance(raw, bool):
        return _NOT_COUNT
    if isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, int) and 0 <= raw <= MAX_INT:
        return raw
    return _NOT_COUNT


_TOKEN_FIELDS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")
_LABEL_FIELDS = ("model", "tool", "agent", "session", "user")


@dataclass(frozen=True)
class _Source:
    """Where one attribute may feed one field: ``rank`` orders the candidates (convention, then
    the convention's own order); ``key`` is the key inside a JSON object (token counts);
    ``kinds`` the values of a kind attribute; ``failing`` the values that mean failure."""

    field: str
    rank: tuple[int, int]
    key: str | None = None
    kinds: Mapping[str, str] | None = None
    failing: frozenset[str] | None = None


def _index(conventions: Sequence[Convention]) -> dict[str, list[_Source]]:
    """attribute name -> the fields it may feed, so that reading a span costs a lookup per
    attribute it has, not one per name every convention knows."""
    index: dict[str, list[_Source]] = {}

    def add(name: str, source: _Source) -> None:
        index.setdefault(name, []).append(source)

    for c, convention in enumerate(conventions):
        for position, (name, values) in enumerate(convention.kinds.items()):
            add(name, _Source("kind", (c, position), kinds=values))
        for field_name in (*_LABEL_FIELDS, "error_type"):
            for position, name in enumerate(getattr(convention, field_name)):
                add(name, _Source(field_name, (c, position)))
        for field_name in _TOKEN_FIELDS:
            for position, token_source in enumerate(getattr(convention, field_name)):
                if isinstance(token_source, tuple):
                    add(token_source[0], _Source(field_name, (c, position), key=token_source[1]))
                else:
                    add(token_source, _Source(field_name, (c, position)))
        for position, (name, failing) in enumerate(convention.error_when.items()):
            add(name, _Source("failed", (c, position), failing=failing))
    return index


def read(attributes: Mapping[str, AnyValue], *, status_error: bool, exception_type: str | None) -> Facts:
    """The facts of one span: for each field, the first convention (in :data:`CONVENTIONS`'
    order, then its own) that has a usable value."""
    facts = Facts(failed=status_error or exception_type is not None)
    candidates: dict[str, list[tuple[tuple[int, int], _Source, str, AnyValue]]] = {}
    for name, value in attributes.items():
        for source in _INDEX.get(name, ()):
            candidates.setdefault(source.field, []).append((source.rank, source, name, value))
    documents: dict[str, Mapping[str, object] | None] = {}  # JSON objects parsed once per attribute
    for field_name, found in candidates.items():
        found.sort(key=lambda candidate: candidate[0])
        for _, source, name, value in found:
            if field_name == "failed":
                shown = text(value)
                if shown is not None and source.failing is not None and shown.lower() in source.failing:
                    facts.failed = True
                continue
            if field_name == "kind":
                shown = text(value)
                kind = source.kinds.get(shown.lower()) if shown is not None and source.kinds else None
                if kind is not None:
                    facts.kind = kind
                    break
            elif field_name in _LABEL_FIELDS:
                # A name, a model, an id: one short line, as in clear (anything else is content).
                shown = text(value) if clear_value(value) else None
                if shown is not None:
                    setattr(facts, field_name, shown)
                    break
            elif field_name == "error_type":
                which = value.WhichOneof("value")
                shown = text(value) if which == "string_value" else None
                if which == "int_value":
                    shown = str(value.int_value)  # an HTTP status
                if shown is not None and len(shown) <= MAX_CLEAR_TEXT:
                    facts.error_type = shown
                    break
            else:  # a token count
                if source.key is not None:
                    if name not in documents:
                        documents[name] = _json_object(value)
                    document = documents[name]
                    raw = _dotted(document, source.key) if document is not None else None
                    if raw is None:
                        continue
                else:
                    if value.WhichOneof("value") is None:
                        continue
                    raw = _scalar(value)
                counted = _count(raw)
                if counted is _NOT_COUNT:
                    facts.bad_counts.append((field_name, name))
                    continue
                setattr(facts, field_name, counted)
                break
    if facts.error_type is None and exception_type is not None:
        facts.error_type = exception_type
    if facts.error_type is not None:
        facts.failed = True
    # The order fields were found in is the span's; report refused counts in field order.
    facts.bad_counts.sort(key=lambda bad: _TOKEN_FIELDS.index(bad[0]))
    return facts


@functools.lru_cache(maxsize=8192)
def content_of(name: str) -> tuple[bool | None, str | None]:
    """(direction, family) of a content attribute: the first convention that knows it as content
    (True: an output); (None, None) for any other name. Cached: a request's spans repeat names."""
    for convention in CONVENTIONS:
        direction = convention.direction(name)
        if direction is not None:
            return direction, convention.family(name)
    return None, None


@functools.lru_cache(maxsize=8192)
def _clear_rule(name: str) -> str:
    """How ``name`` may be kept in clear: "exact" (a listed name), "number" (under a count
    prefix) or "" (never). Cached like :func:`content_of`."""
    if any(name in convention.clear for convention in CONVENTIONS):
        return "exact"
    if any(name.startswith(convention.clear_prefixes) for convention in CONVENTIONS if convention.clear_prefixes):
        return "number"
    return ""


def is_clear(name: str, value: AnyValue) -> bool:
    """Whether an attribute may be kept in clear: a listed name with a value of the allowed shape
    (:func:`clear_value`), or a name under a listed prefix with a number (counts and costs)."""
    rule = _clear_rule(name)
    if rule == "exact":
        return clear_value(value)
    return rule == "number" and value.WhichOneof("value") in ("int_value", "double_value")


_ONE_LINE = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def clear_value(value: AnyValue) -> bool:
    """Whether a value has a shape that may be kept in clear (see the module docstring)."""
    which = value.WhichOneof("value")
    if which in ("bool_value", "int_value", "double_value"):
        return True
    if which == "string_value":
        return len(value.string_value) <= MAX_CLEAR_TEXT and not _ONE_LINE.search(value.string_value)
    if which == "array_value":
        return len(value.array_value.values) <= 32 and all(
            item.WhichOneof("value") != "array_value"
            and item.WhichOneof("value") != "kvlist_value"
            and clear_value(item)
            for item in value.array_value.values[:]
        )
    return False


# Most specific first; the OpenTelemetry GenAI names, which every other may also send, last.
CONVENTIONS: tuple[Convention, ...] = (
    langfuse.CONVENTION,
    mlflow.CONVENTION,
    openinference.CONVENTION,
    traceloop.CONVENTION,
    vercel.CONVENTION,
    logfire.CONVENTION,
    genai.CONVENTION,
)
_INDEX = _index(CONVENTIONS)

__all__ = [
    "AGENT",
    "CALL_KINDS",
    "CONVENTIONS",
    "EMBEDDING",
    "LLM",
    "RERANK",
    "RETRIEVAL",
    "TOOL",
    "Convention",
    "Facts",
    "JsonKey",
    "TokenSource",
    "clear_value",
    "content_of",
    "is_clear",
    "read",
    "text",
]
