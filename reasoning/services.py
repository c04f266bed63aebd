"""Every state change of the reasoning app, each with its audit event in one transaction."""

from __future__ import annotations

import json
import logging
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.postgres.fields import ArrayField
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.crypto import salted_hmac

from audit.actions import Action
from audit.services import payload_float, record
from core.errors import Conflict, InvalidInput, NotFound
from patients.models import Patient
from reasoning import metrics
from reasoning.auth import TOKEN_PREFIX, hash_token
from reasoning.models import ApiToken, ReasoningFlow, ReasoningStep
from reasoning.radar import flow_radar
from reasoning.signals import flow_closed
from reasoning.summary_guard import check_all

logger = logging.getLogger(__name__)

State = ReasoningFlow.State


def request_fingerprint(data: Mapping[str, Any]) -> str:
    """Keyed hash of a validated request body, for idempotent retries.

    Keyed (HMAC with a key derived from SECRET_KEY) because the body includes PII
    values: a plain digest in the row would let anyone holding a database copy confirm
    a guessed name or MRN.
    """
    encoded = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return salted_hmac("reasoning.request_fingerprint", encoded, algorithm="sha256").hexdigest()


# --- API tokens ---------------------------------------------------------------------


@transaction.atomic
def create_api_token(
    *,
    name: str,
    scopes: Iterable[str],
    actor: str,
    expires_at: datetime | None = None,
    patient_id: uuid.UUID | None = None,
) -> tuple[ApiToken, str]:
    """Create a token; return it with the raw secret, which is never stored or shown again.

    A token bound to a patient may carry only ``reasoning.read``: it is the patient's
    app reading that patient's narratives.
    """
    scopes = sorted(set(scopes))
    unknown = [scope for scope in scopes if scope not in ApiToken.Scope.values]
    if unknown:
        raise InvalidInput(f"unknown scope(s): {', '.join(unknown)}", field="scopes")
    if not scopes:
        raise InvalidInput("at least one scope is required", field="scopes")
    if patient_id is not None:
        if scopes != [ApiToken.Scope.READ]:
            raise InvalidInput("a patient-bound token may carry only the reasoning.read scope", field="scopes")
        if not Patient.objects.filter(pk=patient_id).exists():
            raise InvalidInput("unknown patient", field="patient_id")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():  # a savepoint: the unique name decides concurrent creations
            token = ApiToken.objects.create(
                name=name,
                token_hash=hash_token(raw),
                prefix=raw[:12],
                scopes=scopes,
                expires_at=expires_at,
                patient_id=patient_id,
            )
    except IntegrityError:
        raise Conflict(f"a token named {name!r} already exists", field="name") from None
    record(
        Action.API_TOKEN_CREATED,
        actor=actor,
        target=token,
        payload={"scopes": scopes, "expires": expires_at is not None, "patient_bound": patient_id is not None},
    )
    return token, raw


@transaction.atomic
def revoke_api_token(*, name: str, actor: str) -> ApiToken:
    updated = ApiToken.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=timezone.now())
    token = ApiToken.objects.filter(name=name).first()
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if not updated:
        raise Conflict(f"token {name!r} is already revoked")
    record(Action.API_TOKEN_REVOKED, actor=actor, target=token)
    return token


@transaction.atomic
def create_operator(*, username: str, password: str, actor: str) -> Any:
    """A staff login for operators (Django admin and the operator pages)."""
    user_model = get_user_model()
    taken = Conflict(f"user {username!r} already exists", field="username")
    if user_model.objects.filter(username=username).exists():
        raise taken
    try:
        with transaction.atomic():  # a savepoint: the unique username decides concurrent creations
            user = user_model.objects.create_superuser(username=username, password=password)
    except IntegrityError:
        raise taken from None
    record(Action.OPERATOR_CREATED, actor=actor, target=("auth.user", user.pk))
    return user


# --- Flows --------------------------------------------------------------------------


