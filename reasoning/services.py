"""Every state change of the reasoning app, each with its audit event in one transaction."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.postgres.fields import ArrayField
from django.db import IntegrityError, models, transaction
from django.db.models import F
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.actions import Action
from audit.services import Event, record, record_many
from core.errors import Conflict, InvalidInput, NotFound
from patients.models import Patient
from reasoning import outcomes, review, sessions
from reasoning.auth import TOKEN_PREFIX, hash_token, token_cache
from reasoning.drift import Judgement
from reasoning.models import ApiToken, DriftReport, EvaluationRun, ReasoningFlow, ReasoningStep
from reasoning.recording import ingest

logger = logging.getLogger(__name__)

State = ReasoningFlow.State


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
    # This process forgets it at once (a rollback only costs a cache miss); the others
    # within API_TOKEN_CACHE_SECONDS.
    token_cache.clear()
    return token


# How long a rotated-out secret keeps working, unless the caller says otherwise.
ROTATION_GRACE = timedelta(hours=24)


@transaction.atomic
def rotate_api_token(*, name: str, actor: str, grace: timedelta = ROTATION_GRACE) -> tuple[ApiToken, str]:
    """Give a token a new secret; return it with the raw secret (shown once). The old secret
    keeps working for ``grace`` (0: not at all), so agents can switch without a gap; a secret
    rotated out earlier stops at once. Name, scopes and the flows it opened stay. Audited as
    ``auth.api_token.rotated``."""
    if grace < timedelta(0):
        raise InvalidInput("must not be negative", field="grace")
    token = ApiToken.objects.select_for_update().filter(name=name).first()
    if token is None:
        raise NotFound(f"no token named {name!r}")
    if token.revoked_at is not None:
        raise Conflict(f"token {name!r} is revoked; create a new one")
    now = timezone.now()
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token.previous_token_hash = token.token_hash
    token.previous_valid_until = now + grace
    token.token_hash = hash_token(raw)
    token.prefix = raw[:12]
    token.rotated_at = now
    token.save(update_fields=["previous_token_hash", "previous_valid_until", "token_hash", "prefix", "rotated_at"])
    record(
        Action.API_TOKEN_ROTATED,
        actor=actor,
        target=token,
        payload={"grace_seconds": int(grace.total_seconds())},
    )
    token_cache.clear()  # this process at once; the others within API_TOKEN_CACHE_SECONDS
    return token, raw


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
# The single routes are one-item requests of the bulk write path (reasoning.recording.ingest): the
# same validation, PII split, encryption, audit events, metrics and close.


def start_flow(data: Mapping[str, Any], *, actor: str, opener_only: bool = False) -> tuple[ReasoningFlow, bool]:
    """Open a flow. Returns ``(flow, created)``.

    A client-chosen ``id`` makes retries safe: the same id with the same body returns the
    stored flow (``created`` is False); the same id with another body is a conflict.
    """
    fields = dict(data)
    flow_id = fields.pop("id", None)
    (result,) = ingest.write([ingest.Item(flow_id=flow_id, create=fields)], actor=actor, opener_only=opener_only)
    result.raise_error()
    assert result.flow is not None
    return result.flow, result.status == "created"


def add_step(
    flow_id: uuid.UUID, data: Mapping[str, Any], *, actor: str, opener_only: bool = False
) -> tuple[ReasoningStep, bool]:
    """Append one step to an active flow. Returns ``(step, created)``; see ``add_steps``."""
    steps, created = add_steps(flow_id, [data], actor=actor, batch=False, opener_only=opener_only)
    return steps[0], created


def add_steps(
    flow_id: uuid.UUID,
    items: Sequence[Mapping[str, Any]],
    *,
    actor: str,
    batch: bool = True,
    opener_only: bool = False,
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
    even for a batch of one. ``opener_only``: see ``ingest.write``.
    """
    item = ingest.Item(flow_id=flow_id, steps=items, step_where="steps[{}]." if batch else "")
    (result,) = ingest.write([item], actor=actor, opener_only=opener_only)
    result.raise_error()
    return result.steps, result.status == "created"


def close_flow(
    flow_id: uuid.UUID,
    *,
    state: str,
    actor: str,
    outcome_type: str = "",
    outcome_summary: str = "",
    abort_reason: str = "",
    outcome_metrics: Mapping[str, Any] | None = None,
    opener_only: bool = False,
) -> ReasoningFlow:
    """Complete or abort an active flow; 409 (Conflict) when it is already closed.

    ``outcome_confidence`` is the minimum step confidence: a chain is as strong as its
    weakest step.
    """
    if state not in (State.COMPLETED, State.ABORTED):
        raise InvalidInput("must be 'completed' or 'aborted'", field="flow_state")
    close = {
        "flow_state": state,
        "outcome_type": outcome_type,
        "outcome_summary": outcome_summary,
        "abort_reason": abort_reason,
        "outcome_metrics": dict(outcome_metrics or {}),
    }
    item = ingest.Item(flow_id=flow_id, close=close, replay_close=False)
    (result,) = ingest.write([item], actor=actor, opener_only=opener_only)
    result.raise_error()
    assert result.flow is not None
    return result.flow


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
    # In the order the steps began (spans arrive in any order), then as they arrived.
    steps = list(
        ReasoningStep.objects.filter(flow_id=flow_id)
        .defer(*hidden)
        .order_by(Coalesce("started_at", "created_at"), "position")
    )
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
    "started_at",
    "model",
    "tool",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "outcome",
    "error_type",
    # The names of the keys held encrypted (never their values).
    "pii_fields",
)
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
            input_shape=_INPUT_SHAPE,
            output_shape=_OUTPUT_SHAPE,
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


