"""The flow routes' state changes: open a flow, add steps, close it (each a call into ``ingest``, audited there)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from core.errors import InvalidInput
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.recording import ingest

State = ReasoningFlow.State


def start_flow(data: Mapping[str, Any], *, actor: str, opener_only: bool = False) -> tuple[ReasoningFlow, bool]:
    """Open a flow. Returns ``(flow, created)``.

    A client-chosen ``id`` makes retries safe: the same id with the same body returns the
    stored flow (``created`` is False); the same id with another body is a conflict.
    """
    fields = dict(data)
    flow_id = fields.pop("id", None)
    (result,) = ingest.write([ingest.Item(flow_id=flow_id, create=fields)], actor=actor, opener_only=opener_only)
    result.raise_error()
    assert result.flow is not None
    return result.flow, result.status == "created"


def add_step(
    flow_id: uuid.UUID, data: Mapping[str, Any], *, actor: str, opener_only: bool = False
) -> tuple[ReasoningStep, bool]:
    """Append one step to an active flow. Returns ``(step, created)``; see ``add_steps``."""
    steps, created = add_steps(flow_id, [data], actor=actor, batch=False, opener_only=opener_only)
    return steps[0], created


def add_steps(
    flow_id: uuid.UUID,
    items: Sequence[Mapping[str, Any]],
    *,
    actor: str,
    batch: bool = True,
    opener_only: bool = False,
) -> tuple[list[ReasoningStep], bool]:
    """Append steps to an active flow, in order, all or none. Returns ``(steps, created)``.

    Parents (``parent_step_id`` and ``extra_parent_ids``) must be earlier steps of the
    same flow (already stored, or earlier in this batch), so the graph has no cycles.
    Values of the keys named in ``pii_fields`` go to encrypted columns and never into
    the ``inputs``/``outputs`` JSON. Each step gets its own audit event.

    Retries are safe when steps carry client-chosen ids: if every step already exists
    with the same body, the stored steps come back with ``created`` False; any other
    overlap with stored steps is a conflict.

    ``batch``: the request was the batch route, so errors name the step (``steps[2].…``),
    even for a batch of one. ``opener_only``: see ``ingest.write``.
    """
    item = ingest.Item(flow_id=flow_id, steps=items, step_where="steps[{}]." if batch else "")
    (result,) = ingest.write([item], actor=actor, opener_only=opener_only)
    result.raise_error()
    return result.steps, result.status == "created"


def close_flow(
    flow_id: uuid.UUID,
    *,
    state: str,
    actor: str,
    outcome_type: str = "",
    outcome_summary: str = "",
    abort_reason: str = "",
    outcome_metrics: Mapping[str, Any] | None = None,
    opener_only: bool = False,
) -> ReasoningFlow:
    """Complete or abort an active flow; 409 (Conflict) when it is already closed.

    ``outcome_confidence`` is the minimum step confidence: a chain is as strong as its
    weakest step.
    """
    if state not in (State.COMPLETED, State.ABORTED):
        raise InvalidInput("must be 'completed' or 'aborted'", field="flow_state")
    close = {
        "flow_state": state,
        "outcome_type": outcome_type,
        "outcome_summary": outcome_summary,
        "abort_reason": abort_reason,
        "outcome_metrics": dict(outcome_metrics or {}),
    }
    item = ingest.Item(flow_id=flow_id, close=close, replay_close=False)
    (result,) = ingest.write([item], actor=actor, opener_only=opener_only)
    result.raise_error()
    assert result.flow is not None
    return result.flow
