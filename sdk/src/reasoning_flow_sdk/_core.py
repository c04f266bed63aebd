"""What both recorders share: the record queue, batches, the outbox, the spool, and the rules.

The agent's thread only appends a record to a ``deque`` (microseconds). A *batcher* (thread or
task) turns queued records into ingest batches; a *deliverer* sends them. Delivery is ordered:

1. A new batch goes to the in-memory outbox (at most ``OUTBOX_BYTES``) while the spool is
   empty; otherwise to the spool, so it cannot overtake older spooled batches.
2. The deliverer sends the outbox head. 2xx: done. 408, 429, 5xx or no answer: the whole outbox
   is spooled (each batch under its creation sequence, so order holds) and the spool is
   drained, oldest first, with back-off (``Retry-After`` honoured) until it is empty. Another
   4xx: the batch is dropped, counted as rejected and logged with the server's message.
3. A 207 answer rejects single items: those are dropped and counted; the rest arrived.

Every id is chosen here, so a batch sent twice (a lost answer, two deliverers racing at
shutdown) is a replay on the server: nothing is stored twice.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reasoning_flow_sdk._config import Settings
from reasoning_flow_sdk._log import log_limited, warn_limited
from reasoning_flow_sdk._spool import Spool, SpoolFile

INGEST_PATH = "/api/reasoning/ingest"
# Outcomes (``record_outcome``) go to the outcome batch route, in batches of their own that
# queue, spool and retry like the flows' (a batch's body says which route it is for).
OUTCOMES_PATH = "/api/reasoning/outcomes"
MAX_OUTCOMES_PER_BATCH = 1000  # the outcome route's limit
_OUTCOMES_PREFIX = b'{"outcomes":'
MAX_FLOWS_PER_BATCH = 100  # the ingest route's limits
BATCH_BYTES = 4 * 2**20  # well under the route's default 16 MiB
OUTBOX_BYTES = 8 * 2**20  # batches held in memory for the network; past this, the spool
RETRY_STATUSES = {408, 429}
BACKOFF_FIRST = 0.2
BACKOFF_MAX = 5.0
RETRY_AFTER_MAX = 60.0
REFUSED_MEMORY = 10_000
SPOOL_CHECK_SECONDS = 2.0  # how often an idle deliverer looks for batches other processes left

# A record: ("open" | "step" | "close" | "outcome", flow id, fields).
Record = tuple[str, str, dict[str, Any]]


@dataclass
class Batch:
    seq: str
    body: bytes
    steps: int
    flows: int


@dataclass
class Verdict:
    """What to do with a batch after one attempt."""

    retry: bool = False
    retry_after: float | None = None
    sent_steps: int = 0
    sent_flows: int = 0  # flows whose close the server stored
    rejected_steps: int = 0
    rejected_items: int = 0
    refused: list[str] = field(default_factory=list)  # ids of the flows some piece of which was refused
    sent_outcomes: int = 0
    rejected_outcomes: int = 0


@dataclass
class Stats:
    recorded_flows: int = 0
    recorded_steps: int = 0
    sent: int = 0  # steps the server stored (created or replayed)
    sent_flows: int = 0  # flows whose close the server stored
    batches_sent: int = 0
    retried: int = 0  # delivery attempts that failed and will be retried
    spooled: int = 0  # steps written to the spool
    dropped: int = 0  # steps lost here: queue full, spool full, unwritable spool
    rejected: int = 0  # steps the server refused (4xx), not retried
    rejected_items: int = 0  # pieces of flows (one per flow and batch) the server refused
    recorded_outcomes: int = 0
    sent_outcomes: int = 0  # outcomes the server recorded (or had recorded already: a retry)
    rejected_outcomes: int = 0  # outcomes the server refused (an active flow, a second outcome, …)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)


_sequence = itertools.count()
_last_ns = 0
_seq_lock = threading.Lock()


def next_seq() -> str:
    """Increasing within a process; across processes, by creation time."""
    global _last_ns
    with _seq_lock:
        _last_ns = max(time.time_ns(), _last_ns + 1)
        return f"{_last_ns:020d}-{os.getpid()}-{next(_sequence)}"


def encode(payload: Any) -> bytes:
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str).encode()
    except UnicodeEncodeError:  # a lone surrogate: let the server name the field
        return json.dumps(payload, separators=(",", ":"), default=str).encode()


def _estimate(fields: dict[str, Any]) -> int:
    return 256 + sum(len(value) for value in fields.values() if isinstance(value, str))


def items_of(body: bytes) -> list[tuple[str, int, bool]]:
    """Each item's flow id, step count and whether it closes its flow."""
    try:
        return [
            (str(item.get("id")), len(item.get("steps") or []), "close" in item) for item in json.loads(body)["flows"]
        ]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def path_of(body: bytes) -> str:
    """The route a batch is for: outcome batches begin ``{"outcomes":``."""
    return OUTCOMES_PATH if body.startswith(_OUTCOMES_PREFIX) else INGEST_PATH


