"""The correlation id of an agent turn: one id reconstructs the turn across agents and threads.

Order: the current OpenTelemetry span's trace id (when ``opentelemetry-api`` is installed and
a span is active), else the ``contextvars`` turn id (``new_turn()``), else a new id per flow.
A flow sets the turn id for its block when none is set, so agents called inside it share it.
Threads do not inherit context variables: start them with ``contextvars.copy_context().run``
or pass ``trace_id=`` to the flow.
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

_turn: contextvars.ContextVar[str | None] = contextvars.ContextVar("reasoning_flow_turn", default=None)

try:  # optional dependency
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - depends on the environment
    _otel_trace = None  # type: ignore[assignment]


def new_turn(turn_id: str | None = None) -> str:
    """Start a turn in the current context and return its id (32 hex digits unless given)."""
    value = turn_id or uuid.uuid4().hex
    _turn.set(value)
    return value


def current_turn() -> str | None:
    return _turn.get()


@contextmanager
def turn(turn_id: str | None = None) -> Iterator[str]:
    """``with turn() as turn_id:`` — a turn for the block; the previous one afterwards."""
    value = turn_id or uuid.uuid4().hex
    token = _turn.set(value)
    try:
        yield value
    finally:
        _turn.reset(token)


def otel_trace_id() -> str | None:
    if _otel_trace is None:
        return None
    context = _otel_trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}"


def resolve_trace_id(explicit: str | None = None) -> str:
    return explicit or otel_trace_id() or current_turn() or uuid.uuid4().hex


def set_turn_if_unset(trace_id: str) -> contextvars.Token[str | None] | None:
    return _turn.set(trace_id) if _turn.get() is None else None


def reset_turn(token: contextvars.Token[str | None] | None) -> None:
    if token is not None:
        # ValueError: the flow closed in another context than it opened in.
        with contextlib.suppress(ValueError):
            _turn.reset(token)
