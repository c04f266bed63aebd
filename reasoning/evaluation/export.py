"""The PHI-safe export of completed flows (``manage.py reasoning_export --format raw``).

The row is the contract in docs/evaluation.md ("The raw export row"). It is safe by
construction rather than by scrubbing:

* the queries name the exported columns only (``values()``, ``STEPS_SQL``), so inputs, outputs, the
  encrypted PII columns, rationale, raw reasoning, ``abort_reason`` and the back-reference
  values never leave the database; the patient id is read only with ``--patient-key``, to
  be keyed, and is never written;
* a summary is selected through ``CASE WHEN patient_safe_summary``: text that failed the
  guard stays in the database too;
* back-references are turned into booleans by the query.

Flows stream from a server-side cursor (``iterator(chunk_size=...)``) in ``closed_at``
order; each chunk's steps come in one query and its pathway facts from the library
provider (``reasoning.radar.library_facts_of``; ``reasoning`` never imports ``pathways``):
a few queries per chunk, memory bounded by the chunk, whatever the number of flows.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from pathlib import Path
from typing import IO, Any, TypeVar

from django.db import models, transaction
from django.db.models import Case, ExpressionWrapper, F, Q, When
from django.db.models.functions import Coalesce

from core.bulk import bound_cursor
from core.replica import reading_connection
from reasoning.evaluation import InputError
from reasoning.models import FlowQuerySet, ReasoningFlow
from reasoning.radar import LibraryFacts, library_facts_of

# Flows per cursor fetch, and per steps query: ~5 steps a flow makes 10,000 step rows a chunk.
CHUNK_SIZE = 2000
STDOUT = "-"
T = TypeVar("T")

# Summaries leave the database only for flows whose summaries all passed the guard at close.
_SAFE = Q(patient_safe_summary=True)


def _when_safe(column: str) -> Case:
    return Case(When(_SAFE, then=F(column)), default=None, output_field=models.CharField())


# Steps read in the order they began (spans arrive in any order), then as they arrived.
STEP_ORDER = (Coalesce("started_at", "created_at"), "position")

# The exported step columns of a chunk of flows, in order: one fixed statement with one array
# parameter (bound server-side, whatever the chunk's size). Back-references are compared in
# SQL, and a summary leaves the database only when its flow passed the guard.
STEPS_SQL = """
SELECT s.flow_id, s.id, s.position, s.parent_step_id, s.extra_parent_ids, s.kind, s.agent,
       s.confidence, s.latency_ms, s.started_at, s.model, s.input_tokens, s.output_tokens,
       s.reasoning_tokens, s.reasoning_content_chars,
       s.llm_call_log_ref <> '', s.experiment_trace_ref <> '', s.decision_graph_node_ref <> '',
       s.memory_claim_ref <> '',
       CASE WHEN f.patient_safe_summary THEN s.summary_text END
  FROM reasoning_flow f JOIN reasoning_step s ON s.flow_id = f.id
 WHERE f.id = ANY(%s)
 ORDER BY s.flow_id, coalesce(s.started_at, s.created_at), s.position
"""
StepTuple = tuple[Any, ...]  # a row of STEPS_SQL


@dataclass(frozen=True)
class ExportFilters:
    """Which flows an export reads. The window is on ``closed_at``: ``since`` inclusive,
    ``until`` exclusive, so consecutive windows neither miss nor repeat a flow."""

    since: datetime | None = None
    until: datetime | None = None
    outcomes: tuple[str, ...] = ()
    min_confidence: float | None = None
    trigger_types: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    limit: int | None = None

    def window(self, flows: FlowQuerySet) -> FlowQuerySet:
        """The filters that apply to every flow: closed in the window, trigger type, agent."""
        if self.since is not None:
            flows = flows.filter(closed_at__gte=self.since)
        if self.until is not None:
            flows = flows.filter(closed_at__lt=self.until)
        if self.trigger_types:
            flows = flows.filter(trigger_type__in=self.trigger_types)
        if self.agents:
            flows = flows.filter(agent__in=self.agents)
        return flows

    def outcome(self, flows: FlowQuerySet) -> FlowQuerySet:
        """The filters on a completed flow's result: outcome type and aggregate confidence."""
        if self.outcomes:
            flows = flows.filter(outcome_type__in=self.outcomes)
        if self.min_confidence is not None:
            flows = flows.filter(outcome_confidence__gte=self.min_confidence)
        return flows

    def accepts_outcome(self, outcome_type: str, confidence: float | None) -> bool:
        """``outcome()`` for one flow already read."""
        if self.outcomes and outcome_type not in self.outcomes:
            return False
        return self.min_confidence is None or (confidence is not None and confidence >= self.min_confidence)