def judge(status: int | None, answer: bytes, body: bytes, retry_after: str | None, steps: int) -> Verdict:
    """Classify one attempt (``status`` None: no answer)."""
    if status is None or status in RETRY_STATUSES or status >= 500:
        return Verdict(retry=True, retry_after=_seconds(retry_after))
    if body.startswith(_OUTCOMES_PREFIX):
        return _judge_outcomes(status, answer, body)
    items = items_of(body)
    closes = sum(1 for _, _, closing in items if closing)
    if 200 <= status < 300:
        rejected_steps = rejected_items = rejected_closes = 0
        refused: list[str] = []
        try:
            results = json.loads(answer).get("flows") or []
        except (ValueError, AttributeError):
            results = []
        for result in results:
            if isinstance(result, dict) and result.get("status") == "rejected":
                index = result.get("index")
                flow_id, lost, closing = (
                    items[index] if isinstance(index, int) and 0 <= index < len(items) else ("", 0, False)
                )
                refused.append(flow_id)
                rejected_steps += lost
                rejected_items += 1
                rejected_closes += closing
                log_limited(
                    logging.WARNING,
                    "rejected-item",
                    "reasoning flow %s was rejected by the server (%d steps dropped): %s",
                    result.get("id"),
                    lost,
                    _short(result.get("errors")),
                )
        return Verdict(
            sent_steps=steps - rejected_steps,
            sent_flows=closes - rejected_closes,
            rejected_steps=rejected_steps,
            rejected_items=rejected_items,
            refused=refused,
        )
    warn_limited(
        f"http-{status}",
        "the server refused a batch of %d flow pieces / %d steps with HTTP %d (not retried): %s",
        len(items),
        steps,
        status,
        _short(answer[:500].decode(errors="replace")),
    )
    return Verdict(rejected_steps=steps, rejected_items=len(items), refused=[flow_id for flow_id, _, _ in items])


def _judge_outcomes(status: int, answer: bytes, body: bytes) -> Verdict:
    """An outcome batch's answer: each item recorded or refused. ``already_recorded`` counts as
    delivered (a retry after a lost answer finds its own outcome stored); other refusals are
    logged with the reason and not retried."""
    try:
        sent = len(json.loads(body)["outcomes"])
    except (ValueError, KeyError, TypeError):
        sent = 0
    if not 200 <= status < 300:
        warn_limited(
            f"outcomes-http-{status}",
            "the server refused a batch of %d outcomes with HTTP %d (not retried): %s",
            sent,
            status,
            _short(answer[:500].decode(errors="replace")),
        )
        return Verdict(rejected_outcomes=sent)
    try:
        results = json.loads(answer).get("outcomes") or []
    except (ValueError, AttributeError):
        results = []
    rejected = 0
    for result in results:
        if not isinstance(result, dict) or result.get("status") != "rejected":
            continue
        if result.get("reason") == "already_recorded":
            continue
        rejected += 1
        log_limited(
            logging.WARNING,
            "rejected-outcome",
            "the outcome of reasoning flow %s was refused by the server (%s): %s",
            result.get("flow_id"),
            result.get("reason"),
            _short(result.get("errors")),
        )
    return Verdict(sent_outcomes=sent - rejected, rejected_outcomes=rejected)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:500]


def _seconds(header: str | None) -> float | None:
    if not header:
        return None
    try:
        return min(max(float(header), 0.0), RETRY_AFTER_MAX)
    except ValueError:
        return None


