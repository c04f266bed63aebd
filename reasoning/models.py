"""Reasoning flows (rooted trees: trigger -> steps -> outcome), their steps, API tokens."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac
from encrypted_model_fields.fields import EncryptedTextField

if TYPE_CHECKING:
    from datetime import datetime


def user_pseudonym(user_id: str) -> str:
    """The ``user_ref`` of an end user's id: a keyed HMAC, so flows of one user group together
    and an operator can look one up by the id, while the id itself is never stored."""
    return salted_hmac("reasoning.user_ref", user_id, algorithm="sha256").hexdigest()[:32]


def total_tokens(input_tokens: int | None, output_tokens: int | None) -> int | None:
    """Tokens in and out together, as the pages count a flow's, a session's or an agent's usage;
    None when neither was reported (unknown is not zero)."""
    if input_tokens is None and output_tokens is None:
        return None
    return (input_tokens or 0) + (output_tokens or 0)


class FlowQuerySet(models.QuerySet["ReasoningFlow"]):
    def active(self) -> FlowQuerySet:
        return self.filter(flow_state=ReasoningFlow.State.ACTIVE)

    def completed(self) -> FlowQuerySet:
        return self.filter(flow_state=ReasoningFlow.State.COMPLETED)

    def aborted(self) -> FlowQuerySet:
        return self.filter(flow_state=ReasoningFlow.State.ABORTED)

    def stale(self, older_than: datetime) -> FlowQuerySet:
        """Active flows opened before ``older_than``: the decay job's candidates."""
        return self.active().filter(created_at__lt=older_than)


class StepQuerySet(models.QuerySet["ReasoningStep"]):
    def holding_reasoning(self, created_before: datetime) -> StepQuerySet:
        """Steps still holding raw reasoning, written before ``created_before``: the retention job's candidates."""
        return self.filter(reasoning_content__isnull=False, created_at__lt=created_before)


# Defined at module level so ReasoningFlow's Meta (an index condition) can name the
# members; reach them as ReasoningFlow.State.
class FlowState(models.TextChoices):
    ACTIVE = "active"
    COMPLETED = "completed"
    ABORTED = "aborted"


