"""The one catalogue of audit action names.

Names follow the source system so that trails from both read the same. ``record()``
accepts only members of this enum.
"""

from __future__ import annotations

from enum import StrEnum


class Action(StrEnum):
    # Flows and steps (agent writes)
    FLOW_STARTED = "reasoning.flow.started"
    STEP_CREATED = "reasoning.step.created"
    FLOW_COMPLETED = "reasoning.flow.completed"
    FLOW_ABORTED = "reasoning.flow.aborted"
    FLOW_OUTCOME_RECORDED = "reasoning.flow.outcome_recorded"
    # One finished reasoning_export run: its flags and counts (never the patient-key salt, never a row)
    REASONING_EXPORT_COMPLETED = "reasoning.export.completed"
    EVALUATION_RUN_RECORDED = "reasoning.evaluation.run_recorded"
    ADMIN_EXPORT_DOWNLOADED = "admin.reasoning.export.downloaded"

    # Reads that are audited
    ADMIN_FLOW_READ = "admin.reasoning.flow.read"
    ADMIN_FLOW_REASONING_READ = "admin.reasoning.flow.reasoning_content_read"
    # A step's decrypted content (inputs, outputs, messages, tool arguments and results) read
    ADMIN_FLOW_CONTENT_READ = "admin.reasoning.flow.content_read"
    # An access report (incident response): who asked, about whom, the window and the row count
    AUDIT_ACCESS_REPORT = "admin.audit.access_report"
    # Every flow of one trace id (an agent turn) as one graph: the flow ids and counts
    ADMIN_TURN_READ = "admin.reasoning.turn.read"
    # A session's decisions as a timeline (labels, counts, times): the flow count
    ADMIN_SESSION_REPLAY_READ = "admin.reasoning.session.replay_read"
    PATIENT_FLOW_READ = "patient.reasoning.flow.read"
    PATIENT_FLOWS_LISTED = "patient.reasoning.flows.listed"

    # Pathway library
    PATHWAY_EXTRACTED = "reasoning.pathway.extracted"
    PATHWAY_SKIPPED = "reasoning.pathway.skipped"
    # Extraction still failed after its last attempt (reasoning.recording.close_work): receiver, attempts,
    # error_type (the exception's type only)
    PATHWAY_FAILED = "reasoning.pathway.failed"
    PATHWAY_MATCH_REQUESTED = "reasoning.pathway.match_requested"
    PATHWAY_MATCHED = "reasoning.pathway.matched"
    PATHWAY_DEMOTED = "reasoning.pathway.demoted"
    # One batch of the embedding backfill written (model and counts only)
    PATHWAY_EMBEDDINGS_STORED = "reasoning.pathway.embeddings_stored"
    ADMIN_PATHWAY_STATS_READ = "admin.reasoning.pathway.stats_read"
    ADMIN_PATHWAY_MATCH_PROXY = "admin.reasoning.pathway.match.proxy"
    ADMIN_PATHWAY_HIT_PROXY = "admin.reasoning.pathway.hit.proxy"
    # An operator took back their own console reuse within a minute (hit id and the new count)
    ADMIN_PATHWAY_REUSE_UNDONE = "admin.reasoning.pathway.reuse_undone"
    ADMIN_PATHWAY_STATS_READ_PROXY = "admin.reasoning.pathway.stats_read.proxy"

    # Pathway jobs
    JOB_PATHWAY_DECAY_STARTED = "memory.job.pathway_decay.started"
    JOB_PATHWAY_DECAY_COMPLETED = "memory.job.pathway_decay.completed"
    JOB_PATHWAY_DECAY_ERROR = "memory.job.pathway_decay.error"
    JOB_PATHWAY_BACKFILL_STARTED = "memory.job.pathway_embedding_backfill.started"
    JOB_PATHWAY_BACKFILL_COMPLETED = "memory.job.pathway_embedding_backfill.completed"
    JOB_PATHWAY_BACKFILL_ERROR = "memory.job.pathway_embedding_backfill.error"

    # Research backlog and claims review
    RESEARCH_DEEPER_REQUESTED = "admin.reasoning.research.deeper_requested"
    RESEARCH_DEEPER_REQUEST_CREATED = "reasoning.research.deeper_request_created"
    RESEARCH_BACKLOG_DISPATCHED = "reasoning.research.backlog.dispatched"
    RESEARCH_BACKLOG_COMPLETED = "reasoning.research.backlog.completed"
    RESEARCH_BACKLOG_FAILED_VOLUNTARY = "reasoning.research.backlog.failed_voluntary"
    RESEARCH_BACKLOG_RECOVERED = "reasoning.research.backlog.recovered"
    RESEARCH_BACKLOG_FAILED_AFTER_RETRIES = "reasoning.research.backlog.failed_after_retries"
    ADMIN_RESEARCH_BACKLOG_READ = "admin.reasoning.research.backlog_read"
    ADMIN_RESEARCH_BACKLOG_READ_PROXY = "admin.reasoning.research.backlog_read.proxy"
    CLAIM_REVIEW_MARKED = "reasoning.claims_pending_review.marked"
    # A backlog producer owed work for a closed flow and found nothing to do (disqualifier: why,
    # e.g. no_usable_claim_id), or still failed after its last attempt (as PATHWAY_FAILED)
    BACKLOG_PRODUCER_SKIPPED = "reasoning.research.producer_skipped"
    BACKLOG_PRODUCER_FAILED = "reasoning.research.producer_failed"
    CLAIM_REVIEW_RESOLVED = "reasoning.claims_pending_review.resolved"
    ADMIN_CLAIM_REVIEW_LISTED = "admin.reasoning.claims_pending_review.listed"
    JOB_BACKLOG_STALE_SWEEP_STARTED = "memory.job.backlog_stale_sweep.started"
    JOB_BACKLOG_STALE_SWEEP_COMPLETED = "memory.job.backlog_stale_sweep.completed"
    JOB_BACKLOG_STALE_SWEEP_ERROR = "memory.job.backlog_stale_sweep.error"
    JOB_BACKLOG_TTL_PURGE_STARTED = "memory.job.backlog_ttl_purge.started"
    JOB_BACKLOG_TTL_PURGE_COMPLETED = "memory.job.backlog_ttl_purge.completed"
    JOB_BACKLOG_TTL_PURGE_ERROR = "memory.job.backlog_ttl_purge.error"
    JOB_BACKLOG_CONSUMER_STARTED = "memory.job.backlog_consumer.started"
    JOB_BACKLOG_CONSUMER_COMPLETED = "memory.job.backlog_consumer.completed"
    JOB_BACKLOG_CONSUMER_ERROR = "memory.job.backlog_consumer.error"

    # Patients and consent
    PATIENT_CREATED = "patient.created"
    PATIENT_PHI_VIEWED = "admin.patient.phi_viewed"
    PATIENT_CONSENT_CHANGED = "patient.reasoning_read_consent.changed"
    # A legal hold keeps every partition holding the patient's flows (retention by partition)
    PATIENT_LEGAL_HOLD_CHANGED = "patient.legal_hold.changed"
    FIELD_ENCRYPTION_ROTATED = "admin.field_encryption.rotated"

    # Raw chain-of-thought retention: one event per purged batch (counts only), inside the job's run
    REASONING_CONTENT_PURGED = "reasoning.step.reasoning_content_purged"
    JOB_REASONING_CONTENT_RETENTION_STARTED = "memory.job.reasoning_content_retention.started"
    JOB_REASONING_CONTENT_RETENTION_COMPLETED = "memory.job.reasoning_content_retention.completed"
    JOB_REASONING_CONTENT_RETENTION_ERROR = "memory.job.reasoning_content_retention.error"

    # Credentials
    API_TOKEN_CREATED = "auth.api_token.created"
    API_TOKEN_REVOKED = "auth.api_token.revoked"
    API_TOKEN_ROTATED = "auth.api_token.rotated"
    OPERATOR_CREATED = "auth.operator.created"
    # What an operator may read beyond metadata: the permissions granted and revoked (names only)
    OPERATOR_ACCESS_CHANGED = "auth.operator.access_changed"
    # Logins (audit/logins.py): the user's id when the username exists, else a short SHA-256
    # prefix of it; the form, the client address; never the password or a typed username.
    LOGIN_SUCCEEDED = "auth.login.succeeded"
    LOGIN_FAILED = "auth.login.failed"
    # A lockout began (refused: false) or a login was refused during one (refused: true)
    LOGIN_LOCKED = "auth.login.locked"
    # The reason: "user" (logged out) or "idle_timeout" (an operator session left idle)
    LOGOUT = "auth.logout"

    # The audit chain itself: a queue row the chainer could not link (payload: reason only;
    # the target is the event sequence number the row named).
    AUDIT_CHAIN_QUEUE_ROW_SKIPPED = "audit.chain.queue_row_skipped"
    # A signed checkpoint of the Merkle tree (payload: tree_size, key_id, previous_tree_size).
    AUDIT_CHECKPOINT_SIGNED = "audit.checkpoint.signed"
    # The signer refused to sign: the tree no longer matches the latest checkpoint.
    AUDIT_CHECKPOINT_REFUSED = "audit.checkpoint.refused"

    # Scheduled jobs: lifecycle of each run
    JOB_FLOW_DECAY_STARTED = "memory.job.reasoning_flow_decay.started"
    JOB_FLOW_DECAY_COMPLETED = "memory.job.reasoning_flow_decay.completed"
    JOB_FLOW_DECAY_ERROR = "memory.job.reasoning_flow_decay.error"
    # Work owed after closes (reasoning.recording.close_work): a run that found some due; and an operator
    # owing failed work again (payload: requeued, receiver)
    JOB_CLOSE_WORK_STARTED = "memory.job.close_work.started"
    JOB_CLOSE_WORK_COMPLETED = "memory.job.close_work.completed"
    JOB_CLOSE_WORK_ERROR = "memory.job.close_work.error"
    CLOSE_WORK_REQUEUED = "reasoning.close_work.requeued"
    # The dashboard's rollups (reasoning.rollups): a run that found hours or usage owed (counts only)
    JOB_DASHBOARD_ROLLUPS_STARTED = "memory.job.dashboard_rollups.started"
    JOB_DASHBOARD_ROLLUPS_COMPLETED = "memory.job.dashboard_rollups.completed"
    JOB_DASHBOARD_ROLLUPS_ERROR = "memory.job.dashboard_rollups.error"

    # Monthly partitions (core.partitions): one event per partition made (target: its table name)
    PARTITION_CREATED = "database.partition.created"
    JOB_PARTITIONS_AHEAD_STARTED = "memory.job.partitions_ahead.started"
    JOB_PARTITIONS_AHEAD_COMPLETED = "memory.job.partitions_ahead.completed"
    JOB_PARTITIONS_AHEAD_ERROR = "memory.job.partitions_ahead.error"
    # Retention by partition (REASONING_STEP_RETENTION_DAYS, AUDIT_RETENTION_DAYS): one event per
    # partition dropped, or kept because a patient's legal hold or a missing checkpoint blocks it
    PARTITION_DROPPED = "database.partition.dropped"
    PARTITION_DROP_HELD = "database.partition.drop_blocked_by_legal_hold"
    PARTITION_DROP_UNCOVERED = "database.partition.drop_awaiting_checkpoint"
    JOB_PARTITIONS_RETENTION_STARTED = "memory.job.partitions_retention.started"
    JOB_PARTITIONS_RETENTION_COMPLETED = "memory.job.partitions_retention.completed"
    JOB_PARTITIONS_RETENTION_ERROR = "memory.job.partitions_retention.error"

    # Drift per agent: one event per stored report (its levels and counts), inside the job's run
    DRIFT_REPORT_STORED = "reasoning.drift.report_stored"
    JOB_DRIFT_STARTED = "memory.job.reasoning_drift.started"
    JOB_DRIFT_COMPLETED = "memory.job.reasoning_drift.completed"
    JOB_DRIFT_ERROR = "memory.job.reasoning_drift.error"

    # An agent's incorrect decisions for a 1:1 review (summaries, rationale): the agent and counts
    ADMIN_AGENT_REVIEW_READ = "admin.reasoning.agent.review_read"

    # External processors (processors/, docs/processors.md): registry changes (key, status,
    # agreement ref and dates, the reason), and the outbound gate's decisions (key, category, counts).
    PROCESSOR_REGISTERED = "processor.registered"
    PROCESSOR_STATUS_CHANGED = "processor.status_changed"
    PROCESSOR_TEXT_SENT_UNDER_OVERRIDE = "processor.text_sent_under_override"
    # Once per processor, cause and hour (not per call): the first refused call of the hour
    PROCESSOR_OUTBOUND_REFUSED = "processor.outbound_refused"


# Routine reads: audited, but the admin's audit list hides them unless asked ("kind"), so that
# changes and sensitive reads (raw reasoning, PHI) are not drowned out.
ROUTINE_READS = frozenset(
    {
        Action.ADMIN_FLOW_READ.value,
        Action.ADMIN_TURN_READ.value,
        Action.ADMIN_SESSION_REPLAY_READ.value,
        Action.PATIENT_FLOW_READ.value,
        Action.PATIENT_FLOWS_LISTED.value,
        Action.PATHWAY_MATCH_REQUESTED.value,
        "admin.reasoning.pathway.stats_read",
        "admin.reasoning.pathway.stats_read.proxy",
        "admin.reasoning.research.backlog_read",
        "admin.reasoning.research.backlog_read.proxy",
        "admin.reasoning.claims_pending_review.listed",
        Action.ADMIN_AGENT_REVIEW_READ.value,
    }
)