def backoff(attempt: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return retry_after
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(attempt, 10))) * random.uniform(0.5, 1.0)


class Pipeline:
    """The queue → batch → outbox / spool state, shared by the batcher and the deliverer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.queue: deque[Record] = deque()
        self.stats = Stats()
        self.spool = Spool(settings.spool_dir, settings.spool_max_bytes)
        self.outbox: deque[Batch] = deque()
        self.outbox_bytes = 0
        self.lock = threading.Lock()
        # Batches left by an earlier process go first: until they are delivered, new ones queue
        # behind them in the spool.
        self.spooling = not self.spool.is_empty()
        self.forming = 0
        self.in_flight = 0
        self.attempt = 0
        self._open_fields: dict[str, dict[str, Any]] = {}
        self.refused: OrderedDict[str, None] = OrderedDict()  # the last REFUSED_MEMORY flows refused
        self.refused_lock = threading.Lock()
        self._queue_full_logged = False

    # --- the agent's side ----------------------------------------------------------------
    def put(self, record: Record) -> bool:
        """Queue a record; False (counted as dropped) when the sender is that far behind."""
        if len(self.queue) >= self.settings.max_queue:
            if record[0] == "step":
                self.stats.add(dropped=1)
            warn_limited("queue-full", "the reasoning flow queue is full (%d records); dropping", len(self.queue))
            return False
        self.queue.append(record)
        return True

    # --- batching ------------------------------------------------------------------------
    def form_batches(self) -> list[Batch]:
        """Everything queued, as batches (the agent keeps appending meanwhile: that waits)."""
        batches = []
        with self.lock:
            self.forming += 1
        try:
            while self.queue:
                batch = self._form_one()
                if batch is None:
                    break
                batches.append(batch)
            return batches
        except Exception:  # never lose the batcher to a bug in one record
            logging.getLogger("reasoning_flow_sdk").exception("could not batch reasoning flow records")
            return batches
        finally:
            with self.lock:
                self.forming -= 1

    def _form_one(self) -> Batch | None:
        queue = self.queue
        if queue and queue[0][0] == "outcome":
            outcomes: list[dict[str, Any]] = []
            while queue and queue[0][0] == "outcome" and len(outcomes) < MAX_OUTCOMES_PER_BATCH:
                outcomes.append(queue.popleft()[2])
            return Batch(next_seq(), encode({"outcomes": outcomes}), 0, 0)
        items: dict[str, dict[str, Any]] = {}
        steps = size = 0
        limit = self.settings.batch_steps
        while queue:
            kind, flow_id, fields = queue[0]
            if kind == "outcome":
                break  # outcomes travel in batches of their own, after what came before them
            item = items.get(flow_id)
            if item is None and len(items) >= MAX_FLOWS_PER_BATCH:
                break
            if kind == "step" and steps and (steps >= limit or size + _estimate(fields) > BATCH_BYTES):
                break
            queue.popleft()
            if item is None:
                item = items[flow_id] = {"id": flow_id, **self._open_fields.get(flow_id, {})}
            if kind == "open":
                # Every piece of the flow carries its opening fields: the server treats them as a
                # replay of the open, so a piece never depends on an earlier piece having arrived.
                self._open_fields[flow_id] = fields
                item.update(fields)
            elif kind == "step":
                item.setdefault("steps", []).append(fields)
                steps += 1
                size += _estimate(fields)
            else:
                item["close"] = fields
                self._open_fields.pop(flow_id, None)
        if not items:
            return None
        return Batch(next_seq(), encode({"flows": list(items.values())}), steps, len(items))

    def accept(self, batches: Iterable[Batch]) -> bool:
        """Place new batches; True when the deliverer should be woken."""
        to_spool = []
        woke = False
        # The spool is written under the lock: the deliverer must not find it empty (and go back
        # to the outbox) while a batch that belongs behind the spooled ones is being written.
        with self.lock:
            for batch in batches:
                if not self.spooling and self.outbox_bytes + len(batch.body) <= OUTBOX_BYTES:
                    self.outbox.append(batch)
                    self.outbox_bytes += len(batch.body)
                    woke = True
                else:
                    self.spooling = True
                    to_spool.append(batch)
            self.write_to_spool(to_spool)
        return woke or bool(to_spool)

    def write_to_spool(self, batches: Iterable[Batch]) -> None:
        for batch in batches:
            try:
                dropped = self.spool.write(batch.seq, batch.body, batch.steps, batch.flows)
            except OSError as error:
                self.stats.add(dropped=batch.steps)
                warn_limited(
                    "spool-write",
                    "cannot write the spool %s (%s): a batch of %d steps is lost",
                    self.spool.directory,
                    error.strerror or error,
                    batch.steps,
                )
                continue
            self.stats.add(spooled=batch.steps)
            self.note_dropped(dropped)

    def note_dropped(self, dropped: list[SpoolFile]) -> None:
        if dropped:
            lost = sum(spooled.steps for spooled in dropped)
            self.stats.add(dropped=lost)
            warn_limited(
                "spool-full",
                "the spool %s is full (%d bytes): dropped the %d oldest batches (%d steps)",
                self.spool.directory,
                self.spool.max_bytes,
                len(dropped),
                lost,
            )

    # --- delivery --------------------------------------------------------------------------
    def outbox_head(self) -> Batch | None:
        with self.lock:
            if self.outbox:
                self.in_flight += 1
                return self.outbox[0]
            return None

    def settle(self, batch: Batch, verdict: Verdict) -> list[Batch]:
        """After an outbox attempt; returns the batches to spool (the whole outbox on a retry)."""
        with self.lock:
            self.in_flight -= 1
            if not verdict.retry:
                if self.outbox and self.outbox[0] is batch:
                    self.outbox_bytes -= len(self.outbox.popleft().body)
                self.attempt = 0
                self._count(verdict)
                return []
            self.spooling = True
            self.attempt += 1
            self.stats.add(retried=1)
            spilled = list(self.outbox)
            self.outbox.clear()
            self.outbox_bytes = 0
            return spilled

    def settle_spooled(self, spooled: SpoolFile, verdict: Verdict) -> None:
        if verdict.retry:
            self.attempt += 1
            self.stats.add(retried=1)
            return
        self.attempt = 0
        self.spool.remove(spooled)
        self._count(verdict)

    def _count(self, verdict: Verdict) -> None:
        if verdict.refused:
            with self.refused_lock:  # settle() holds self.lock
                for flow_id in verdict.refused:
                    self.refused[flow_id] = None
                while len(self.refused) > REFUSED_MEMORY:
                    self.refused.popitem(last=False)
        self.stats.add(
            sent=verdict.sent_steps,
            sent_flows=verdict.sent_flows,
            batches_sent=1,
            rejected=verdict.rejected_steps,
            rejected_items=verdict.rejected_items,
            sent_outcomes=verdict.sent_outcomes,
            rejected_outcomes=verdict.rejected_outcomes,
        )

    def spool_drained(self) -> None:
        """The deliverer found the spool empty (holding its lock): new batches may use the outbox."""
        with self.lock:
            if self.spool.is_empty():
                self.spooling = False

    def idle(self) -> bool:
        with self.lock:
            return not (self.queue or self.outbox or self.forming or self.in_flight or self.spooling)

    def spill_everything(self) -> None:
        """At shutdown: what is still in memory goes to the spool (nothing acknowledged is lost)."""
        batches = self.form_batches()
        with self.lock:
            spilled = list(self.outbox) + batches
            self.outbox.clear()
            self.outbox_bytes = 0
        self.write_to_spool(spilled)

    def snapshot(self) -> dict[str, int]:
        files, size = self.spool.size()
        with self.stats.lock:
            counts = {
                name: getattr(self.stats, name)
                for name in (
                    "recorded_flows",
                    "recorded_steps",
                    "sent",
                    "sent_flows",
                    "batches_sent",
                    "retried",
                    "spooled",
                    "dropped",
                    "rejected",
                    "rejected_items",
                    "recorded_outcomes",
                    "sent_outcomes",
                    "rejected_outcomes",
                )
            }
        counts.update(queued=len(self.queue), spool_files=files, spool_bytes=size)
        return counts