class ReasoningFlow(models.Model):
    """One rooted reasoning tree. Metadata only: no PHI lives on a flow."""

    State = FlowState

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    trigger_type = models.CharField(max_length=100)
    trigger_ref = models.CharField(max_length=500, blank=True, default="")
    trigger_summary = models.CharField(max_length=280, blank=True, default="")
    trace_id = models.CharField(max_length=100)
    session_id = models.CharField(max_length=100, blank=True, default="")
    agent = models.CharField(max_length=100, blank=True, default="")
    # Who opened the flow (the actor: ``token:<name>``): only that caller, or an admin token,
    # may add steps, close it or record its outcome (docs/ingest.md, "Who may change a flow").
    opened_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    patient = models.ForeignKey(
        "patients.Patient", null=True, blank=True, on_delete=models.PROTECT, related_name="flows", db_index=False
    )
    flow_state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    step_count = models.PositiveIntegerField(default=0)
    outcome_type = models.CharField(max_length=100, blank=True, default="")
    outcome_summary = models.CharField(max_length=280, blank=True, default="")
    outcome_confidence = models.FloatField(null=True, blank=True)
    abort_reason = models.CharField(max_length=200, blank=True, default="")
    # What happened after the decision, recorded once (POST …/flows/{id}/outcome) and then
    # immutable: a trigger refuses any change once outcome_recorded_at is set. ``outcome_correct``
    # is ternary: true, false, or null (unknown is an answer too).
    outcome = models.CharField(max_length=280, blank=True, default="", db_default="")
    outcome_correct = models.BooleanField(null=True, blank=True)
    outcome_recorded_at = models.DateTimeField(null=True, blank=True)
    # What the agent measured about its result (composite_k, evidence_hits, verdict, ...):
    # read by the research-backlog producers at close. Labels and numbers only.
    outcome_metrics = models.JSONField(default=dict, blank=True, db_default=models.Value({}, models.JSONField()))
    # The loop-break marker: a flow run on behalf of a backlog request never enqueues more work.
    dispatched_from_backlog = models.BooleanField(default=False, db_default=False)
    # The Decision Dimensions radar computed at close (reasoning.dimensions): what the
    # system believed when it decided. Null for flows closed before snapshots existed.
    dimensions_snapshot = models.JSONField(null=True, blank=True)
    # Set at close by the summary guard: True only when the trigger, outcome and every
    # step summary passed. summary_guard_rule names the first rule that fired (never text).
    patient_safe_summary = models.BooleanField(null=True, blank=True)
    summary_guard_rule = models.CharField(max_length=64, blank=True, default="")
    # HMAC-SHA256 (Django's salted_hmac, key derived from SECRET_KEY) of the canonical JSON
    # of the validated create request, hex: replays with a client-chosen id must match it.
    request_hash = models.CharField(max_length=64, editable=False)
    # The OpenTelemetry span that opened the flow (hex), for flows recorded through /v1/traces:
    # its children's parent links resolve against it. Blank for flows opened through the JSON routes.
    root_span_id = models.CharField(max_length=16, blank=True, default="", db_default="")
    # OTLP: the parent of the span that opened the flow (a nested agent's caller), so the turn
    # view can draw the edge from the caller's step to this flow.
    parent_span_id = models.CharField(max_length=16, blank=True, default="", db_default="")
    # A keyed pseudonym of the end user the agent served (user.id and its equivalents):
    # the first 32 hex digits of an HMAC-SHA256 keyed by SECRET_KEY, never the id itself.
    user_ref = models.CharField(max_length=32, blank=True, default="", db_default="")
    # Model usage of the flow's steps, kept by the write path as steps arrive (the flow list sorts
    # and filters by them): token counts summed over the steps that reported them (null when none
    # did: unknown is not zero), the cost of the steps that have one (null when none has), and the
    # models the steps named, sorted.
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    model_names = ArrayField(models.CharField(max_length=200), default=list, blank=True, db_default=[])
    created_at = models.DateTimeField(default=timezone.now)
    closed_at = models.DateTimeField(null=True, blank=True)

    objects = FlowQuerySet.as_manager()

    class Meta:
        db_table = "reasoning_flow"
        indexes = [
            # A patient's flows, newest first (patient narrative lists, consent checks).
            models.Index(
                fields=["patient", "created_at"],
                name="reasoning_flow_patient_created",
                condition=Q(patient__isnull=False),
            ),
            # One correlation id reconstructs a whole agent turn: GET /admin/v1/reasoning/flows?trace_id=
            models.Index(fields=["trace_id", "created_at"], name="reasoning_flow_trace_created"),
            # Newest flows first, unfiltered: the admin flow list and Django admin's changelist.
            models.Index(fields=["created_at"], name="reasoning_flow_created"),
            # A session's flows (session summaries and drift), in time order.
            models.Index(
                fields=["session_id", "created_at"],
                name="reasoning_flow_session_created",
                condition=~Q(session_id=""),
            ),
            # One end user's flows (the flow list's user filter), newest first.
            models.Index(
                fields=["user_ref", "created_at"],
                name="reasoning_flow_user_created",
                condition=~Q(user_ref=""),
            ),
            # The decay job: active flows older than the cut-off.
            models.Index(fields=["flow_state", "created_at"], name="reasoning_flow_state_created"),
            # Decision Dimensions' Risk axis: aborted flows with the same trigger.
            models.Index(
                fields=["trigger_type", "trigger_ref"],
                name="reasoning_flow_aborted_trigger",
                condition=Q(flow_state=FlowState.ABORTED),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trigger_type} flow {self.id} ({self.flow_state})"

    @property
    def is_active(self) -> bool:
        return self.flow_state == self.State.ACTIVE


class ReasoningStep(models.Model):
    """One step of a flow. ``summary_text`` describes the step, not the patient's data."""

    class Outcome(models.TextChoices):
        OK = "ok"
        ERROR = "error"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    flow = models.ForeignKey(ReasoningFlow, on_delete=models.PROTECT, related_name="steps", db_index=False)
    # 1-based order of arrival within the flow, assigned under the flow's row lock.
    position = models.PositiveIntegerField()
    # No database constraint: a partitioned table cannot be referenced by id alone; the write
    # path checks every parent (reasoning.recording.ingest._check_parents).
    parent_step = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        db_index=False,
        db_constraint=False,
    )
    # Further parents of a step that merges branches; all in the same flow, all earlier.
    extra_parent_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    # A free label chosen by the agent ("retrieval", "llm_prompt", ...), validated as a label.
    kind = models.CharField(max_length=64)
    agent = models.CharField(max_length=100)
    summary_text = models.CharField(max_length=280)
    rationale = models.TextField(blank=True, default="")
    inputs = models.JSONField(default=dict, blank=True)
    outputs = models.JSONField(default=dict, blank=True)
    # Keys declared as PII: their values live only in the encrypted columns below.
    pii_fields = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    inputs_pii = EncryptedTextField(null=True, blank=True)
    outputs_pii = EncryptedTextField(null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    llm_call_log_ref = models.CharField(max_length=200, blank=True, default="")
    experiment_trace_ref = models.CharField(max_length=200, blank=True, default="")
    decision_graph_node_ref = models.CharField(max_length=200, blank=True, default="")
    memory_claim_ref = models.CharField(max_length=200, blank=True, default="")
    span_id = models.CharField(max_length=64, blank=True, default="")
    # Model usage, as OpenTelemetry's gen_ai.* attributes report it (or the JSON routes take it).
    model = models.CharField(max_length=200, blank=True, default="", db_default="")
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    reasoning_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Input tokens served from the provider's prompt cache (part of input_tokens).
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    # What the call cost in US dollars, computed from the model's price on the day it was
    # written (reasoning.recording.pricing) and kept: a later price change rewrites nothing.
    # Null when the model is unknown to every price table or no tokens were reported.
    cost_usd = models.DecimalField(max_digits=20, decimal_places=10, null=True, blank=True)
    # The tool a tool_call step ran (gen_ai.tool.name and its equivalents).
    tool = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Whether the step's work failed (an OTLP span with status ERROR or an exception event),
    # and a label naming how (an exception class, error.type, an HTTP status): never a message.
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.OK, db_default=Outcome.OK)
    error_type = models.CharField(max_length=100, blank=True, default="", db_default="")
    # When the step began (a span's start time); steps read in this order, then by position.
    started_at = models.DateTimeField(null=True, blank=True)
    # Raw model chain-of-thought: encrypted, read only with the reasoning.cot.read scope
    # and include_reasoning=true (audited), purged after REASONING_CONTENT_RETENTION_DAYS.
    # The character count outlives the content.
    reasoning_content = EncryptedTextField(null=True, blank=True)
    reasoning_content_chars = models.PositiveIntegerField(null=True, blank=True)
    reasoning_content_purged_at = models.DateTimeField(null=True, blank=True)
    # The same keyed fingerprint as ReasoningFlow.request_hash, of the step's create request.
    request_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    # The flow's created_at: the partition key (core.partitions), so a flow's steps share a month.
    flow_created_at = models.DateTimeField(editable=False)

    objects = StepQuerySet.as_manager()

    class Meta:
        db_table = "reasoning_step"
        # Operators' (logins') counterparts of the reasoning.content.read and reasoning.cot.read
        # scopes: reading a step's decrypted content or raw reasoning on the flow page.
        permissions = [
            ("read_step_content", "Can read steps' decrypted inputs, outputs and messages"),
            ("read_step_reasoning", "Can read steps' raw reasoning"),
        ]
        constraints = [
            # Also the index that serves "the steps of a flow, in order".
            models.UniqueConstraint(
                fields=["flow", "position", "flow_created_at"], name="reasoning_step_flow_position"
            ),
            # A confidence, when given, is a probability.
            models.CheckConstraint(
                condition=Q(confidence__isnull=True) | Q(confidence__gte=0, confidence__lte=1),
                name="reasoning_step_confidence_range",
            ),
        ]
        indexes = [
            # The retention job: steps still holding raw reasoning, oldest first.
            models.Index(
                fields=["created_at"],
                name="reasoning_step_cot_created",
                condition=Q(reasoning_content__isnull=False),
            ),
            # The flow list's failed filter: the (few) failed steps of a flow.
            models.Index(fields=["flow"], name="reasoning_step_failed", condition=Q(outcome="error")),
        ]

    def __str__(self) -> str:
        return f"{self.kind} step {self.position} of flow {self.flow_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.flow_created_at is None:  # the write path sets it; a direct save takes the flow's
            self.flow_created_at = ReasoningFlow.objects.values_list("created_at", flat=True).get(pk=self.flow_id)
        super().save(*args, **kwargs)


