"""The recorders: ``ReasoningFlowRecorder`` (a sender thread), ``AsyncReasoningFlowRecorder``
(``aio.py``: a sender task) and the no-op recorder both become when capture is off."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx

from reasoning_flow_sdk import _turn
from reasoning_flow_sdk._config import Settings, env_flag
from reasoning_flow_sdk._core import (
    SPOOL_CHECK_SECONDS,
    Batch,
    Pipeline,
    Record,
    Verdict,
    backoff,
    judge,
    path_of,
)
from reasoning_flow_sdk._flow import Flow, _now
from reasoning_flow_sdk._log import log_limited, logger, warn_limited, warn_once
from reasoning_flow_sdk._spool import SpoolFile

CAPTURE_VARIABLE = "REASONING_FLOW_CAPTURE_ENABLED"
_SUMMARY_MEMORY = 100_000  # flows remembered for record_outcome / session_summary


def capture_enabled(enabled: bool | None, args: tuple[Any, ...] = (), kwargs: Mapping[str, Any] | None = None) -> bool:
    """Whether a recorder built with these arguments captures.

    ``enabled`` decides when given; else ``REASONING_FLOW_CAPTURE_ENABLED`` when it is set; else
    capture is on exactly when the code names both the server and the token
    (``ReasoningFlowRecorder(base_url=…, token=…)``, as the quick start does): an agent that
    passes them means to record. A recorder that names both while capture is switched off says
    so once (``capture-off``), so "nothing arrives" is never a silent mystery.
    """
    given = dict(kwargs or {})
    url = args[0] if args else given.get("base_url")
    token = args[1] if len(args) > 1 else given.get("token")
    named = url is not None and token is not None
    if enabled is None:
        if os.environ.get(CAPTURE_VARIABLE) is None:
            return named
        enabled = env_flag(CAPTURE_VARIABLE, False)
    if not enabled and named:
        warn_once(
            "capture-off",
            "reasoning flow capture is off (%s=%s or enabled=False): this recorder, built with a server "
            "URL and a token, records nothing",
            CAPTURE_VARIABLE,
            os.environ.get(CAPTURE_VARIABLE, "unset"),
        )
    return enabled


class BaseRecorder:
    """The API every recorder has. Nothing here raises into the agent."""

    def __init__(self) -> None:
        self._decisions: OrderedDict[str, str] = OrderedDict()  # flow id → decision type
        self._outcomes: dict[str, bool | None] = {}
        self._by_type: dict[str, int] = {}
        self._summary_lock = threading.Lock()
        # Flows holding a step back (``Flow.release``): the batcher sends the plain ones, flush and
        # close all of them. Held strongly: a flow the agent dropped still delivers its step.
        self._holding: set[Flow] = set()
        self._holding_lock = threading.Lock()

    # --- recording -----------------------------------------------------------------------
    def flow(
        self,
        trigger_type: str,
        trigger_ref: str = "",
        *,
        agent: str | None = None,
        trigger_summary: str | None = None,
        session_id: str | None = None,
        patient_id: str | uuid.UUID | None = None,
        trace_id: str | None = None,
        dispatched_from_backlog: bool | None = None,
        flow_id: str | uuid.UUID | None = None,
    ) -> Flow:
        """Open a flow; use it as a context manager (``with`` or ``async with``)."""
        fid = str(flow_id) if flow_id else str(uuid.uuid4())
        fields: dict[str, Any] = {
            "trigger_type": trigger_type,
            "trace_id": _safe_trace_id(trace_id),
            "started_at": _now(),  # the flow's real start; the batch arrives later
        }
        try:
            optional = {
                "trigger_ref": trigger_ref,
                "agent": agent,
                "trigger_summary": trigger_summary,
                "session_id": session_id,
                "patient_id": str(patient_id) if patient_id else None,
                "dispatched_from_backlog": dispatched_from_backlog,
            }
            fields.update({name: value for name, value in optional.items() if value not in (None, "")})
            flow = self._new_flow(fields, fid)
            self._remember(fid, trigger_type)
            self._record(("open", fid, fields))
            return flow
        except Exception:
            logger.exception("could not record a flow")
            return self._new_flow(fields, fid)

    def decision(
        self,
        agent_id: str,
        decision_type: str,
        rationale: str,
        confidence: float | None = None,
        inputs: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        correlation_id: str | None = None,
    ) -> str:
        """Record one decision (a flow of one ``decision`` step) and return its flow id at once."""
        flow = self.flow(decision_type, agent=agent_id, session_id=session_id, trace_id=correlation_id)
        flow.step(
            "decision",
            f"Decision: {decision_type}"[:280],
            rationale=rationale,
            confidence=confidence,
            inputs=dict(inputs) if inputs else None,
            # A decision's inputs may name the patient: all of them are stored encrypted.
            pii_fields=sorted(inputs) if inputs else None,
        )
        flow.complete("decision_recorded")
        return flow.id

    def record_outcome(self, flow_id: str | uuid.UUID, outcome: str, correct: bool | None = None) -> bool:
        """The observed outcome of a closed flow this process recorded, once: True the first time
        (False after, and for a flow this process did not record or no longer remembers).

        ``outcome`` is a label or one line of plain text (≤ 280 characters, checked by the
        server's summary guard); ``correct`` is true, false or None (not known). It is sent to
        ``POST /api/reasoning/outcomes`` behind the flow's own records, queued, spooled and
        retried like them, so the server's session accuracy and drift count it; it is also kept
        in this process's ``session_summary()``. The server records a flow's outcome once."""
        key = str(flow_id)
        with self._summary_lock:
            if key not in self._decisions:
                warn_limited("outcome-unknown-flow", "record_outcome: flow %s was not recorded by this process", key)
                return False
            if key in self._outcomes:
                return False
            self._outcomes[key] = correct
        try:
            self._record(("outcome", key, {"flow_id": key, "outcome": outcome, "correct": correct}))
        except Exception:
            logger.exception("could not record an outcome")
        return True

    def session_summary(self) -> dict[str, Any]:
        """What this process recorded, in the shape of seed 002's session summary."""
        with self._summary_lock:
            with_outcome = len(self._outcomes)
            correct = sum(1 for value in self._outcomes.values() if value is True)
            incorrect = sum(1 for value in self._outcomes.values() if value is False)
            return {
                "total_decisions": sum(self._by_type.values()),
                "with_outcome": with_outcome,
                "correct": correct,
                "incorrect": incorrect,
                "accuracy": correct / with_outcome if with_outcome else None,
                "decision_types": dict(self._by_type),
            }

    def stats(self) -> dict[str, int]:
        return {}

    def refused(self, flow_id: str | uuid.UUID) -> bool:
        return False

    def _new_flow(self, fields: dict[str, Any], flow_id: str) -> Flow:
        return Flow(self, fields, flow_id, emit=self._record, on_close=self._flow_closed, on_hold=self._hold)

    def _hold(self, flow: Flow) -> None:
        with self._holding_lock:
            self._holding.add(flow)

    def _release_held(self, *, untimed_only: bool = False) -> None:
        """The steps held back by this recorder's flows go into the queue now (with
        ``untimed_only``, all but those inside a ``with`` block)."""
        with self._holding_lock:
            flows = list(self._holding)
        for flow in flows:
            if not flow.release(untimed_only=untimed_only):
                with self._holding_lock:
                    self._holding.discard(flow)

    # --- what subclasses implement -------------------------------------------------------
    def _record(self, record: Record) -> None:
        raise NotImplementedError

    def _flow_closed(self, flow: Flow, close: Mapping[str, Any]) -> None:
        return None

    def _remember(self, flow_id: str, decision_type: str) -> None:
        with self._summary_lock:
            self._decisions[flow_id] = decision_type
            self._by_type[decision_type] = self._by_type.get(decision_type, 0) + 1
            while len(self._decisions) > _SUMMARY_MEMORY:
                old, _ = self._decisions.popitem(last=False)
                self._outcomes.pop(old, None)

    # --- the research loop -----------------------------------------------------------------
    def research(self, token: str | None = None) -> Any:
        """A ``ResearchLoopClient`` on this recorder's server (``reasoning.admin`` token)."""
        from reasoning_flow_sdk.research import ResearchLoopClient

        return ResearchLoopClient(base_url=getattr(self, "base_url", None), token=token)


def _safe_trace_id(explicit: str | None) -> str:
    try:
        return _turn.resolve_trace_id(explicit)
    except Exception:
        return uuid.uuid4().hex


class NoOpRecorder(BaseRecorder):
    """Capture is off: the same API, no network, no disk, no thread."""

    enabled = False
    base_url: str | None = None

    def _record(self, record: Record) -> None:
        return None

    def _hold(self, flow: Flow) -> None:
        return None  # nothing is sent: nothing to remember

    def stats(self) -> dict[str, int]:
        return {
            "recorded_flows": 0,
            "recorded_steps": 0,
            "sent": 0,
            "retried": 0,
            "spooled": 0,
            "dropped": 0,
            "rejected": 0,
            "queued": 0,
        }

    def flush(self, timeout: float = 5.0) -> bool:
        return True

    def close(self, timeout: float = 5.0) -> bool:
        return True

    def __enter__(self) -> NoOpRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Recording(BaseRecorder):
    """A recorder with a pipeline (the sync and async recorders differ only in their sender)."""

    enabled = True

    def __init__(self, base_url: str | None, token: str | None, spool_dir: Any, **options: Any) -> None:
        super().__init__()
        self.settings = Settings.resolve(base_url, token, spool_dir, **options)
        self.base_url = self.settings.base_url
        self._pipeline = Pipeline(self.settings)
        self._closed = False
        if self.settings.base_url is None:
            warn_limited("no-url", "REASONING_FLOW_URL is not set: flows are spooled in %s", self.settings.spool_dir)
        _live.add(self)

    def _record(self, record: Record) -> None:
        if self._closed:
            warn_limited("closed", "a reasoning flow record arrived after close(); dropped")
            if record[0] == "step":
                self._pipeline.stats.add(dropped=1)
            return
        kind = record[0]
        stats = self._pipeline.stats
        if kind != "close":
            with stats.lock:
                if kind == "step":
                    stats.recorded_steps += 1
                elif kind == "outcome":
                    stats.recorded_outcomes += 1
                else:
                    stats.recorded_flows += 1
        if self._pipeline.put(record) and len(self._pipeline.queue) >= self.settings.batch_steps:
            self._kick()

    def _kick(self) -> None:
        raise NotImplementedError

    def refused(self, flow_id: str | uuid.UUID) -> bool:
        """Whether the server refused (a 4xx, not retried) some part of this flow: ``flush()``
        says nothing is pending, this says whether what left was stored."""
        with self._pipeline.refused_lock:
            return str(flow_id) in self._pipeline.refused

    def stats(self) -> dict[str, int]:
        try:
            return self._pipeline.snapshot()
        except Exception:
            logger.exception("could not read the recorder's counters")
            return {}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.settings.token}", "Content-Type": "application/json"}

    def _unsendable(self) -> Verdict | None:
        if self.settings.base_url is None or self.settings.token is None:
            missing = "REASONING_FLOW_URL" if self.settings.base_url is None else "REASONING_FLOW_TOKEN"
            warn_limited(
                "not-configured", "%s is not set: batches stay in the spool %s", missing, self.settings.spool_dir
            )
            return Verdict(retry=True)
        return None

    def _at_exit(self) -> None:
        raise NotImplementedError


