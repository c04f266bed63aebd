"""Agents' state changes and audited reads: drift reports stored, a 1:1 review read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import Event, record, record_many
from reasoning.agents import review
from reasoning.agents.drift import Judgement
from reasoning.models import DriftReport


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
