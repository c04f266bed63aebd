"""Flows and steps as the agent writes them. Recording only queues a record: it never waits."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from reasoning_flow_sdk import _turn
from reasoning_flow_sdk._log import logger, warn_limited
from reasoning_flow_sdk.reasoning import extract_reasoning, usage_of

if TYPE_CHECKING:
    from reasoning_flow_sdk.recorder import BaseRecorder

DEFAULT_OUTCOME = "flow_completed"

# The step fields the server takes besides the ones named in ``Flow.step``.
STEP_FIELDS = frozenset(
    {
        "rationale",
        "inputs",
        "outputs",
        "pii_fields",
        "confidence",
        "latency_ms",
        "llm_call_log_ref",
        "experiment_trace_ref",
        "decision_graph_node_ref",
        "memory_claim_ref",
        "span_id",
        "model",
        "input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "started_at",
        "reasoning_content",
    }
)


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class _Held:
    step_id: str
    record: dict[str, Any]
    began: float  # time.monotonic() when the step was recorded
    timing: bool = False  # inside its ``with`` block


def _id_of(parent: Step | str | uuid.UUID) -> str:
    return parent.id if isinstance(parent, Step) else str(parent)


class Step:
    """A recorded step. ``with flow.step(...) as s:`` times its block into ``latency_ms`` (unless
    given) and scopes children: ``s.step(...)``."""

    __slots__ = ("flow", "id", "kind")

    def __init__(self, flow: Flow, step_id: str, kind: str) -> None:
        self.flow = flow
        self.id = step_id
        self.kind = kind

    def step(self, kind: str, summary_text: str, **fields: Any) -> Step:
        """A child of this step."""
        return self.flow.step(kind, summary_text, parent=self, **fields)

    def llm_step(self, response: Any = None, **fields: Any) -> Step:
        return self.flow.llm_step(response, parent=self, **fields)

    def __enter__(self) -> Step:
        self.flow._timing(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.flow._timed(self)

    def __repr__(self) -> str:
        return f"<Step {self.kind} {self.id}>"


class Flow:
    """An open flow. Leaving its ``with`` block closes it: ``completed`` (with the outcome set by
    ``set_outcome``, else ``flow_completed``), or ``aborted`` when an exception leaves the block
    (the reason is the exception's class name; the exception propagates unchanged)."""

    def __init__(
        self,
        recorder: BaseRecorder,
        fields: dict[str, Any],
        flow_id: str,
        *,
        emit: Callable[[Any], None],
        on_close: Callable[[Flow, Mapping[str, Any]], None],
        on_hold: Callable[[Flow], None] = lambda flow: None,
    ) -> None:
        self.recorder = recorder
        # What the recorder gave this flow to report with: each record, its close, and a step held back.
        self._emit = emit
        self._on_close = on_close
        self._on_hold = on_hold
        # The newest step, held back until the flow records anything else, the recorder's batcher
        # takes it (a plain step: within ``flush_interval``) or a flush: when it is a ``with``
        # block's (``timing``), the block's end sends it with the block's duration.
        self._held: _Held | None = None
        self._hold_lock = threading.Lock()
        self.id = flow_id
        self.trace_id: str = fields["trace_id"]
        self.agent: str | None = fields.get("agent") or None
        self.trigger_type: str = fields.get("trigger_type", "")
        self.closed = False
        self.step_count = 0
        self._outcome: dict[str, Any] = {}
        self._turn_token: Any = None

    # --- steps -----------------------------------------------------------------------------
    def step(
        self,
        kind: str,
        summary_text: str,
        *,
        agent: str | None = None,
        parent: Step | str | uuid.UUID | None = None,
        extra_parents: Iterable[Step | str | uuid.UUID] = (),
        step_id: str | uuid.UUID | None = None,
        **fields: Any,
    ) -> Step:
        """Record a step (``summary_text``: ≤ 280 plain characters that describe the step, not the
        patient's data). Other keyword arguments are the step route's fields (``confidence``,
        ``inputs``, ``outputs``, ``pii_fields``, ``rationale``, ``latency_ms``, ``model``,
        token counts, back-refs, ``reasoning_content``, …)."""
        sid = str(step_id) if step_id else str(uuid.uuid4())
        try:
            if self.closed:
                warn_limited("step-after-close", "a step was recorded on closed flow %s; ignored", self.id)
                return Step(self, sid, kind)
            unknown = set(fields) - STEP_FIELDS
            if unknown:
                warn_limited("unknown-step-field", "unknown step fields ignored: %s", ", ".join(sorted(unknown)))
            record: dict[str, Any] = {
                "id": sid,
                "kind": kind,
                "agent": agent or self.agent or "agent",
                "summary_text": summary_text,
                "started_at": _now(),
            }
            for name, value in fields.items():
                if name in STEP_FIELDS and value is not None:
                    record[name] = value
            if parent is not None:
                record["parent_step_id"] = _id_of(parent)
            extra = [_id_of(other) for other in extra_parents]
            if extra:
                record["extra_parent_ids"] = extra
            self.step_count += 1
            self.release()
            with self._hold_lock:
                self._held = _Held(sid, record, time.monotonic())
            self._on_hold(self)
        except Exception:  # never raise into the agent
            logger.exception("could not record a reasoning step")
        return Step(self, sid, kind)

    def release(self, *, untimed_only: bool = False) -> bool:
        """Record the step held back, as it is; with ``untimed_only``, only one outside a ``with``
        block. True when a step is still held."""
        with self._hold_lock:
            held = self._held
            if held is None or (untimed_only and held.timing):
                return held is not None
            self._held = None
        self._emit(("step", self.id, held.record))
        return False

    def _timing(self, step: Step) -> None:
        with self._hold_lock:
            if self._held is not None and self._held.step_id == step.id:
                self._held.timing = True

    def _timed(self, step: Step) -> None:
        """The end of ``step``'s ``with`` block: when it is still held back (nothing else was
        recorded in the block), it leaves now with the block's duration as ``latency_ms``."""
        try:
            with self._hold_lock:
                held = self._held
                if held is None or held.step_id != step.id:
                    return
                self._held = None
            held.record.setdefault("latency_ms", round((time.monotonic() - held.began) * 1000))
            self._emit(("step", self.id, held.record))
        except Exception:
            logger.exception("could not record a reasoning step's duration")

    def llm_step(
        self,
        response: Any = None,
        *,
        summary_text: str | None = None,
        thinking: bool = False,
        kind: str = "llm_prompt",
        **fields: Any,
    ) -> Step:
        """A model call from an OpenAI-style chat completion (a dict or an SDK object): its raw
        reasoning becomes the step's ``reasoning_content`` (encrypted by the server, never shown
        to patients), the model and token counts are filled in, and ``summary_text`` never holds
        the content ("Model call to <model>" unless given)."""
        try:
            _answer, reasoning = extract_reasoning(response, thinking=thinking)
            usage = usage_of(response)
            for name, value in usage.items():
                fields.setdefault(name, value)
            if reasoning:
                fields.setdefault("reasoning_content", reasoning)
            model = fields.get("model")
            summary = summary_text or (f"Model call to {model}" if model else "Model call")
            return self.step(kind, summary[:280], **fields)
        except Exception:
            logger.exception("could not record a model call step")
            return Step(self, str(uuid.uuid4()), kind)

    # --- the end -----------------------------------------------------------------------------
    def set_outcome(
        self,
        outcome_type: str | None = None,
        *,
        outcome_summary: str | None = None,
        outcome_metrics: Mapping[str, Any] | None = None,
    ) -> None:
        """What the close reports when the block ends normally."""
        if outcome_type:
            self._outcome["outcome_type"] = outcome_type
        if outcome_summary:
            self._outcome["outcome_summary"] = outcome_summary
        if outcome_metrics:
            self._outcome["outcome_metrics"] = dict(outcome_metrics)

    def complete(
        self,
        outcome_type: str | None = None,
        *,
        outcome_summary: str | None = None,
        outcome_metrics: Mapping[str, Any] | None = None,
    ) -> None:
        self.set_outcome(outcome_type, outcome_summary=outcome_summary, outcome_metrics=outcome_metrics)
        close = {"flow_state": "completed", "outcome_type": DEFAULT_OUTCOME, **self._outcome}
        self._close(close)

    def abort(self, reason: str = "aborted") -> None:
        self._close({"flow_state": "aborted", "abort_reason": reason[:200]})

    def _close(self, close: dict[str, Any]) -> None:
        try:
            if self.closed:
                return
            self.closed = True
            self.release()
            close["ended_at"] = _now()
            self._emit(("close", self.id, close))
            self._on_close(self, close)
        except Exception:
            logger.exception("could not record a flow close")

    def __enter__(self) -> Flow:
        self._turn_token = _turn.set_turn_if_unset(self.trace_id)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _turn.reset_turn(self._turn_token)
        if exc_type is None:
            self.complete()
        else:
            self.abort(exc_type.__name__)

    async def __aenter__(self) -> Flow:
        return self.__enter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"<Flow {self.trigger_type} {self.id}>"