def start_flow(data: Mapping[str, Any], *, actor: str) -> tuple[ReasoningFlow, bool]:
    """Open a flow. Returns ``(flow, created)``.

    A client-chosen ``id`` makes retries safe: the same id with the same body returns the
    stored flow (``created`` is False); the same id with another body is a conflict.
    """
    fields = dict(data)
    fingerprint = request_fingerprint(fields)
    flow_id = fields.pop("id", None)
    if flow_id is not None:
        existing = ReasoningFlow.objects.filter(pk=flow_id).first()
        if existing is not None:
            return _replayed(existing, fingerprint), False
    patient_id = fields.pop("patient_id", None)
    if patient_id is not None and not Patient.objects.filter(pk=patient_id).exists():
        raise InvalidInput("unknown patient", field="patient_id")
    if not fields.get("trace_id"):
        fields["trace_id"] = uuid.uuid4().hex
    try:
        flow = _insert_flow(fields, flow_id=flow_id, patient_id=patient_id, fingerprint=fingerprint, actor=actor)
    except IntegrityError:
        # A concurrent retry with the same id won the race.
        existing = ReasoningFlow.objects.filter(pk=flow_id).first() if flow_id else None
        if existing is None:
            raise
        return _replayed(existing, fingerprint), False
    metrics.record_flow_started(flow.trigger_type)
    return flow, True


@transaction.atomic(durable=True)
def _insert_flow(
    fields: dict[str, Any], *, flow_id: uuid.UUID | None, patient_id: uuid.UUID | None, fingerprint: str, actor: str
) -> ReasoningFlow:
    flow = ReasoningFlow(patient_id=patient_id, request_hash=fingerprint, **fields)
    if flow_id is not None:
        flow.id = flow_id
    flow.save(force_insert=True)
    record(
        Action.FLOW_STARTED,
        actor=actor,
        target=flow,
        payload={"trigger_type": flow.trigger_type, "agent": flow.agent, "has_patient": patient_id is not None},
    )
    return flow


def _replayed(existing: ReasoningFlow | ReasoningStep, fingerprint: str) -> Any:
    if existing.request_hash != fingerprint:
        raise Conflict(f"id {existing.pk} already exists with a different body", field="id")
    return existing


def add_step(flow_id: uuid.UUID, data: Mapping[str, Any], *, actor: str) -> tuple[ReasoningStep, bool]:
    """Append one step to an active flow. Returns ``(step, created)``; see ``add_steps``."""
    steps, created = add_steps(flow_id, [data], actor=actor, batch=False)
    return steps[0], created


def add_steps(
    flow_id: uuid.UUID, items: Sequence[Mapping[str, Any]], *, actor: str, batch: bool = True
) -> tuple[list[ReasoningStep], bool]:
    """Append steps to an active flow, in order, all or none. Returns ``(steps, created)``.

    Parents (``parent_step_id`` and ``extra_parent_ids``) must be earlier steps of the
    same flow (already stored, or earlier in this batch), so the graph has no cycles.
    Values of the keys named in ``pii_fields`` go to encrypted columns and never into
    the ``inputs``/``outputs`` JSON. Each step gets its own audit event.

    Retries are safe when steps carry client-chosen ids: if every step already exists
    with the same body, the stored steps come back with ``created`` False; any other
    overlap with stored steps is a conflict.

    ``batch``: the request was the batch route, so errors name the step (``steps[2].…``),
    even for a batch of one.
    """
    prepared = [_prepare_step(dict(item)) for item in items]
    client_ids = [step.id for step, has_id in prepared if has_id]
    if len(set(client_ids)) != len(client_ids):
        raise InvalidInput("step ids must be unique within a request", field="id")
    if client_ids and (replayed := _replayed_steps(flow_id, prepared)) is not None:
        return replayed, False
    steps = [step for step, _ in prepared]
    try:
        _insert_steps(flow_id, steps, actor=actor, batch=batch)
    except IntegrityError:
        # A concurrent retry with the same ids won the race.
        if not client_ids or (replayed := _replayed_steps(flow_id, prepared)) is None:
            raise
        return replayed, False
    for step in steps:
        metrics.record_step_written(step.kind, step.agent)
    return steps, True


