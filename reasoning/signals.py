"""Signals other apps subscribe to, so ``reasoning`` never imports them.

``flow_closed`` is sent after the closing transaction commits, with ``flow_id`` and
``flow_state``. Receivers must not raise into the close: the sender logs and swallows.
"""

from __future__ import annotations

from django.dispatch import Signal

flow_closed = Signal()
