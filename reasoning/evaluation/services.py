"""The audit trail of evaluation work: exports written and downloaded, evaluation runs stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from audit.actions import Action
from audit.services import record
from reasoning.models import EvaluationRun


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