def _prepare_step(fields: dict[str, Any]) -> tuple[ReasoningStep, bool]:
    """An unsaved step from a validated body, PII split off; and whether the client chose its id."""
    fingerprint = request_fingerprint(fields)
    client_id = fields.pop("id", None)
    pii_fields = list(dict.fromkeys(fields.pop("pii_fields", None) or []))
    inputs, inputs_pii = _split_pii(fields.pop("inputs", None) or {}, pii_fields)
    outputs, outputs_pii = _split_pii(fields.pop("outputs", None) or {}, pii_fields)
    reasoning_content = fields.pop("reasoning_content", None) or None
    step = ReasoningStep(
        reasoning_content=reasoning_content,
        reasoning_content_chars=len(reasoning_content) if reasoning_content else None,
        id=client_id or uuid.uuid4(),
        extra_parent_ids=list(dict.fromkeys(fields.pop("extra_parent_ids", None) or [])),
        inputs=inputs,
        outputs=outputs,
        pii_fields=pii_fields,
        inputs_pii=inputs_pii,
        outputs_pii=outputs_pii,
        request_hash=fingerprint,
        **fields,
    )
    return step, client_id is not None


def _replayed_steps(flow_id: uuid.UUID, prepared: list[tuple[ReasoningStep, bool]]) -> list[ReasoningStep] | None:
    """The stored steps if this request is an exact retry; None if none of them exist yet."""
    ids = [step.id for step, has_id in prepared if has_id]
    stored = {step.pk: step for step in ReasoningStep.objects.filter(pk__in=ids)}
    if not stored:
        return None
    replayed = []
    for step, has_id in prepared:
        existing = stored.get(step.id) if has_id else None
        if existing is None:
            raise Conflict("some steps of this request already exist; retry the same request unchanged", field="id")
        if existing.flow_id != flow_id:
            raise Conflict(f"id {step.id} already names a step of another flow", field="id")
        replayed.append(_replayed(existing, step.request_hash))
    return replayed


@transaction.atomic(durable=True)
def _insert_steps(flow_id: uuid.UUID, steps: list[ReasoningStep], *, actor: str, batch: bool) -> None:
    # Taking the positions locks the flow row until commit: a concurrent close waits
    # for these steps (and then counts them), or wins and they get a 409.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reasoning_flow SET step_count = step_count + %s "
            "WHERE id = %s AND flow_state = %s RETURNING step_count",
            [len(steps), flow_id, State.ACTIVE],
        )
        row = cursor.fetchone()
    if row is None:
        _raise_missing_or_closed(flow_id)
    first_position = row[0] - len(steps) + 1
    _check_parents(flow_id, steps, batch=batch)
    for offset, step in enumerate(steps):
        step.flow_id = flow_id
        step.position = first_position + offset
    ReasoningStep.objects.bulk_create(steps)
    for step in steps:
        record(
            Action.STEP_CREATED,
            actor=actor,
            target=step,
            payload={
                "flow_id": str(flow_id),
                "position": step.position,
                "kind": step.kind,
                "agent": step.agent,
                "parent_count": (step.parent_step_id is not None) + len(step.extra_parent_ids),
                "pii_field_count": len(step.pii_fields),
                "reasoning_content_chars": step.reasoning_content_chars,
            },
        )


def _raise_missing_or_closed(flow_id: uuid.UUID) -> Any:
    state = ReasoningFlow.objects.filter(pk=flow_id).values_list("flow_state", flat=True).first()
    if state is None:
        raise NotFound(f"flow {flow_id} does not exist")
    raise Conflict(f"flow {flow_id} is {state}; it no longer accepts changes")