class ReasoningStepRegistry(models.Model):
    """Every step id, unpartitioned: keeps ids unique across the partitions of
    ``reasoning_step`` (filled by its statement trigger, migration 0017)."""

    id = models.UUIDField(primary_key=True)
    flow_created_at = models.DateTimeField()

    class Meta:
        db_table = "reasoning_step_registry"

    def __str__(self) -> str:
        return str(self.id)


class ApiToken(models.Model):
    """A bearer credential for agents and tools. Only the SHA-256 of the token is stored."""

    class Scope(models.TextChoices):
        WRITE = "reasoning.write"
        READ = "reasoning.read"
        ADMIN = "reasoning.admin"
        COT_READ = "reasoning.cot.read"
        # A step's decrypted content (inputs, outputs, messages) on the admin flow route.
        CONTENT_READ = "reasoning.content.read"
        # The verifiable audit log's proofs and events (/audit/v1/…); reasoning.admin reads them too.
        AUDIT_READ = "audit.read"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    # The first characters of the raw token, so a person can tell tokens apart.
    prefix = models.CharField(max_length=16, editable=False)
    scopes = ArrayField(models.CharField(max_length=32, choices=Scope.choices))
    # A token bound to a patient reads that patient's narratives and nothing else.
    patient = models.ForeignKey(
        "patients.Patient", null=True, blank=True, on_delete=models.PROTECT, related_name="api_tokens"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Rotation (rotate_api_token): the replaced secret's hash still authenticates until
    # ``previous_valid_until``, so agents can switch without a gap.
    previous_token_hash = models.CharField(max_length=64, blank=True, default="", db_default="", editable=False)
    previous_valid_until = models.DateTimeField(null=True, blank=True, editable=False)
    rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    # When a request last authenticated with it; written at most once a minute per token.
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "reasoning_api_token"
        indexes = [
            models.Index(
                fields=["previous_token_hash"],
                name="api_token_previous_hash",
                condition=~models.Q(previous_token_hash=""),
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def actor(self) -> str:
        return f"token:{self.name}"

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class PendingSpan(models.Model):
    """An OpenTelemetry span whose ancestors have not arrived yet (``POST /v1/traces``).

    Exporters send a span when it ends, so children come before their parents and may
    come in another request. Such a span is stored here, durably, before the answer, and
    becomes a step when the span that places it in a flow arrives. The mapped span is
    kept encrypted: message content may be PHI until the step's PII split stores it.
    """

    id = models.BigAutoField(primary_key=True)
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16)
    # The mapped span (reasoning.recording.otlp.MappedSpan as JSON) and who sent it.
    mapped = EncryptedTextField()
    actor = models.CharField(max_length=200)
    # The sender may change only the flows it opened (it held no reasoning.admin): the span is
    # placed only into a flow of ``actor`` (docs/ingest.md, "Who may change a flow").
    opener_only = models.BooleanField(default=True, db_default=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "reasoning_pending_span"
        constraints = [
            models.UniqueConstraint(fields=["trace_id", "span_id"], name="reasoning_pendingspan_trace_span"),
        ]
        indexes = [
            # The decay job: spans whose flow never came, oldest first.
            models.Index(fields=["received_at"], name="reasoning_pendingspan_received"),
        ]

    def __str__(self) -> str:
        return f"pending span {self.span_id} of trace {self.trace_id}"


class CloseWork(models.Model):
    """Work owed to a receiver of a flow's close (pathway extraction, the backlog producers):
    the transactional outbox of ``reasoning.recording.close_work``.

    The close writes one row per (receiver, flow) that owes work, in its own transaction, so
    the work is owed exactly when the close committed. The row is deleted in the transaction
    that does the work (and records its audit event), so the work is done once. A failed
    attempt moves ``next_attempt_at`` (back-off); after the last attempt ``failed_at`` is set.
    ``last_error`` is an exception's type, never its message (which may quote content).
    """

    id = models.BigAutoField(primary_key=True)
    receiver = models.CharField(max_length=64)
    flow = models.ForeignKey(ReasoningFlow, on_delete=models.CASCADE, related_name="+", db_index=False)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=100, blank=True, default="")
    failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "reasoning_close_work"
        constraints = [
            models.UniqueConstraint(fields=["flow", "receiver"], name="reasoning_closework_flow_receiver"),
        ]
        indexes = [
            # The job: owed work that is due, soonest first.
            models.Index(
                fields=["next_attempt_at"], name="reasoning_closework_due", condition=Q(failed_at__isnull=True)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.receiver} owed for flow {self.flow_id}"


class EvaluationRun(models.Model):
    """A recorded run of a regression gate (``reasoning_signature_check`` or ``reasoning_replay``
    with ``--record``), for the evaluation page. Labels and ids only: no summaries."""

    class Kind(models.TextChoices):
        SIGNATURE_CHECK = "signature_check"
        REPLAY = "replay"

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    # The input file's name, or the invoker (``stub``, ``reference``, ``http``).
    source = models.CharField(max_length=200)
    total = models.PositiveIntegerField()
    drifting = models.PositiveIntegerField()
    skipped = models.PositiveIntegerField(default=0)
    threshold = models.FloatField()
    passed = models.BooleanField()
    # {trigger_type: {"total": n, "drifting": n, "skipped": n}}
    by_trigger_type = models.JSONField(default=dict)
    # [{"id": <flow or case id>, "trigger_type": ..., "status": ...}] for every result that is not matched
    findings = models.JSONField(default=list)
    actor = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "reasoning_evaluation_run"
        indexes = [models.Index(fields=["kind", "created_at"], name="reasoning_evalrun_kind_created")]

    def __str__(self) -> str:
        return f"{self.kind} run {self.pk} ({'passed' if self.passed else 'failed'})"

    @property
    def drift_share(self) -> float:
        checked = self.total - self.skipped
        return self.drifting / checked if checked else 0.0


class DriftReport(models.Model):
    """How one completed session of an agent compared with the agent's baseline
    (``reasoning.drift``). One row per (agent, session): a recompute replaces it, and the
    audit trail keeps every computation's levels. Labels, counts and numbers only."""

    class Level(models.TextChoices):
        INSUFFICIENT_BASELINE = "insufficient_baseline"
        NORMAL = "normal"
        WATCH = "watch"
        ALERT = "alert"
        INVESTIGATE = "investigate"

    id = models.BigAutoField(primary_key=True)
    agent = models.CharField(max_length=100)
    session_id = models.CharField(max_length=100)
    # The latest closed_at of the session's flows: the order of sessions in a baseline.
    session_ended_at = models.DateTimeField()
    computed_at = models.DateTimeField(default=timezone.now)
    # How many earlier sessions the baseline held (fewer than DRIFT_MIN_BASELINE_SESSIONS: no levels).
    baseline_sessions = models.PositiveIntegerField()
    decisions = models.PositiveIntegerField()
    # {signal: {"value": float | null, "baseline": float | null, "level": Level}}
    signals = models.JSONField(default=dict)
    # The worst level of the signals.
    level = models.CharField(max_length=32, choices=Level.choices)

    class Meta:
        db_table = "reasoning_drift_report"
        constraints = [
            models.UniqueConstraint(fields=["agent", "session_id"], name="reasoning_driftreport_agent_session"),
        ]
        indexes = [
            # GET /admin/v1/reasoning/agents/{agent}/drift: an agent's latest sessions first.
            models.Index(fields=["agent", "-session_ended_at"], name="reasoning_drift_agent_ended"),
        ]

    def __str__(self) -> str:
        return f"drift of {self.agent} session {self.session_id} ({self.level})"


# --- The dashboard's rollups (reasoning.rollups) ---------------------------------------------------


class FlowRollup(models.Model):
    """What the flows opened in one UTC hour add up to, as the operators' dashboard charts them
    (``reasoning.dashboard``): flows by state now, guard-blocked, cost; and of those that closed,
    how many fall in each step-count bucket and a histogram of their durations. Recomputed from
    ``reasoning_flow`` by the refresh job for each hour the write path marked dirty
    (``FlowRollupDirty``); an hour still marked is read from ``reasoning_flow`` instead."""

    hour = models.DateTimeField(primary_key=True)  # the hour's start, UTC
    completed = models.IntegerField()
    aborted = models.IntegerField()
    active = models.IntegerField()
    blocked = models.IntegerField()  # patient_safe_summary is false
    cost = models.DecimalField(max_digits=30, decimal_places=10, null=True)  # null: no flow has a cost
    # Closed flows per step-count bucket (reasoning.rollups.STEP_BOUNDS: 0, 1, 2-3, ... 64+).
    step_buckets = ArrayField(models.IntegerField())
    # Closed flows' durations (closed_at - created_at) as a sparse log-spaced histogram: bucket
    # numbers (reasoning.rollups.duration_bucket) in ascending order and the flows in each.
    duration_buckets = ArrayField(models.SmallIntegerField())
    duration_counts = ArrayField(models.IntegerField())

    class Meta:
        db_table = "reasoning_flow_rollup"

    def __str__(self) -> str:
        return f"flows of the hour {self.hour.isoformat()}"


class FlowAgentRollup(models.Model):
    """``FlowRollup``'s counts per flow agent (the dashboard's rates by agent); kept with it."""

    id = models.BigAutoField(primary_key=True)
    hour = models.DateTimeField()
    agent = models.CharField(max_length=100)
    completed = models.IntegerField()
    aborted = models.IntegerField()
    active = models.IntegerField()
    blocked = models.IntegerField()

    class Meta:
        db_table = "reasoning_flow_agent_rollup"
        constraints = [
            # Also the index of the dashboard's read: the hours of a range.
            models.UniqueConstraint(fields=["hour", "agent"], name="reasoning_flowagentrollup_hour_agent"),
        ]

    def __str__(self) -> str:
        return f"flows of {self.agent or '(no agent)'} in the hour {self.hour.isoformat()}"


class FlowRollupDirty(models.Model):
    """An hour whose flows changed since its rollup was computed: one row per hour per writing
    transaction, written in that transaction. Append-only (no unique key: a writer never
    waits on a mark or on the job); the refresh job deletes the marks it recomputes."""

    id = models.BigAutoField(primary_key=True)
    hour = models.DateTimeField()

    class Meta:
        db_table = "reasoning_flow_rollup_dirty"

    def __str__(self) -> str:
        return f"hour {self.hour.isoformat()} to recompute"


class _StepUsage(models.Model):
    """The columns of a usage row: per UTC hour, step agent and model, the steps that reported
    tokens, their tokens and their cost (over the ``priced`` steps: none, and the cost is unknown)."""

    id = models.BigAutoField(primary_key=True)
    hour = models.DateTimeField()
    agent = models.CharField(max_length=100)
    model = models.CharField(max_length=200)
    steps = models.BigIntegerField()
    input_tokens = models.BigIntegerField()
    output_tokens = models.BigIntegerField()
    reasoning_tokens = models.BigIntegerField()
    cost = models.DecimalField(max_digits=30, decimal_places=10)
    priced = models.BigIntegerField()

    class Meta:
        abstract = True


class StepRollup(_StepUsage):
    """Model usage of the steps written in one UTC hour, by step agent and model (the dashboard's
    tokens and cost by agent and model). Steps are insert-only, so the write path owes each
    transaction's usage as a ``StepRollupPending`` row and the refresh job adds those in."""

    class Meta:
        db_table = "reasoning_step_rollup"
        constraints = [
            # Also the index of the dashboard's read: the hours of a range.
            models.UniqueConstraint(fields=["hour", "agent", "model"], name="reasoning_steprollup_hour_agent_model"),
        ]

    def __str__(self) -> str:
        return f"usage of {self.agent} with {self.model or '(no model)'} in the hour {self.hour.isoformat()}"


class StepRollupPending(_StepUsage):
    """Usage owed to ``StepRollup``: a writing transaction's token-reporting steps per (hour,
    agent, model), or the negation of a dropped partition's. Append-only; the refresh job
    moves the rows into ``StepRollup`` and deletes them in one transaction."""

    class Meta:
        db_table = "reasoning_step_rollup_pending"

    def __str__(self) -> str:
        return f"usage of {self.agent} in the hour {self.hour.isoformat()} owed to its rollup"
