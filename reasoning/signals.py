"""Signals other apps subscribe to, so ``reasoning`` never imports them.

``flows_closed`` is sent once per request, after the closing transaction commits, with
``flows``: a list of ``ClosedFlow`` (every flow that request closed, with the flow as
committed; one for the close route, up to a hundred for the bulk ingest route), so
receivers can do their work for all of them together, without reading them again.
Receivers must not raise into the close: the sender logs and swallows.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, NamedTuple

from django.dispatch import Signal

if TYPE_CHECKING:
    from reasoning.models import ReasoningFlow


class ClosedFlow(NamedTuple):
    flow_id: uuid.UUID
    flow_state: str
    # The flow as the close committed it, so receivers need not read it again.
    flow: ReasoningFlow | None = None


flows_closed = Signal()
