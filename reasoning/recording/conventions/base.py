"""The vocabulary every convention module declares itself in: the step kinds it maps spans to
and :class:`Convention`, its attribute names (the reading is in ``reasoning.recording.conventions``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Step kinds the conventions map to. A span of kind AGENT opens a flow of its own (when it is
# not the root already); CALL_KINDS are the units of work a root span may be by itself.
AGENT = "agent"
LLM = "llm_prompt"
TOOL = "tool_call"
EMBEDDING = "embedding"
RETRIEVAL = "retrieval"
RERANK = "rerank"
CALL_KINDS = frozenset({LLM, TOOL, EMBEDDING, RETRIEVAL, RERANK})

# A token count read from inside a JSON object attribute: (attribute, key in its object).
JsonKey = tuple[str, str]
TokenSource = str | JsonKey


@dataclass(frozen=True)
class Convention:
    """The attribute names of one convention. Every name list is in order of preference."""

    name: str
    # attribute -> {value (case-insensitive) -> kind}: the first attribute present whose value is known.
    kinds: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    model: Sequence[str] = ()
    input_tokens: Sequence[TokenSource] = ()
    output_tokens: Sequence[TokenSource] = ()
    reasoning_tokens: Sequence[TokenSource] = ()
    cached_tokens: Sequence[TokenSource] = ()
    tool: Sequence[str] = ()
    agent: Sequence[str] = ()
    session: Sequence[str] = ()
    user: Sequence[str] = ()
    # A label-safe error type (a class name, an HTTP status), when the span failed.
    error_type: Sequence[str] = ()
    # attribute -> values (case-insensitive) that mean the span failed (Langfuse's level ERROR).
    error_when: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Kept in clear (with a value of the allowed shape): exact names, then prefixes.
    clear: frozenset[str] = frozenset()
    clear_prefixes: tuple[str, ...] = ()
    # Content this convention knows: exact names, or prefixes ending in "." (a family).
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def direction(self, name: str) -> bool | None:
        """True for output content, False for input content, None when this convention does not know it."""
        for is_output, names in ((False, self.inputs), (True, self.outputs)):
            for known in names:
                if name == known or (known.endswith(".") and name.startswith(known)):
                    return is_output
        return None

    def family(self, name: str) -> str | None:
        """The family (prefix without its dot) that ``name`` belongs to, or None."""
        for known in (*self.inputs, *self.outputs):
            if known.endswith(".") and name.startswith(known):
                return known[:-1]
        return None