def completed_flows(filters: ExportFilters) -> FlowQuerySet:
    """The flows the raw export writes, oldest close first."""
    flows = filters.outcome(filters.window(ReasoningFlow.objects.completed()))
    return flows.order_by("closed_at", "id")


def flow_values(
    flows: FlowQuerySet, *, with_patient: bool = False
) -> models.QuerySet[ReasoningFlow, Mapping[str, Any]]:
    """The exported columns of ``flows`` (the patient id only ``with_patient``, to be keyed)."""
    extra = ("patient_id",) if with_patient else ()
    values: models.QuerySet[ReasoningFlow, Mapping[str, Any]] = flows.values(
        "id",
        "trace_id",
        "session_id",
        "trigger_type",
        "trigger_ref",
        "agent",
        "outcome_type",
        "outcome_confidence",
        "created_at",
        "closed_at",
        "dispatched_from_backlog",
        *extra,
        summary_safe=Coalesce(F("patient_safe_summary"), False),
        safe_trigger_summary=_when_safe("trigger_summary"),
        safe_outcome_summary=_when_safe("outcome_summary"),
        has_patient=ExpressionWrapper(Q(patient__isnull=False), output_field=models.BooleanField()),
    )
    return values


def steps_of(flow_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[StepTuple]]:
    """The exported columns of the steps of ``flow_ids`` (``STEPS_SQL``), in order, by flow: one query."""
    by_flow: dict[uuid.UUID, list[StepTuple]] = {flow_id: [] for flow_id in flow_ids}
    with bound_cursor(reading_connection()) as cursor:
        cursor.execute(STEPS_SQL, [list(flow_ids)])
        for row in cursor.fetchall():
            by_flow[row[0]].append(row)
    return by_flow


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def facts_of(flows: Sequence[Mapping[str, Any]]) -> Mapping[uuid.UUID, LibraryFacts]:
    """What the pathway library knows of each flow (the provider reads a flow's id and trigger type)."""
    shells = [ReasoningFlow.from_db(None, ["id", "trigger_type"], [flow["id"], flow["trigger_type"]]) for flow in flows]
    return library_facts_of(shells)


def pathway_of(facts: LibraryFacts | None) -> dict[str, Any] | None:
    """The row's ``pathway``. The library's facts say how often the pathway a flow seeded
    was reused and whether it was demoted, not whether there is one: a pathway never reused
    and never demoted is reported as ``null``, like no pathway (docs/evaluation.md)."""
    if facts is None or (facts.hit_count == 0 and not facts.demoted):
        return None
    return {"hit_count": facts.hit_count, "demoted": facts.demoted}


def patient_key(salt: bytes, patient_id: uuid.UUID | None) -> str | None:
    if patient_id is None:
        return None
    return hmac.new(salt, str(patient_id).encode(), hashlib.sha256).hexdigest()


def step_row(index: int, step: StepTuple, positions: Mapping[uuid.UUID, int]) -> dict[str, Any]:
    (_, _, position, parent, extras, kind, agent, confidence, latency_ms, started_at, model) = step[:11]
    parents = [positions[parent]] if parent in positions else []
    if extras:
        parents += sorted(positions[extra] for extra in extras if extra in positions)
    row: dict[str, Any] = {
        "index": index,
        "position": position,
        "kind": kind,
        "agent": agent,
        "parent_positions": parents,
        "confidence": confidence,
        "latency_ms": latency_ms,
        "started_at": started_at.isoformat() if started_at is not None else None,
        "model": model,
        "input_tokens": step[11],
        "output_tokens": step[12],
        "reasoning_tokens": step[13],
        "reasoning_content_chars": step[14],
        "has_llm_call_log_ref": step[15],
        "has_experiment_trace_ref": step[16],
        "has_decision_graph_node_ref": step[17],
        "has_memory_claim_ref": step[18],
    }
    if step[19] is not None:
        row["summary_text"] = step[19]
    else:
        row["summary_hidden"] = True
    return row


