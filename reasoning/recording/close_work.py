"""Nothing derived is lost: the transactional outbox of the close receivers.

A flow's close is followed by work other apps do (``reasoning.signals.register_close_receiver``:
pathway extraction, the backlog producers). That work must not be lost when the process or the
database goes away between the close's commit and the work, so:

1. The close records the debt: one ``CloseWork`` row per receiver the flow owes work, written
   in the close's own transaction, in the statement that writes the close (``owe``). No debt
   without its close, no close without it. A receiver whose work needs only the flow and its
   steps (``CloseReceiver.in_close``: the pathway extractor) does it in that statement instead,
   when the close is written as one statement: nothing is owed then, and nothing follows.
2. Right after the commit, the request does the work (``perform_after_close``): the usual case,
   so a pathway exists when the close's answer arrives. Each row is done in one transaction:
   the row is locked (``SKIP LOCKED``: whoever holds it is doing it), the receiver does its
   work and records its audit event, the row is deleted. The work is therefore done exactly
   once, and a receiver's work is idempotent on the flow besides.
3. Whatever is still owed (the attempt failed, the process died, the database went away) is
   done by the job ``reasoning.close_work`` (every minute, ``perform_due``), with back-off
   between attempts. After ``MAX_ATTEMPTS`` failures the row is kept, marked failed, and the
   receiver's ``failed_action`` is audited; ``retry_failed`` (``manage.py close_work
   --retry-failed``) owes it again. An attempt that failed because the database was unavailable
   does not count: an outage delays the work, it does not use up its attempts.

``/healthz`` and the operator banner report owed work older than ``CLOSE_WORK_MAX_AGE_S`` and
failed work (``status``).

A replayed close writes nothing, so it owes nothing again; the row's unique (flow, receiver)
makes a second debt for the same work impossible anyway.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import Event, job_run, record
from core import outage
from core.bulk import Write, fetch, text_array, uuid_array
from reasoning.models import CloseWork, ReasoningFlow
from reasoning.radar import StepFacts
from reasoning.signals import CloseReceiver, close_receivers

logger = logging.getLogger(__name__)

ACTOR = "system:close_work"
MAX_ATTEMPTS = 10
# Back-off after the n-th failed attempt: BACKOFF_FIRST * 2**(n-1), at most BACKOFF_MAX
# (15 s, 30 s, 1 min, … 1 h: the tenth attempt comes about four and a half hours after the close).
BACKOFF_FIRST = timedelta(seconds=15)
BACKOFF_MAX = timedelta(hours=1)
# One run of the job stops taking new batches after this long (the next run goes on).
RUN_BUDGET_S = 50.0

Outcome = Literal["done", "skipped", "failed", "retry", "busy"]


def owe(
    flows: Sequence[ReasoningFlow], now: datetime, facts: Mapping[uuid.UUID, Sequence[StepFacts]] | None = None
) -> tuple[list[tuple[str, ReasoningFlow]], list[Write], list[Event]]:
    """The work the closing ``flows`` owe: the (receiver key, flow) pairs, for
    ``perform_after_close``, and the writes and audit events to be sent with the close's own rows
    in one statement (``core.bulk.execute_writes``: the close's transaction). ``facts``: every
    step of each flow (the close written as one statement, ``reasoning.recording.ingest``): a
    receiver with ``in_close`` then does its work in that statement, and the flow owes it nothing;
    without ``facts``, or should ``in_close`` raise, the work is owed."""
    owed: list[tuple[str, ReasoningFlow]] = []
    writes: list[Write] = []
    events: list[Event] = []
    for key, receiver in close_receivers().items():
        owing = [flow for flow in flows if receiver.owes(flow)]
        if owing and facts is not None and receiver.in_close is not None:
            try:
                done_writes, done_events = receiver.in_close([(flow, facts[flow.pk]) for flow in owing])
            except Exception as exc:
                logger.error("close work %s not done in the close (%s); it is owed", key, type(exc).__name__)
            else:
                writes += done_writes
                events += done_events
                continue
        owed += [(key, flow) for flow in owing]
    if owed:
        writes.append(
            Write(
                "INSERT INTO reasoning_close_work"
                " (receiver, flow_id, created_at, next_attempt_at, attempts, last_error)"
                " SELECT r, f, %s, %s, 0, '' FROM unnest(%s::varchar[], %s::uuid[]) AS t(r, f)"
                " ON CONFLICT (flow_id, receiver) DO NOTHING",
                (now, now, text_array(key for key, _ in owed), uuid_array(flow.pk for _, flow in owed)),
            )
        )
    return owed, writes, events


def backoff(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failed attempt."""
    wait: timedelta = BACKOFF_FIRST * 2 ** max(attempts - 1, 0)
    return min(wait, BACKOFF_MAX)


def perform_after_close(owed: Sequence[tuple[str, ReasoningFlow]]) -> None:
    """The first attempt, right after the close committed (``on_commit``). Never raises into
    the close: what is not done stays owed, and the job does it."""
    for key, flow in owed:
        try:
            _perform(key, flow)
        except Exception as exc:  # the failure was recorded (or the database is away): the job retries
            logger.error(
                "close work %s for flow %s not done after the close (%s); it stays owed and the job retries it",
                key,
                flow.pk,
                type(exc).__name__,
            )


def _perform(key: str, flow: ReasoningFlow) -> Outcome:
    """One attempt at one piece of owed work. Raises only when even the failure could not be
    recorded (the database is away): the work then stays owed as it was."""
    receiver = close_receivers().get(key)
    if receiver is None:
        logger.error("close work %s for flow %s has no registered receiver; it stays owed", key, flow.pk)
        return "retry"
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            # Claimed and settled in one statement: the row is gone if the work commits, back
            # (rolled back) if it fails; locked meanwhile, so no one else does it.
            cursor.execute(_CLAIM, [flow.pk, key])
            if cursor.fetchone() is None:
                return "busy"  # being done by another process, or done already
            reason = receiver.perform(flow)
            if reason is not None:
                record(receiver.skipped_action, actor=receiver.actor, target=flow, payload={"disqualifier": reason})
            return "done" if reason is None else "skipped"
    except Exception as exc:
        return _failed(receiver, flow, exc)


_CLAIM = (
    "DELETE FROM reasoning_close_work WHERE id = (SELECT id FROM reasoning_close_work"
    " WHERE flow_id = %s AND receiver = %s AND failed_at IS NULL FOR UPDATE SKIP LOCKED) RETURNING id"
)


def _failed(receiver: CloseReceiver, flow: ReasoningFlow, exc: Exception) -> Outcome:
    # The type only: a message may quote the flow's content.
    error = type(exc).__name__
    if isinstance(exc, DatabaseError) and outage.is_database_unavailable(exc):
        # Not the receiver's fault, and nothing can be recorded now: the row stays as it was.
        raise exc
    now = timezone.now()
    with transaction.atomic():
        row = (
            CloseWork.objects.select_for_update(skip_locked=True)
            .filter(flow_id=flow.pk, receiver=receiver.key, failed_at__isnull=True)
            .first()
        )
        if row is None:
            return "busy"
        row.attempts += 1
        row.last_error = error[:100]
        if row.attempts >= MAX_ATTEMPTS:
            row.failed_at = now
            record(
                receiver.failed_action,
                actor=receiver.actor,
                target=flow,
                payload={"receiver": receiver.key, "attempts": row.attempts, "error_type": row.last_error},
            )
        else:
            row.next_attempt_at = now + backoff(row.attempts)
        row.save(update_fields=["attempts", "last_error", "failed_at", "next_attempt_at"])
    logger.error(
        "close work %s for flow %s failed (attempt %d of %d, %s)%s",
        receiver.key,
        flow.pk,
        row.attempts,
        MAX_ATTEMPTS,
        error,
        "; given up" if row.failed_at else f"; retried after {row.next_attempt_at.isoformat()}",
    )
    return "failed" if row.failed_at else "retry"


def perform_due(now: datetime | None = None, *, batch_size: int = 200) -> dict[str, int]:
    """The job: every piece of owed work that is due, oldest first, in batches, for at most
    RUN_BUDGET_S. Returns the count per outcome. A run with nothing due audits nothing."""
    started = time.monotonic()
    counts: Counter[str] = Counter()

    def due() -> list[tuple[int, str, uuid.UUID]]:
        return list(
            CloseWork.objects.filter(failed_at__isnull=True, next_attempt_at__lte=now or timezone.now())
            .order_by("next_attempt_at", "id")
            .values_list("pk", "receiver", "flow_id")[:batch_size]
        )

    batch = due()
    if not batch:
        return {}
    with job_run("close_work", actor=ACTOR, payload={"due": len(batch)}) as audited:
        tried: set[int] = set()
        while batch and time.monotonic() - started < RUN_BUDGET_S:
            fresh = [item for item in batch if item[0] not in tried]
            if not fresh:
                break
            flows = {flow.pk: flow for flow in fetch(ReasoningFlow, {flow_id for _, _, flow_id in fresh})}
            for pk, key, flow_id in fresh:
                tried.add(pk)
                counts[_perform(key, flows[flow_id])] += 1  # the row's flow exists: a foreign key
            batch = due()
        audited.update({outcome: counts[outcome] for outcome in ("done", "skipped", "retry", "failed", "busy")})
    return dict(counts)


@transaction.atomic
def retry_failed(*, actor: str, receiver: str | None = None) -> int:
    """Owe again the work that failed after its last attempt (all of it, or one receiver's).
    Audits ``reasoning.close_work.requeued`` with the count. Returns the count."""
    failed = CloseWork.objects.filter(failed_at__isnull=False)
    if receiver is not None:
        failed = failed.filter(receiver=receiver)
    requeued = failed.update(failed_at=None, attempts=0, next_attempt_at=timezone.now())
    if requeued:
        record(Action.CLOSE_WORK_REQUEUED, actor=actor, payload={"requeued": requeued, "receiver": receiver})
    return requeued


@dataclass(frozen=True)
class Status:
    owed: int
    oldest_owed_s: float | None
    failed: int

    @property
    def late(self) -> bool:
        """Owed work older than CLOSE_WORK_MAX_AGE_S: the job worker is not running, or a
        receiver keeps failing."""
        return self.oldest_owed_s is not None and self.oldest_owed_s > settings.CLOSE_WORK_MAX_AGE_S

    @property
    def healthy(self) -> bool:
        return not self.late and not self.failed


# Owed count, oldest owed time (epoch seconds), failed count: one row, usable as a derived
# table (reasoning.health reads it with other figures in one statement). The table holds only
# unfinished work, so the aggregate stays small.
STATUS_SQL = (
    "SELECT count(*) FILTER (WHERE failed_at IS NULL) AS owed,"
    " extract(epoch FROM min(created_at) FILTER (WHERE failed_at IS NULL))::float8 AS oldest,"
    " count(*) FILTER (WHERE failed_at IS NOT NULL) AS failed"
    " FROM reasoning_close_work"
)


def status_of(owed: int, oldest_epoch: float | None, failed: int, now: datetime | None = None) -> Status:
    age = None if oldest_epoch is None else max((now or timezone.now()).timestamp() - float(oldest_epoch), 0.0)
    return Status(int(owed), age, int(failed))


def status(now: datetime | None = None) -> Status:
    """What is owed and what failed, in one query."""
    with connection.cursor() as cursor:
        cursor.execute(STATUS_SQL)
        row = cursor.fetchone()
    assert row is not None  # an aggregate always has its row
    owed, oldest, failed = row
    return status_of(owed, oldest, failed, now)


def owed_for(flow_ids: Iterable[uuid.UUID]) -> list[CloseWork]:
    return list(CloseWork.objects.filter(flow_id__in=list(flow_ids)).order_by("pk"))
