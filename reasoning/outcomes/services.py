"""Recording what happened after a decision: a flow's outcome, written once.

``write(items, actor=...)`` records the outcomes of several closed flows inside the caller's
transaction, in a fixed number of statements whatever the number of items (the single route
is a one-item call, as the flow routes are of ``reasoning.recording.ingest``):

1. Each item's ``outcome`` must be non-blank and pass the summary guard (``check_summary``:
   at most 280 characters, one line of plain text, nothing that reads as PHI); a flow named
   twice in one call is refused the second time.
2. The named flows are locked in id order (``SELECT … FOR UPDATE``: two calls never deadlock).
   An unknown flow, an active one, or one whose outcome is already recorded is refused.
3. One conditional ``UPDATE … WHERE outcome_recorded_at IS NULL AND flow_state <> 'active'``
   writes the rest; only the rows it reports as updated count as recorded. The database
   trigger of migration 0011 refuses any later change, whoever tries.
4. One ``reasoning.flow.outcome_recorded`` audit event per recorded flow, in the same
   statement for all of them: the correctness and the flow's state, never the text.

The services: ``record_outcome`` (one flow; the single route), ``record_outcomes`` (the batch
route) and ``read_session_replay`` (a session's decisions for an operator, audited).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import Event, record, record_many
from core.errors import Conflict, InvalidInput, NotFound, ServiceError
from reasoning.models import ReasoningFlow
from reasoning.outcomes import sessions
from reasoning.summary_guard import check_summary

State = ReasoningFlow.State


# Why an item was refused (the batch route's ``reason``).
NOT_FOUND = "not_found"


FLOW_ACTIVE = "flow_active"


ALREADY_RECORDED = "already_recorded"


DUPLICATE = "duplicate"


BLANK = "blank"


UNSAFE = "unsafe_outcome"


REASONS = (NOT_FOUND, FLOW_ACTIVE, ALREADY_RECORDED, DUPLICATE, BLANK, UNSAFE)


# The one place the outcome is written: the WHERE clause is what makes "once" hold under races.
_UPDATE = """
UPDATE reasoning_flow AS flow
   SET outcome = item.outcome, outcome_correct = item.correct, outcome_recorded_at = %s
  FROM unnest(%s::uuid[], %s::text[], %s::boolean[]) AS item(id, outcome, correct)
 WHERE flow.id = item.id AND flow.outcome_recorded_at IS NULL AND flow.flow_state <> %s