def _check_parents(flow_id: uuid.UUID, steps: list[ReasoningStep], *, batch: bool) -> None:
    """Every parent is a stored step of this flow or an earlier step of this request."""
    earlier: set[uuid.UUID] = set()
    referenced = {
        parent
        for step in steps
        for parent in ([step.parent_step_id] if step.parent_step_id else []) + step.extra_parent_ids
    }
    batch_ids = {step.id for step in steps}
    to_look_up = referenced - batch_ids
    stored = (
        set(ReasoningStep.objects.filter(flow_id=flow_id, pk__in=to_look_up).values_list("pk", flat=True))
        if to_look_up
        else set()
    )
    prefix = "steps[{}]." if batch else ""
    for index, step in enumerate(steps):
        known = stored | earlier
        where = prefix.format(index)
        if step.parent_step_id is not None and step.parent_step_id not in known:
            raise InvalidInput("must be an existing, earlier step of the same flow", field=f"{where}parent_step_id")
        if step.parent_step_id in step.extra_parent_ids:
            raise InvalidInput("must not repeat parent_step_id", field=f"{where}extra_parent_ids")
        missing = [str(pk) for pk in step.extra_parent_ids if pk not in known]
        if missing:
            raise InvalidInput(
                f"not earlier steps of this flow: {', '.join(missing)}", field=f"{where}extra_parent_ids"
            )
        earlier.add(step.id)


def _split_pii(document: dict[str, Any], pii_fields: list[str]) -> tuple[dict[str, Any], str | None]:
    """Move the declared top-level keys out of ``document``; return (rest, encrypted JSON)."""
    if not pii_fields:
        return document, None
    secret = {key: document[key] for key in pii_fields if key in document}
    rest = {key: value for key, value in document.items() if key not in secret}
    return rest, (json.dumps(secret) if secret else None)


def close_flow(
    flow_id: uuid.UUID,
    *,
    state: str,
    actor: str,
    outcome_type: str = "",
    outcome_summary: str = "",
    abort_reason: str = "",
    outcome_metrics: Mapping[str, Any] | None = None,
) -> ReasoningFlow:
    """Complete or abort an active flow; 409 (Conflict) when it is already closed.

    ``outcome_confidence`` is the minimum step confidence: a chain is as strong as its
    weakest step.
    """
    if state not in (State.COMPLETED, State.ABORTED):
        raise InvalidInput("must be 'completed' or 'aborted'", field="flow_state")
    flow = _close(flow_id, state, actor, outcome_type, outcome_summary, abort_reason, dict(outcome_metrics or {}))
    metrics.record_flow_closed(
        state=flow.flow_state,
        trigger_type=flow.trigger_type,
        outcome_type=flow.outcome_type,
        patient_safe_summary=flow.patient_safe_summary,
        step_count=flow.step_count,
        latency_ms=_latency_ms(flow),
    )
    return flow


@transaction.atomic(durable=True)
def _close(
    flow_id: uuid.UUID,
    state: str,
    actor: str,
    outcome_type: str,
    outcome_summary: str,
    abort_reason: str,
    outcome_metrics: dict[str, Any],
) -> ReasoningFlow:
    updated = ReasoningFlow.objects.filter(pk=flow_id, flow_state=State.ACTIVE).update(
        flow_state=state,
        closed_at=timezone.now(),
        outcome_type=outcome_type,
        outcome_summary=outcome_summary,
        abort_reason=abort_reason,
        outcome_metrics=outcome_metrics,
    )
    if not updated:
        _raise_missing_or_closed(flow_id)
    # A separate statement (fresh snapshot) so steps committed while we waited for the
    # row lock are counted; it also returns the closed flow.
    (flow,) = ReasoningFlow.objects.raw(
        "UPDATE reasoning_flow SET outcome_confidence = "
        "(SELECT min(confidence) FROM reasoning_step WHERE flow_id = %s) "
        "WHERE id = %s RETURNING *",
        [flow_id, flow_id],
    )
    summaries = ReasoningStep.objects.filter(flow_id=flow_id).values_list("summary_text", flat=True)
    verdict = check_all([flow.trigger_summary, *summaries, flow.outcome_summary])
    flow.patient_safe_summary = verdict.ok
    flow.summary_guard_rule = verdict.rule or ""
    flow.dimensions_snapshot = flow_radar(flow, now=flow.closed_at)
    ReasoningFlow.objects.filter(pk=flow_id).update(
        patient_safe_summary=flow.patient_safe_summary,
        summary_guard_rule=flow.summary_guard_rule,
        dimensions_snapshot=flow.dimensions_snapshot,
    )
    action = Action.FLOW_COMPLETED if state == State.COMPLETED else Action.FLOW_ABORTED
    record(
        action,
        actor=actor,
        target=flow,
        payload={
            "outcome_type": flow.outcome_type,
            "step_count": flow.step_count,
            "outcome_confidence": payload_float(flow.outcome_confidence),
            "timeout": abort_reason == "timeout",
            "patient_safe_summary": flow.patient_safe_summary,
            "summary_guard_rule": flow.summary_guard_rule or None,
        },
    )
    transaction.on_commit(lambda: _announce_close(flow))
    return flow