class ReasoningFlowRecorder(_Recording):
    """Records flows from synchronous code; a background thread sends them.

    ``ReasoningFlowRecorder(base_url=…, token=…, spool_dir=…)``; each falls back to
    ``REASONING_FLOW_URL``, ``REASONING_FLOW_TOKEN``, ``REASONING_FLOW_SPOOL_DIR``. Whether it
    captures: ``capture_enabled`` (``enabled``, else ``REASONING_FLOW_CAPTURE_ENABLED`` when
    set, else on when the URL and token are passed here); when it does not, this is a
    ``NoOpRecorder``.
    """

    def __new__(cls, *args: Any, enabled: bool | None = None, **kwargs: Any) -> Any:
        if not capture_enabled(enabled, args, kwargs):
            return NoOpRecorder()
        return super().__new__(cls)

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        spool_dir: Any = None,
        *,
        enabled: bool | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, token, spool_dir, **options)
        self._wake = threading.Event()
        self._work = threading.Event()
        self._stopping = threading.Event()
        self._client: httpx.Client | None = None
        self._threads = [
            threading.Thread(target=self._batch_loop, name="reasoning-flow-batcher", daemon=True),
            threading.Thread(target=self._deliver_loop, name="reasoning-flow-sender", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _kick(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    # --- flush and close -----------------------------------------------------------------
    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds for everything recorded to reach the server; True if it did."""
        try:
            self._release_held()
            deadline = time.monotonic() + max(timeout, 0.0)
            self._wake.set()
            while not self._pipeline.idle():
                if time.monotonic() >= deadline:
                    return False
                if self._pipeline.queue:
                    self._wake.set()
                self._work.set()
                time.sleep(0.005)
            return True
        except Exception:
            logger.exception("flush failed")
            return False

    def close(self, timeout: float = 5.0) -> bool:
        """Flush (up to ``timeout``), stop the sender, spool what is left. Never raises."""
        if self._closed:
            return self._pipeline.idle()
        try:
            started = time.monotonic()
            # While the server is known to be down, waiting for it only delays the exit: spool.
            self._release_held()
            delivered = False if self._pipeline.attempt > 0 else self.flush(timeout)
            self._closed = True
            self._stopping.set()
            self._wake.set()
            self._work.set()
            for thread in self._threads:
                thread.join(max(0.05, timeout - (time.monotonic() - started)))
            self._pipeline.spill_everything()
            if self._client is not None:
                self._client.close()
            _live.discard(self)
            return delivered
        except Exception:
            logger.exception("close failed")
            return False

    def _at_exit(self) -> None:
        self.close(timeout=5.0)

    def __enter__(self) -> ReasoningFlowRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the two threads -------------------------------------------------------------------
    def _batch_loop(self) -> None:
        pipeline = self._pipeline
        while not self._stopping.is_set():
            self._wake.wait(self.settings.flush_interval)
            self._wake.clear()
            try:
                self._release_held(untimed_only=True)
                if pipeline.queue:
                    batches = pipeline.form_batches()
                    if batches and pipeline.accept(batches):
                        self._work.set()
            except Exception:
                logger.exception("the reasoning flow batcher failed; retrying")
                self._stopping.wait(1.0)

    def _deliver_loop(self) -> None:
        pipeline = self._pipeline
        last_look = 0.0
        while not self._stopping.is_set():
            try:
                batch = pipeline.outbox_head()
                if batch is not None:
                    self._deliver(batch)
                    continue
                if pipeline.spooling or time.monotonic() - last_look > SPOOL_CHECK_SECONDS:
                    last_look = time.monotonic()
                    if self._drain():
                        continue
                self._work.wait(SPOOL_CHECK_SECONDS)
                self._work.clear()
            except Exception:
                logger.exception("the reasoning flow sender failed; retrying")
                self._stopping.wait(1.0)

    def _deliver(self, batch: Batch) -> None:
        verdict = self._send(batch.body, batch.steps)
        spill = self._pipeline.settle(batch, verdict)
        if verdict.retry:
            self._pipeline.write_to_spool(spill)
            self._stopping.wait(backoff(self._pipeline.attempt, verdict.retry_after))

    def _drain(self) -> bool:
        """Send the spool oldest first; False when there was nothing to do."""
        pipeline = self._pipeline
        if not pipeline.spool.try_acquire():
            self._stopping.wait(0.5)  # another process is draining it
            return pipeline.spooling
        try:
            worked = False
            while not self._stopping.is_set():
                files = pipeline.spool.files()
                if not files:
                    pipeline.spool_drained()
                    if not pipeline.spooling:
                        return worked
                    continue
                for spooled in files:
                    if self._stopping.is_set():
                        return True
                    worked = True
                    if not self._send_spooled(spooled):
                        return True
            return worked
        finally:
            pipeline.spool.release()

    def _send_spooled(self, spooled: SpoolFile) -> bool:
        body = self._pipeline.spool.read(spooled)
        if body is None:
            return True
        verdict = self._send(body, spooled.steps)
        self._pipeline.settle_spooled(spooled, verdict)
        if verdict.retry:
            self._stopping.wait(backoff(self._pipeline.attempt, verdict.retry_after))
            return False
        return True

    def _send(self, body: bytes, steps: int) -> Verdict:
        unsendable = self._unsendable()
        if unsendable is not None:
            return unsendable
        try:
            if self._client is None:
                self._client = httpx.Client(
                    base_url=self.settings.base_url or "", headers=self._headers(), timeout=self.settings.timeout
                )
            response = self._client.post(path_of(body), content=body)
        except Exception as error:
            log_limited(
                logging.WARNING, "unreachable", "reasoning flow server unreachable (%s): spooling", type(error).__name__
            )
            return Verdict(retry=True)
        verdict = judge(response.status_code, response.content, body, response.headers.get("retry-after"), steps)
        if verdict.retry:
            log_limited(
                logging.WARNING, "retry-status", "reasoning flow server answered %d: spooling", response.status_code
            )
        return verdict


# Recorders still open at interpreter exit are closed (flushed, the rest spooled).
_live: weakref.WeakSet[_Recording] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for recorder in list(_live):
        with contextlib.suppress(Exception):  # exit must go on
            recorder._at_exit()