RETURNING flow.id
"""


@dataclass(frozen=True)
class Item:
    flow_id: uuid.UUID
    outcome: str
    correct: bool | None


@dataclass(frozen=True)
class Result:
    flow_id: uuid.UUID
    reason: str = ""  # "" when recorded, else one of REASONS
    rule: str = ""  # the summary guard's rule, for UNSAFE

    @property
    def recorded(self) -> bool:
        return not self.reason

    def error(self) -> ServiceError | None:
        """The refusal as the single route reports it (404, 409 or 400 naming ``outcome``)."""
        if self.reason == NOT_FOUND:
            return NotFound(f"flow {self.flow_id} does not exist")
        if self.reason == FLOW_ACTIVE:
            return Conflict("The flow is still active: record its outcome after it is completed or aborted.")
        if self.reason in (ALREADY_RECORDED, DUPLICATE):
            return Conflict("The outcome of this flow is already recorded; it cannot change.")
        if self.reason == BLANK:
            return InvalidInput("This field may not be blank.", field="outcome")
        if self.reason == UNSAFE:
            return InvalidInput(
                f"Refused by the summary guard (rule: {self.rule}): describe what happened without "
                "identifying details, or send a label such as `follow_up_booked`.",
                field="outcome",
            )
        return None


def write(items: Sequence[Item], *, actor: str, opener_only: bool = False) -> list[Result]:
    """Record the items' outcomes (see the module docstring); one result per item, in order.
    Must run inside the caller's transaction: the rows and their audit events commit together.
    ``opener_only``: another caller's flow is answered as not found (``ingest.write``)."""
    if not connection.in_atomic_block:
        raise RuntimeError("write() must run inside a transaction")
    # Surrounding whitespace is not part of the outcome (the API's fields trim it too).
    items = [Item(item.flow_id, item.outcome.strip(), item.correct) for item in items]
    results: list[Result | None] = [None] * len(items)
    seen: set[uuid.UUID] = set()
    for index, item in enumerate(items):
        if item.flow_id in seen:
            results[index] = Result(item.flow_id, DUPLICATE)
        elif not item.outcome:
            results[index] = Result(item.flow_id, BLANK)
        elif not (guard := check_summary(item.outcome)).ok:
            results[index] = Result(item.flow_id, UNSAFE, rule=guard.rule or "")
        seen.add(item.flow_id)
    pending = [index for index, result in enumerate(results) if result is None]
    if not pending:
        return [result for result in results if result is not None]

    # Locked in id order, so that concurrent calls naming the same flows queue instead of deadlocking.
    stored = {
        pk: (state, recorded_at)
        for pk, state, recorded_at, opened_by in ReasoningFlow.objects.filter(
            pk__in=[items[i].flow_id for i in pending]
        )
        .order_by("pk")
        .select_for_update()
        .values_list("pk", "flow_state", "outcome_recorded_at", "opened_by")
        if not opener_only or opened_by == actor
    }
    eligible: list[int] = []
    for index in pending:
        flow_id = items[index].flow_id
        if flow_id not in stored:
            results[index] = Result(flow_id, NOT_FOUND)
        elif stored[flow_id][0] == State.ACTIVE:
            results[index] = Result(flow_id, FLOW_ACTIVE)
        elif stored[flow_id][1] is not None:
            results[index] = Result(flow_id, ALREADY_RECORDED)
        else:
            eligible.append(index)

    updated: set[uuid.UUID] = set()
    if eligible:
        with connection.cursor() as cursor:
            cursor.execute(
                _UPDATE,
                [
                    timezone.now(),
                    [items[i].flow_id for i in eligible],
                    [items[i].outcome for i in eligible],
                    [items[i].correct for i in eligible],
                    State.ACTIVE.value,
                ],
            )
            updated = {row[0] for row in cursor.fetchall()}
    events = []
    for index in eligible:
        item = items[index]
        if item.flow_id not in updated:  # only if the row changed under the lock: never expected
            results[index] = Result(item.flow_id, ALREADY_RECORDED)
            continue
        results[index] = Result(item.flow_id)
        events.append(
            Event(
                Action.FLOW_OUTCOME_RECORDED,
                actor=actor,
                target=("reasoning.reasoningflow", item.flow_id),
                payload={"correct": item.correct, "flow_state": stored[item.flow_id][0]},
            )
        )
    record_many(events)
    return [result for result in results if result is not None]


@transaction.atomic(durable=True)
def record_outcome(
    flow_id: uuid.UUID, outcome: str, correct: bool | None, *, actor: str, opener_only: bool = False
) -> ReasoningFlow:
    """Record what happened after a closed flow's decision, once; return the flow.

    ``correct`` is ternary: true, false, or None (not known, or not judgeable). NotFound for
    an unknown flow; Conflict when the flow is still active or its outcome is already
    recorded (also when that one said None); InvalidInput naming ``outcome`` when the text
    is blank or fails the summary guard (the rule is named, never the text). Audits
    ``reasoning.flow.outcome_recorded`` (``correct`` and the flow's state) in the same
    transaction. See the module docstring.
    """
    (result,) = write([Item(flow_id, outcome, correct)], actor=actor, opener_only=opener_only)
    if (error := result.error()) is not None:
        raise error
    return ReasoningFlow.objects.get(pk=flow_id)


@transaction.atomic(durable=True)
def record_outcomes(items: Sequence[Item], *, actor: str, opener_only: bool = False) -> list[Result]:
    """``record_outcome`` for many flows in one transaction, each item on its own: one result
    per item, in order, recorded or refused with a reason (``outcomes.REASONS``)."""
    return write(items, actor=actor, opener_only=opener_only)


@transaction.atomic
def read_session_replay(
    session_id: str, *, actor: str, limit: int, cursor: str = ""
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a session's decisions in time order (``sessions.replay``) for an operator,
    audited as ``admin.reasoning.session.replay_read`` with the number of flows read. An
    unknown session (no flows) is NotFound; a page past the last is empty."""
    decisions, next_cursor = sessions.replay(session_id, limit=limit, cursor=cursor)
    if not decisions and not cursor:
        raise NotFound("no session with this id")
    record(
        Action.ADMIN_SESSION_REPLAY_READ,
        actor=actor,
        target=("reasoning.session", session_id),
        payload={"flow_count": len(decisions), "next_page": next_cursor is not None},
    )
    return decisions, next_cursor