# --- Evaluation exports --------------------------------------------------------------


@transaction.atomic(durable=True)
def record_export_completed(*, actor: str, flags: Mapping[str, Any], counts: Mapping[str, Any]) -> int:
    """Audit one finished ``reasoning_export`` (``reasoning.export.completed``): the flags it
    ran with and what it wrote (rows, bytes, seconds, candidates). Labels, times and counts
    only: never the patient-key salt, never a row. Returns the event's sequence number."""
    return record(Action.REASONING_EXPORT_COMPLETED, actor=actor, payload={"flags": dict(flags), **counts})


@transaction.atomic
def record_evaluation_run(
    *,
    kind: str,
    source: str,
    total: int,
    drifting: int,
    skipped: int,
    threshold: float,
    passed: bool,
    by_trigger_type: Mapping[str, Mapping[str, int]],
    findings: Sequence[Mapping[str, str]],
    actor: str,
) -> EvaluationRun:
    """Store one regression-gate run (``--record``) for the evaluation page, audited as
    ``reasoning.evaluation.run_recorded`` with its counts. ``findings`` are the results that
    did not match, as ids, trigger types and statuses only."""
    run = EvaluationRun.objects.create(
        kind=EvaluationRun.Kind(kind),
        source=source[:200],
        total=total,
        drifting=drifting,
        skipped=skipped,
        threshold=threshold,
        passed=passed,
        by_trigger_type={key: dict(value) for key, value in by_trigger_type.items()},
        findings=[dict(finding) for finding in findings],
        actor=actor,
    )
    record(
        Action.EVALUATION_RUN_RECORDED,
        actor=actor,
        target=run,
        payload={"kind": run.kind, "total": total, "drifting": drifting, "skipped": skipped, "passed": passed},
    )
    return run


@transaction.atomic
def record_export_downloaded(*, actor: str, since: datetime, until: datetime, rows: int) -> int:
    """Audit an operator's download of a raw export from the evaluation page
    (``admin.reasoning.export.downloaded``): the window and the number of rows, before the
    first byte is sent. Returns the event's sequence number."""
    return record(
        Action.ADMIN_EXPORT_DOWNLOADED,
        actor=actor,
        payload={"format": "raw", "since": since.isoformat(), "until": until.isoformat(), "rows": rows},
    )


# --- Drift per agent -----------------------------------------------------------------


@transaction.atomic(durable=True)
def store_drift_reports(
    agent: str, judgements: Sequence[Judgement], *, actor: str, now: datetime | None = None
) -> list[DriftReport]:
    """Store one agent's drift reports, one per (agent, session): a session judged again is
    replaced (``reasoning.drift``). Each report is audited as ``reasoning.drift.report_stored``
    with its levels and counts (never the session id: agents choose it freely). Two
    statements whatever the number of reports: the upsert and the audit events."""
    if not judgements:
        return []
    now = now or timezone.now()
    reports = DriftReport.objects.bulk_create(
        [
            DriftReport(
                agent=agent,
                session_id=judgement.session.session_id,
                session_ended_at=judgement.session.ended_at,
                computed_at=now,
                baseline_sessions=judgement.baseline_sessions,
                decisions=judgement.session.decisions,
                signals=judgement.signals_dict(),
                level=judgement.level,
            )
            for judgement in judgements
        ],
        update_conflicts=True,
        unique_fields=["agent", "session_id"],
        update_fields=["session_ended_at", "computed_at", "baseline_sessions", "decisions", "signals", "level"],
    )
    record_many(
        [
            Event(
                Action.DRIFT_REPORT_STORED,
                actor,
                report,
                {
                    "agent": agent,
                    "level": report.level,
                    "levels": {name: signal.level for name, signal in judgement.signals.items()},
                    "baseline_sessions": report.baseline_sessions,
                    "decisions": report.decisions,
                },
            )
            for report, judgement in zip(reports, judgements, strict=True)
        ]
    )
    return reports


# --- Outcomes (recorded once) ---------------------------------------------------------


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
    transaction. See ``reasoning.outcomes``.
    """
    (result,) = outcomes.write([outcomes.Item(flow_id, outcome, correct)], actor=actor, opener_only=opener_only)
    if (error := result.error()) is not None:
        raise error
    return ReasoningFlow.objects.get(pk=flow_id)


@transaction.atomic(durable=True)
def record_outcomes(items: Sequence[outcomes.Item], *, actor: str, opener_only: bool = False) -> list[outcomes.Result]:
    """``record_outcome`` for many flows in one transaction, each item on its own: one result
    per item, in order, recorded or refused with a reason (``outcomes.REASONS``)."""
    return outcomes.write(items, actor=actor, opener_only=opener_only)


# --- Sessions (audited read) ----------------------------------------------------------


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


# --- Performance review (audited read) ------------------------------------------------


@transaction.atomic
def read_agent_review(
    agent: str, *, actor: str, since: datetime | None, limit: int, cursor: str = ""
) -> review.ReviewPage:
    """One page of ``agent``'s incorrect decisions for a 1:1 review (``review.review``),
    audited as ``admin.reasoning.agent.review_read`` with the agent and the page's counts
    (never a summary or a question). An agent with none is an empty page, audited too."""
    page = review.review(agent, since=since, limit=limit, cursor=cursor)
    record(
        Action.ADMIN_AGENT_REVIEW_READ,
        actor=actor,
        target=("reasoning.agent", agent),
        payload={
            "agent": agent,
            "flow_count": page.flow_count,
            "group_count": len(page.groups),
            "question_count": page.question_count,
            "next_page": page.next_cursor is not None,
        },
    )
    return page
