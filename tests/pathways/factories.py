"""Test data for the pathway tests."""

from __future__ import annotations

import uuid
from typing import Any

from pathways.models import Pathway
from reasoning.models import ReasoningFlow


def make_pathway(trigger_type: str = "user_question", trigger_ref: str = "", **fields: Any) -> Pathway:
    """A library row seeded by a completed flow (set up directly: extraction is tested elsewhere)."""
    flow = ReasoningFlow.objects.create(
        trigger_type=trigger_type,
        trigger_ref=trigger_ref,
        trace_id=uuid.uuid4().hex,
        request_hash="test",
        flow_state=ReasoningFlow.State.COMPLETED,
        outcome_type="claim_created",
        outcome_confidence=0.95,
        patient_safe_summary=True,
    )
    fields.setdefault("step_kinds", ["retrieval"])
    return Pathway.objects.create(
        trigger_type=trigger_type,
        trigger_ref=trigger_ref,
        agents=["researcher"],
        seed_flow=flow,
        confidence=0.95,
        **fields,
    )
