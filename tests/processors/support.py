"""Helpers of the processor tests: registry rows in a given state, and the audit events."""

from __future__ import annotations

from typing import Any

from processors.models import Processor
from processors.services import register, set_status


def registered(key: str, status: str, **agreement: Any) -> Processor:
    """``key`` registered and set to ``status`` (through the services, as an operator would)."""
    register(key, actor="system:test")
    if status == Processor.Status.PENDING_COMPLIANCE and not agreement:
        return Processor.objects.get(key=key)
    return set_status(key, status, actor="system:test", reason="test set-up", **agreement)
