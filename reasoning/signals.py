"""Signals other apps subscribe to, so ``reasoning`` never imports them.

``flows_closed`` is sent once per request, after the closing transaction commits, with
``flows``: a list of ``ClosedFlow`` (every flow that request closed, with the flow as
committed; one for the close route, up to a hundred for the bulk ingest route), so
receivers can do their work for all of them together, without reading them again.
Receivers must not raise into the close: the sender logs and swallows.

``register_close_events`` is the in-transaction counterpart, for audit events that follow
from the close alone (nothing to read, nothing that can fail): the write path asks every
registered provider for them and records them in the statement that records the close's
own events, so they commit with it, or not at all. The pathway extractor's skips
(``reasoning.pathway.skipped``) come this way: most flows do not qualify, and a separate
transaction per close for that one event would cost more than the close.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from django.dispatch import Signal

if TYPE_CHECKING:
    from audit.services import Event
    from reasoning.models import ReasoningFlow


class ClosedFlow(NamedTuple):
    flow_id: uuid.UUID
    flow_state: str
    # The flow as the close committed it, so receivers need not read it again.
    flow: ReasoningFlow | None = None


flows_closed = Signal()


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
