"""What other apps hook onto a flow's close, so ``reasoning`` never imports them.

``register_close_receiver`` is for work that follows a close and may fail (it reads, writes,
or calls out): pathway extraction, the backlog producers. A receiver says, from the flow as
the close computed it, whether the flow owes it work (``owes``: pure, no query); the close
records that debt in its own transaction (``reasoning.recording.close_work``, a transactional outbox),
and the work is done after the commit, then by the job worker with retries until it is done,
skipped with a reason, or failed after the last attempt. Nothing acknowledged is lost: a
close that committed owes its work even when the database goes away the next instant.

``register_close_events`` is the in-transaction counterpart, for audit events that follow
from the close alone (nothing to read, nothing that can fail): the write path asks every
registered provider for them and records them in the statement that records the close's
own events, so they commit with it, or not at all. The pathway extractor's skips
(``reasoning.pathway.skipped``) come this way: most flows do not qualify, and a separate
transaction per close for that one event would cost more than the close.

A receiver whose work needs nothing but the closing flow and its steps (the pathway extractor)
may also say how to do it in the close itself (``CloseReceiver.in_close``): when the close is
written as one statement (``reasoning.recording.ingest``), that work is written by the same
statement and nothing is owed. When it is not, or the statement fails, the close owes the work
as above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.actions import Action
    from audit.services import Event
    from core.bulk import Write
    from reasoning.models import ReasoningFlow
    from reasoning.radar import StepFacts

    # A closing flow, as the close computed it, and the facts of its steps, every one in order.
    ClosingFlow = tuple[ReasoningFlow, Sequence[StepFacts]]


@dataclass(frozen=True)
class CloseReceiver:
    """Work owed after a close.

    ``key``: the receiver's name in the outbox (``pathways.extract``); keep it stable, owed rows
    carry it. ``owes(flow)``: whether the flow, as the close computed it, owes this receiver
    work (pure: the settings and the flow's fields only). ``perform(flow)``: do the work, in
    the transaction that removes the debt, recording its own audit event; idempotent on the
    flow; returns None when done, or the reason it had nothing to do (the outbox audits
    ``skipped_action`` with that reason). An exception is a failed attempt, retried later.
    ``failed_action``: audited when the last attempt failed. ``actor``: who the outbox's own
    events (skipped, failed) name.

    ``in_close`` (optional): the same work for flows that owe it, done in the closing statement
    instead of after it, when the work needs nothing the close does not have: given the flows and
    their steps' facts, the writes and audit events that do it (``perform``'s, for a flow that
    has no earlier result: a closing flow cannot have one). Pure, no query; an exception leaves
    the work owed. The writes must not be able to fail for a valid flow: the close is written
    again under the flow's lock, owing the work, if its statement fails.
    """

    key: str
    actor: str
    owes: Callable[[ReasoningFlow], bool]
    perform: Callable[[ReasoningFlow], str | None]
    skipped_action: Action
    failed_action: Action
    in_close: Callable[[Sequence[ClosingFlow]], tuple[list[Write], list[Event]]] | None = None


_receivers: dict[str, CloseReceiver] = {}


def register_close_receiver(receiver: CloseReceiver) -> None:
    """Register a receiver (registering the same key again replaces it)."""
    _receivers[receiver.key] = receiver


def unregister_close_receiver(key: str) -> None:
    _receivers.pop(key, None)


def close_receivers() -> dict[str, CloseReceiver]:
    return dict(_receivers)


# Given the flows a request closes (closed fields set, not yet committed), the audit events
# to record with the close.
CloseEventsProvider = Callable[[Sequence["ReasoningFlow"]], list["Event"]]
_close_events: dict[str, CloseEventsProvider] = {}


def register_close_events(key: str, provider: CloseEventsProvider | None) -> None:
    """Register (or, with None, remove) the provider under ``key`` (registering again replaces it)."""
    if provider is None:
        _close_events.pop(key, None)
    else:
        _close_events[key] = provider


def close_events_of(flows: Sequence[ReasoningFlow]) -> list[Event]:
    return [event for provider in _close_events.values() for event in provider(flows)] if flows else []