def _announce_close(flow: ReasoningFlow) -> None:
    for receiver, result in flow_closed.send_robust(sender=ReasoningFlow, flow_id=flow.pk, flow_state=flow.flow_state):
        if isinstance(result, Exception):
            logger.error("flow_closed receiver %s failed for flow %s: %s", receiver, flow.pk, type(result).__name__)


def _latency_ms(flow: ReasoningFlow) -> float:
    closed = flow.closed_at or timezone.now()
    return max((closed - flow.created_at).total_seconds() * 1000.0, 0.0)


# --- Admin reads (audited) ----------------------------------------------------------


@transaction.atomic
def read_flow_for_admin(
    flow_id: uuid.UUID, *, actor: str, include_reasoning: bool = False
) -> tuple[ReasoningFlow, list[ReasoningStep]]:
    """The flow and its steps for an operator (audited).

    Raw chain-of-thought is loaded only with ``include_reasoning`` (the caller checked
    the ``reasoning.cot.read`` scope); that read gets an audit event of its own.
    """
    flow = ReasoningFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFound(f"flow {flow_id} does not exist")
    hidden = ["inputs_pii", "outputs_pii"] + ([] if include_reasoning else ["reasoning_content"])
    steps = list(ReasoningStep.objects.filter(flow_id=flow_id).defer(*hidden).order_by("position"))
    record(Action.ADMIN_FLOW_READ, actor=actor, target=flow, payload={"step_count": len(steps)})
    if include_reasoning:
        record(
            Action.ADMIN_FLOW_REASONING_READ,
            actor=actor,
            target=flow,
            payload={"steps_with_reasoning": sum(1 for step in steps if step.reasoning_content)},
        )
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
)
STEPS_PER_PAGE = 100
# The positions of a step's extra parents: a correlated subquery of primary-key lookups,
# in raw SQL because the ORM cannot say "id = ANY(outer array)".
_EXTRA_PARENT_POSITIONS = RawSQL(
    "ARRAY(SELECT parent.position FROM reasoning_step parent"
    " WHERE parent.id = ANY(reasoning_step.extra_parent_ids) ORDER BY parent.position)",
    (),
    output_field=ArrayField(models.PositiveIntegerField()),
)


@dataclass(frozen=True)
class FlowStepsPage:
    flow: ReasoningFlow
    # PAGE_STEP_FIELDS plus parent_position and extra_parent_positions, in position order.
    steps: list[dict[str, Any]]
    page: int
    page_count: int
    per_page: int

    @property
    def first_position(self) -> int:
        return (self.page - 1) * self.per_page + 1


@transaction.atomic
def read_flow_page_for_admin(
    flow_id: uuid.UUID, *, actor: str, page: int, per_page: int = STEPS_PER_PAGE
) -> FlowStepsPage:
    """One page of a flow's steps for an operator (audited like ``read_flow_for_admin``).

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
            parent_position=F("parent_step__position"),
            extra_parent_positions=_EXTRA_PARENT_POSITIONS,
        )
    )
    record(Action.ADMIN_FLOW_READ, actor=actor, target=flow, payload={"step_count": len(steps), "page": page})
    return FlowStepsPage(flow=flow, steps=steps, page=page, page_count=page_count, per_page=per_page)


# --- Raw reasoning retention ---------------------------------------------------------


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