def raw_row(
    flow: Mapping[str, Any],
    steps: Sequence[StepTuple],
    facts: LibraryFacts | None,
    *,
    salt: bytes | None = None,
) -> dict[str, Any]:
    """One flow as docs/evaluation.md's raw row, keys in the documented order."""
    closed_at: datetime = flow["closed_at"]
    created_at: datetime = flow["created_at"]
    safe = bool(flow["summary_safe"])
    row: dict[str, Any] = {
        "format": "raw",
        "flow_id": str(flow["id"]),
        "trace_id": flow["trace_id"],
        "session_id": flow["session_id"],
        "trigger_type": flow["trigger_type"],
        "trigger_ref": flow["trigger_ref"],
        "agent": flow["agent"],
        "agent_set": sorted({step[6] for step in steps}),
        "flow_state": ReasoningFlow.State.COMPLETED.value,
        "outcome_type": flow["outcome_type"],
        "aggregate_confidence": flow["outcome_confidence"],
        "created_at": created_at.isoformat(),
        "closed_at": closed_at.isoformat(),
        "duration_ms": (closed_at - created_at) // timedelta(milliseconds=1),
        "step_count": len(steps),
        "summary_safe": safe,
    }
    if safe:
        row["trigger_summary"] = flow["safe_trigger_summary"]
        row["outcome_summary"] = flow["safe_outcome_summary"]
    else:
        row["summaries_hidden"] = True
    row["has_patient"] = flow["has_patient"]
    if salt is not None:
        row["patient_key"] = patient_key(salt, flow["patient_id"])
    row["dispatched_from_backlog"] = flow["dispatched_from_backlog"]
    row["pathway"] = pathway_of(facts)
    positions = {step[1]: step[2] for step in steps}
    row["steps"] = [step_row(index, step, positions) for index, step in enumerate(steps)]
    return row


def raw_rows(
    filters: ExportFilters, *, salt: bytes | None = None, chunk_size: int = CHUNK_SIZE
) -> Iterator[dict[str, Any]]:
    """The raw rows of the completed flows ``filters`` select, oldest close first.

    ``salt`` (``--patient-key``): key each row's patient with it. Run inside
    ``read_snapshot()`` so the cursor streams (outside a transaction Django's server-side
    cursor is WITH HOLD: the server copies the whole result before the first row).
    """
    flows = flow_values(completed_flows(filters), with_patient=salt is not None)
    if filters.limit is not None:
        flows = flows[: filters.limit]
    for chunk in chunks(flows.iterator(chunk_size=chunk_size), chunk_size):
        steps = steps_of([flow["id"] for flow in chunk])
        facts = facts_of(chunk)
        for flow in chunk:
            yield raw_row(flow, steps[flow["id"]], facts.get(flow["id"]), salt=salt)


def count_raw(filters: ExportFilters) -> int:
    """How many rows ``raw_rows`` will write (for the progress bar's total)."""
    total = completed_flows(filters).count()
    return total if filters.limit is None else min(total, filters.limit)


@contextmanager
def read_snapshot() -> Iterator[None]:
    """A read-only transaction in which every query sees one snapshot (REPEATABLE READ):
    the cursor's flows and each chunk's steps and facts agree, and the export cannot write.
    Nested in a caller's transaction (tests), it is a savepoint of that one. Inside
    ``core.replica.replica_reads()`` (``reasoning_export``) the snapshot is the replica's."""
    reading = reading_connection()
    outermost = not reading.in_atomic_block
    with transaction.atomic(using=reading.alias):
        if outermost:
            with reading.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def encode(row: Mapping[str, Any]) -> str:
    """One JSONL line. ASCII (non-ASCII escaped): one byte per character, and no character a
    line-splitting reader could take for a line end."""
    return json.dumps(row, separators=(",", ":"), allow_nan=False) + "\n"


@contextmanager
def output(path: str) -> Iterator[IO[str] | None]:
    """The file to write the export to, or None for stdout (``-``).

    A file is written beside ``path`` under a temporary name (owner-only permissions) and
    renamed over ``path`` when the block ends without an error; on an error it is removed,
    so ``path`` is never half-written. Raises ``InputError`` naming ``--out`` when the file
    cannot be created.
    """
    if path == STDOUT:
        yield None
        return
    target = Path(path)
    if target.is_dir():
        raise InputError(f"--out {path}: is a directory")
    try:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:
        raise InputError(f"--out {path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as handle:
            yield handle
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
