"""Reading flows for operators (audited), and purging them past retention."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import models, transaction
from django.db.models import F
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from audit.actions import Action
from audit.services import record
from core.errors import NotFound
from patients.models import Patient
from reasoning.flows.narrative import (
    YOUR_DECISIONS_LIMIT,
    DecisionRow,
    Narrative,
    agent_label,
    decision_status,
    denied,
    pending,
    project,
)
from reasoning.models import ReasoningFlow, ReasoningStep


def _record_sensitive_reads(
    flow: ReasoningFlow,
    steps: Sequence[Any],
    *,
    actor: str,
    content: bool,
    reasoning: bool,
    where: dict[str, Any],
) -> None:
    """The audit events of a read of decrypted content and of raw reasoning: who read which flow,
    how many steps held any, and where when not the flow route (``via``: page, turn; the page)."""

    def has(step: Any, name: str) -> bool:
        return bool(step[name] if isinstance(step, dict) else getattr(step, name))

    if content:
        held = sum(1 for step in steps if has(step, "inputs_pii") or has(step, "outputs_pii"))
        record(Action.ADMIN_FLOW_CONTENT_READ, actor=actor, target=flow, payload={"steps_with_content": held, **where})
    if reasoning:
        held = sum(1 for step in steps if has(step, "reasoning_content"))
        record(
            Action.ADMIN_FLOW_REASONING_READ, actor=actor, target=flow, payload={"steps_with_reasoning": held, **where}
        )


@transaction.atomic
def read_flow_for_admin(
    flow_id: uuid.UUID, *, actor: str, include_reasoning: bool = False, include_content: bool = False
) -> tuple[ReasoningFlow, list[ReasoningStep]]:
    """The flow and its steps for an operator (audited).

    Raw chain-of-thought is loaded only with ``include_reasoning`` (the caller checked the
    ``reasoning.cot.read`` scope), the encrypted inputs and outputs only with
    ``include_content`` (``reasoning.content.read``); each of those reads gets an audit event
    of its own, naming the reader and the flow, in this transaction.
    """
    flow = ReasoningFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFound(f"flow {flow_id} does not exist")
    hidden = ([] if include_content else ["inputs_pii", "outputs_pii"]) + (
        [] if include_reasoning else ["reasoning_content"]
    )
    # In the order the steps began (spans arrive in any order), then as they arrived.
    steps = list(
        ReasoningStep.objects.filter(flow_id=flow_id)
        .defer(*hidden)
        .order_by(Coalesce("started_at", "created_at"), "position")
    )
    record(Action.ADMIN_FLOW_READ, actor=actor, target=flow, payload={"step_count": len(steps)})
    _record_sensitive_reads(flow, steps, actor=actor, content=include_content, reasoning=include_reasoning, where={})
    return flow, steps


# The step columns the operator DAG page shows, and what it never loads: inputs, outputs,
# the encrypted PII columns and raw reasoning stay in the database.
PAGE_STEP_FIELDS = (
    "position",
    "kind",
    "agent",
    "summary_text",
    "rationale",
    "confidence",
    "latency_ms",
    "llm_call_log_ref",
    "experiment_trace_ref",
    "decision_graph_node_ref",
    "memory_claim_ref",
    "span_id",
    "reasoning_content_chars",
    "created_at",
    "started_at",
    "model",
    "tool",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "cost_usd",
    "outcome",
    "error_type",
    # The names of the keys held encrypted (never their values).
    "pii_fields",
)


# Read only with the content permission: the clear inputs and outputs and the encrypted keys.
CONTENT_FIELDS = ("inputs", "outputs", "inputs_pii", "outputs_pii")


STEPS_PER_PAGE = 100


# The positions of a step's extra parents: a correlated subquery of primary-key lookups,
# in raw SQL because the ORM cannot say "id = ANY(outer array)".
# The shape of a step's inputs or outputs, masked: each top-level key with its JSON type
# ("query:string"), computed in the database so the values never reach the page.
_INPUT_SHAPE = RawSQL(
    "ARRAY(SELECT key || ':' || jsonb_typeof(value) FROM jsonb_each(reasoning_step.inputs) ORDER BY key)",
    (),
    output_field=ArrayField(models.CharField()),
)


_OUTPUT_SHAPE = RawSQL(
    "ARRAY(SELECT key || ':' || jsonb_typeof(value) FROM jsonb_each(reasoning_step.outputs) ORDER BY key)",
    (),
    output_field=ArrayField(models.CharField()),
)


_EXTRA_PARENT_POSITIONS = RawSQL(
    "ARRAY(SELECT parent.position FROM reasoning_step parent"
    " WHERE parent.id = ANY(reasoning_step.extra_parent_ids) ORDER BY parent.position)",
    (),
    output_field=ArrayField(models.PositiveIntegerField()),
)


@dataclass(frozen=True)
class FlowStepsPage:
    flow: ReasoningFlow
    # PAGE_STEP_FIELDS plus parent_position, extra_parent_positions and the masked input_shape and
    # output_shape ("key:type" each), in position order.
    steps: list[dict[str, Any]]
    page: int
    page_count: int
    per_page: int

    @property
    def first_position(self) -> int:
        return (self.page - 1) * self.per_page + 1


@transaction.atomic
def read_flow_page_for_admin(
    flow_id: uuid.UUID,
    *,
    actor: str,
    page: int,
    per_page: int = STEPS_PER_PAGE,
    include_content: bool = False,
    include_reasoning: bool = False,
) -> FlowStepsPage:
    """One page of a flow's steps for an operator (audited like ``read_flow_for_admin``).

    With ``include_content`` (the caller checked the ``read_step_content`` permission) each step
    also carries its ``CONTENT_FIELDS`` (the encrypted ones decrypted); with ``include_reasoning``
    (``read_step_reasoning``) its ``reasoning_content``. Each such read is audited with the
    page (``via: page``).

    Page ``n`` holds positions ``(n - 1) * per_page + 1`` to ``n * per_page`` (positions
    are contiguous from 1, so this is an index range, not an OFFSET scan). Each step
    carries its parents' positions, wherever they are. A flow without steps has one
    empty page; a page past the last is NotFound, and so is an unknown flow. The audit
    event counts the steps read (``step_count``) and names the ``page``.
    """
    flow = ReasoningFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFound(f"flow {flow_id} does not exist")
    page_count = max(1, -(-flow.step_count // per_page))
    if not 1 <= page <= page_count:
        raise NotFound(f"flow {flow_id} has no page {page}")
    first = (page - 1) * per_page + 1
    steps = list(
        ReasoningStep.objects.filter(flow_id=flow_id, position__gte=first, position__lt=first + per_page)
        .order_by("position")
        .values(
            *PAGE_STEP_FIELDS,
            *(CONTENT_FIELDS if include_content else ()),
            *(("reasoning_content",) if include_reasoning else ()),
            parent_position=F("parent_step__position"),
            extra_parent_positions=_EXTRA_PARENT_POSITIONS,
            input_shape=_INPUT_SHAPE,
            output_shape=_OUTPUT_SHAPE,
        )
    )
    record(Action.ADMIN_FLOW_READ, actor=actor, target=flow, payload={"step_count": len(steps), "page": page})
    _record_sensitive_reads(
        flow,
        steps,
        actor=actor,
        content=include_content,
        reasoning=include_reasoning,
        where={"via": "page", "page": page},
    )
    return FlowStepsPage(flow=flow, steps=steps, page=page, page_count=page_count, per_page=per_page)


@transaction.atomic
def purge_reasoning_batch(
    step_ids: Sequence[uuid.UUID], *, created_before: datetime, now: datetime, actor: str, retention_days: int
) -> int:
    """Drop the raw reasoning of the given steps that still hold some written before
    ``created_before``; keep the character count, stamp ``reasoning_content_purged_at``.

    The UPDATE re-checks the rule, so a row purged meanwhile is not counted twice. Audits
    ``reasoning.step.reasoning_content_purged`` with the batch's counts, in the same
    transaction. Returns the number of steps purged.
    """
    purged = (
        ReasoningStep.objects.holding_reasoning(created_before)
        .filter(pk__in=step_ids)
        .update(reasoning_content=None, reasoning_content_purged_at=now)
    )
    record(
        Action.REASONING_CONTENT_PURGED,
        actor=actor,
        payload={"picked": len(step_ids), "purged": purged, "retention_days": retention_days},
    )
    return purged


# --- The patient's reads: one narrative, and their decisions -----------------------------


@transaction.atomic
def read_narrative(flow_id: uuid.UUID, *, patient: Patient | None, actor: str) -> Narrative:
    """The patient narrative of ``flow_id`` for ``patient``, under the access rule of
    ``reasoning.flows.narrative``; every answer but 404 audited with its outcome."""
    if patient is None:
        # Audited against the requested id without looking it up: the answer must not
        # depend on whether the flow exists.
        record(
            Action.PATIENT_FLOW_READ,
            actor=actor,
            target=(ReasoningFlow._meta.label_lower, flow_id),
            payload={"outcome": "denied_not_patient"},
        )
        return denied("not_patient", "Only the patient a decision is about can read its narrative.")
    flow = ReasoningFlow.objects.filter(pk=flow_id, patient_id=patient.pk).first()
    if flow is None:
        raise NotFound("No such decision.")

    def audit(outcome: str, **extra: Any) -> None:
        record(Action.PATIENT_FLOW_READ, actor=actor, target=flow, payload={"outcome": outcome, **extra})

    if not patient.reasoning_read_consent:
        audit("denied_no_consent")
        return denied("no_consent", "You have not turned on reading the reasoning behind decisions (see your profile).")
    if flow.is_active:
        audit("in_progress", step_count=flow.step_count)
        return pending(flow)
    if not flow.patient_safe_summary:
        audit("denied_unsafe_summary")
        return denied(
            "unsafe_summary", "This explanation needs review before it can be shown. Please ask your care team."
        )
    steps = (
        ReasoningStep.objects.filter(flow_id=flow.pk)
        .order_by("position")
        .values_list("agent", "summary_text", "created_at")
    )
    audit("served", step_count=flow.step_count)
    return project(flow, steps)


@transaction.atomic
def list_decisions(patient: Patient, *, actor: str, limit: int = YOUR_DECISIONS_LIMIT) -> list[DecisionRow]:
    """The patient's newest decisions with a plain status, audited like a narrative read (one
    event with the count). Only this patient's flows; a summary only where the guard passed."""
    flows = list(
        ReasoningFlow.objects.filter(patient_id=patient.pk)
        .order_by("-created_at", "-id")
        .only("id", "created_at", "flow_state", "patient_safe_summary", "trigger_summary", "agent")[:limit]
    )
    record(
        Action.PATIENT_FLOWS_LISTED,
        actor=actor,
        target=patient,
        payload={"count": len(flows), "consent": patient.reasoning_read_consent},
    )
    return [
        DecisionRow(
            flow_id=flow.pk,
            created_at=flow.created_at,
            status=decision_status(flow),
            agent=agent_label(flow.agent),
            summary=flow.trigger_summary or None if flow.patient_safe_summary else None,
        )
        for flow in flows
    ]
