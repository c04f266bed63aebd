"""GET /admin/v1/reasoning/research/backlog: the queue's status and loop health."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from research_backlog.models import ResearchRequest
from tests.conftest import audit_trail_text, events
from tests.factories import NOW, QUESTION, make_request
from tests.research_backlog.support import BACKLOG_READ, BACKLOG_URL, OPERATOR, ids, state

pytestmark = pytest.mark.django_db


def test_backlog_reports_distribution_ages_retries_and_recent_failures(operator: APIClient, clock: object) -> None:
    make_request(created_at=NOW - timedelta(minutes=10))
    make_request(created_at=NOW - timedelta(minutes=4), retry_count=2)
    make_request(status="dispatched", created_at=NOW - timedelta(hours=1), dispatched_at=NOW - timedelta(minutes=3))
    make_request(status="dispatched", created_at=NOW - timedelta(minutes=2), retry_count=1)
    make_request(status="completed", completed_at=NOW - timedelta(minutes=30))
    recent = make_request(
        status="failed_voluntary",
        trigger_type="lab_result",
        completed_at=NOW - timedelta(hours=1),
        failure_reason="no_sources_found",
    )
    older = make_request(
        status="failed_after_retries",
        completed_at=NOW - timedelta(hours=23),
        failure_reason="stale_after_retries",
        retry_count=3,
        reason="weak_composite_k",
    )
    make_request(status="failed_voluntary", completed_at=NOW - timedelta(hours=25), failure_reason="ancient")

    response = operator.get(BACKLOG_URL)

    assert response.status_code == 200, response.content
    assert response.json() == {
        "status_distribution": {
            "pending": 2,
            "dispatched": 2,
            "completed": 1,
            "failed_voluntary": 2,
            "failed_after_retries": 1,
        },
        "total": 8,
        "oldest_pending_age_seconds": 600.0,
        "oldest_dispatched_age_seconds": 180.0,
        "retry_distribution": {"0": 5, "1": 1, "2": 1, "3": 1},
        "recent_failures": {
            "window_hours": 24,
            "count": 2,
            "items": [
                {
                    "id": str(recent.pk),
                    "trigger_type": "lab_result",
                    "reason": "operator_requested",
                    "status": "failed_voluntary",
                    "failure_reason": "no_sources_found",
                    "retry_count": 0,
                    "completed_at": "2026-03-02T11:00:00Z",
                },
                {
                    "id": str(older.pk),
                    "trigger_type": "user_question",
                    "reason": "weak_composite_k",
                    "status": "failed_after_retries",
                    "failure_reason": "stale_after_retries",
                    "retry_count": 3,
                    "completed_at": "2026-03-01T13:00:00Z",
                },
            ],
        },
        "loop_health": {"verdict": "healthy", "reasons": []},
    }


def test_backlog_of_an_empty_queue(operator: APIClient) -> None:
    response = operator.get(BACKLOG_URL)

    assert response.status_code == 200
    body = response.json()
    assert body["status_distribution"] == dict.fromkeys(ResearchRequest.Status.values, 0)
    assert (body["total"], body["oldest_pending_age_seconds"], body["oldest_dispatched_age_seconds"]) == (0, None, None)
    assert body["retry_distribution"] == {}
    assert body["recent_failures"] == {"window_hours": 24, "count": 0, "items": []}
    assert body["loop_health"] == {"verdict": "healthy", "reasons": []}


def test_backlog_lists_at_most_ten_recent_failures_newest_first(operator: APIClient, clock: object) -> None:
    rows = [
        make_request(status="failed_voluntary", completed_at=NOW - timedelta(minutes=minutes), failure_reason="x")
        for minutes in range(12)
    ]

    body = operator.get(BACKLOG_URL).json()

    assert body["recent_failures"]["count"] == 12
    assert ids(body["recent_failures"]["items"]) == [str(row.pk) for row in rows[:10]]
    assert body["loop_health"] == {"verdict": "warn", "reasons": ["recent_failures_at_least_5"]}


# (kind, age) rows placed relative to NOW, and the verdict they must produce.
HEALTH_CASES: dict[str, tuple[list[tuple[str, timedelta]], str, list[str]]] = {
    "dispatched_just_under_15m": ([("dispatched", timedelta(minutes=15, seconds=-1))], "healthy", []),
    "dispatched_15m": ([("dispatched", timedelta(minutes=15))], "warn", ["oldest_dispatched_over_15m"]),
    "dispatched_just_under_25m": (
        [("dispatched", timedelta(minutes=25, seconds=-1))],
        "warn",
        ["oldest_dispatched_over_15m"],
    ),
    "dispatched_25m": ([("dispatched", timedelta(minutes=25))], "critical", ["oldest_dispatched_over_25m"]),
    "pending_just_under_1h": ([("pending", timedelta(hours=1, seconds=-1))], "healthy", []),
    "pending_1h": ([("pending", timedelta(hours=1))], "critical", ["oldest_pending_over_1h"]),
    "four_recent_failures": ([("failed", timedelta(hours=1))] * 4, "healthy", []),
    "five_recent_failures": ([("failed", timedelta(hours=1))] * 5, "warn", ["recent_failures_at_least_5"]),
    "fifth_failure_outside_24h": (
        [("failed", timedelta(hours=1))] * 4 + [("failed", timedelta(hours=24, seconds=1))],
        "healthy",
        [],
    ),
    "critical_and_warn": (
        [("pending", timedelta(hours=2))] + [("failed", timedelta(minutes=5))] * 5,
        "critical",
        ["oldest_pending_over_1h", "recent_failures_at_least_5"],
    ),
}


@pytest.mark.parametrize(("rows", "verdict", "reasons"), list(HEALTH_CASES.values()), ids=list(HEALTH_CASES))
def test_backlog_loop_health_verdict(
    operator: APIClient, clock: object, rows: list[tuple[str, timedelta]], verdict: str, reasons: list[str]
) -> None:
    for kind, age in rows:
        if kind == "pending":
            make_request(created_at=NOW - age)
        elif kind == "dispatched":
            make_request(status="dispatched", created_at=NOW - age, dispatched_at=NOW - age)
        else:
            make_request(status="failed_voluntary", completed_at=NOW - age, failure_reason="x")

    body = operator.get(BACKLOG_URL).json()

    assert body["loop_health"] == {"verdict": verdict, "reasons": reasons}


def test_backlog_read_is_audited_with_the_total_and_verdict_only(operator: APIClient, clock: object) -> None:
    make_request(created_at=NOW - timedelta(hours=2))
    make_request(status="dispatched")
    before = state()

    operator.get(BACKLOG_URL)

    (event,) = events(BACKLOG_READ)
    assert (event.actor, event.target_type, event.target_id) == (OPERATOR, "", "")
    assert event.payload == {"total": 2, "loop_health": "critical"}
    after = state()
    assert (after["requests"], after["reviews"]) == (before["requests"], before["reviews"])
    assert QUESTION not in audit_trail_text()
