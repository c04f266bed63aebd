"""The research backlog's jobs: stale sweep, TTL purge, consumer, loop health, schedules, commands.

Rows are made through ``services.enqueue`` / ``pull_next`` / ``complete`` at a travelled
clock, so ``created_at``, ``dispatched_at`` and ``completed_at`` are the real ones; the
clock then moves forward and the job runs.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django_q.models import Schedule
from rest_framework.test import APIClient

from audit.models import AuditEvent
from core.errors import Conflict
from research_backlog import jobs, services
from research_backlog.dispatcher import DispatchResult
from research_backlog.health import backlog_status, loop_health
from research_backlog.jobs import consume, consume_if_enabled, purge_expired, sweep_stale
from research_backlog.models import ResearchRequest
from tests.conftest import events
from tests.factories import make_flow

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
Status = ResearchRequest.Status
OPERATOR = "token:operator"
DISPATCHER = "token:dispatcher"
SWEEP_ACTOR = "system:backlog_stale_sweep"
PURGE_ACTOR = "system:backlog_ttl_purge"
CONSUMER_ACTOR = "system:backlog_consumer"
QUESTION = "Which guideline covers blood pressure targets for adults over 80?"
TARGET_TYPE = "research_backlog.researchrequest"
STATUSES = ["pending", "dispatched", "completed", "failed_voluntary", "failed_after_retries"]
NO_COUNTS = {"pulled": 0, "completed": 0, "failed": 0, "accepted": 0, "lost": 0}
_topics = itertools.count()


# --- helpers ------------------------------------------------------------------------------------


def enqueue_at(clock: time_machine.Coordinates, at: datetime) -> ResearchRequest:
    """A pending request created at ``at``, with a trigger type of its own (so it can be pulled by type)."""
    clock.move_to(at)
    row, created = services.enqueue(
        trigger_type=f"topic_{next(_topics)}",
        question=QUESTION,
        reason="operator_requested",
        source="operator",
        actor=OPERATOR,
    )
    assert created
    return row


def pull(clock: time_machine.Coordinates, row: ResearchRequest, at: datetime) -> ResearchRequest:
    """Pull exactly ``row`` at ``at``."""
    clock.move_to(at)
    pulled = services.pull_next(actor=DISPATCHER, trigger_type=row.trigger_type)
    assert pulled is not None
    assert pulled.pk == row.pk
    return pulled


def dispatched_at(clock: time_machine.Coordinates, at: datetime) -> ResearchRequest:
    """A request created and pulled at ``at``."""
    return pull(clock, enqueue_at(clock, at), at)


def completed_at(clock: time_machine.Coordinates, at: datetime, *, error: str | None = None) -> ResearchRequest:
    """A request pulled and completed (or failed voluntarily with ``error``) at ``at``."""
    row = dispatched_at(clock, at)
    return services.complete(row.pk, actor=DISPATCHER, error=error)


def recover(clock: time_machine.Coordinates, row: ResearchRequest, at: datetime) -> ResearchRequest:
    """Pull ``row`` at ``at`` and let the sweep take it back 31 minutes later."""
    pull(clock, row, at)
    clock.move_to(at + timedelta(minutes=31))
    sweep_stale()
    stored = fresh(row)
    assert stored.status == Status.PENDING
    return stored


def at_retry_cap(clock: time_machine.Coordinates, start: datetime) -> ResearchRequest:
    """A pending request the sweep has recovered three times (BACKLOG_MAX_RETRIES), starting at ``start``."""
    row = enqueue_at(clock, start)
    for n in range(3):
        row = recover(clock, row, start + timedelta(hours=n))
    assert row.retry_count == 3
    return row


def failed_after_retries_at(clock: time_machine.Coordinates, at: datetime) -> ResearchRequest:
    """A request the sweep fails at ``at`` (stuck for 31 minutes with three retries behind it)."""
    row = at_retry_cap(clock, at - timedelta(hours=5))
    pull(clock, row, at - timedelta(minutes=31))
    clock.move_to(at)
    sweep_stale()
    stored = fresh(row)
    assert stored.status == Status.FAILED_AFTER_RETRIES
    return stored


def fresh(row: ResearchRequest) -> ResearchRequest:
    return ResearchRequest.objects.get(pk=row.pk)


def snapshot(row: ResearchRequest) -> tuple[Any, ...]:
    stored = fresh(row)
    return (
        stored.status,
        stored.retry_count,
        stored.dispatched_at,
        stored.completed_at,
        stored.failure_reason,
        stored.completed_flow_id,
    )


def last_event_id() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def events_since(marker: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(id__gt=marker).order_by("id"))


def actions_of(row: ResearchRequest) -> list[str]:
    return list(
        AuditEvent.objects.filter(target_type=TARGET_TYPE, target_id=str(row.pk))
        .order_by("id")
        .values_list("action", flat=True)
    )


@dataclass
class FakeDispatcher:
    """A Dispatcher whose answer is a function of the row; records what it was handed."""

    answer: Callable[[ResearchRequest], DispatchResult]
    name: str = "fake"
    seen: list[tuple[uuid.UUID, str, datetime | None, str]] = field(default_factory=list)

    def dispatch(self, request: ResearchRequest) -> DispatchResult:
        stored = fresh(request)
        self.seen.append((request.pk, stored.status, stored.dispatched_at, request.question))
        return self.answer(request)


# --- stale sweep: thresholds ---------------------------------------------------------------------


def test_row_dispatched_29m59s_ago_is_untouched(clock: time_machine.Coordinates) -> None:
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=29, seconds=59))

    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}

    stored = fresh(row)
    assert (stored.status, stored.retry_count, stored.dispatched_at) == (Status.DISPATCHED, 0, T0)


def test_row_dispatched_exactly_30m_ago_is_untouched(clock: time_machine.Coordinates) -> None:
    # "More than 30 minutes": the cutoff itself is not stale yet.
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=30))

    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}

    assert fresh(row).status == Status.DISPATCHED


def test_row_dispatched_30m01s_ago_goes_back_to_pending(clock: time_machine.Coordinates) -> None:
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=30, seconds=1))

    assert sweep_stale() == {"recovered": 1, "failed_after_retries": 0}

    stored = fresh(row)
    assert stored.status == Status.PENDING
    assert stored.retry_count == 1
    assert stored.dispatched_at is None
    assert stored.completed_at is None
    assert stored.failure_reason == ""
    assert stored.created_at == T0  # keeps its place in the FIFO


def test_recovered_row_is_pulled_again_first_in_line(clock: time_machine.Coordinates) -> None:
    row = dispatched_at(clock, T0)
    younger = enqueue_at(clock, T0 + timedelta(minutes=1))
    clock.move_to(T0 + timedelta(minutes=31))
    sweep_stale()

    again = services.pull_next(actor=DISPATCHER)

    assert again is not None
    assert again.pk == row.pk
    assert (again.retry_count, again.dispatched_at) == (1, T0 + timedelta(minutes=31))
    assert fresh(younger).status == Status.PENDING


def test_row_at_the_retry_cap_fails_after_retries_when_stuck_again(clock: time_machine.Coordinates) -> None:
    row = at_retry_cap(clock, T0 - timedelta(hours=5))
    pull(clock, row, T0)
    clock.move_to(T0 + timedelta(minutes=30))
    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}
    clock.move_to(T0 + timedelta(minutes=30, seconds=1))

    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 1}

    stored = fresh(row)
    assert stored.status == Status.FAILED_AFTER_RETRIES
    assert stored.failure_reason == "stale_after_retries"
    assert stored.completed_at == T0 + timedelta(minutes=30, seconds=1)
    assert stored.retry_count == 3
    assert stored.dispatched_at == T0  # the last dispatch stays on record
    assert stored.completed_flow_id is None


def test_full_life_cycle_ends_failed_after_exactly_four_dispatches(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)
    now = T0
    dispatches = 0
    while fresh(row).status != Status.FAILED_AFTER_RETRIES:
        assert dispatches < 10, "the sweep never gave up"
        clock.move_to(now)
        pulled = services.pull_next(actor=DISPATCHER)
        assert pulled is not None
        assert pulled.pk == row.pk
        dispatches += 1
        now += timedelta(minutes=31)
        clock.move_to(now)
        sweep_stale()

    assert dispatches == 4
    stored = fresh(row)
    assert (stored.retry_count, stored.failure_reason) == (3, "stale_after_retries")
    assert stored.completed_at == T0 + 4 * timedelta(minutes=31)
    assert actions_of(row) == [
        "reasoning.research.deeper_request_created",
        *["reasoning.research.backlog.dispatched", "reasoning.research.backlog.recovered"] * 3,
        "reasoning.research.backlog.dispatched",
        "reasoning.research.backlog.failed_after_retries",
    ]
    recovered = events("reasoning.research.backlog.recovered")
    assert [e.payload["retry_count"] for e in recovered] == [1, 2, 3]
    assert [e.payload["stuck_minutes"] for e in recovered] == [31.0] * 3
    (failed,) = events("reasoning.research.backlog.failed_after_retries")
    assert (failed.payload["retry_count"], failed.payload["stuck_minutes"]) == (3, 31.0)
    # Terminal: nothing to pull, nothing more to sweep.
    assert services.pull_next(actor=DISPATCHER) is None
    clock.move_to(now + timedelta(hours=2))
    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}
    assert len(events("reasoning.research.backlog.failed_after_retries")) == 1


# --- stale sweep: audit trail ------------------------------------------------------------------


def test_sweep_audits_each_row_and_its_run_with_counts(clock: time_machine.Coordinates) -> None:
    capped = at_retry_cap(clock, T0 - timedelta(hours=5))
    first = dispatched_at(clock, T0)
    second = dispatched_at(clock, T0 + timedelta(minutes=1))
    pull(clock, capped, T0 + timedelta(minutes=2))
    recent = dispatched_at(clock, T0 + timedelta(minutes=20))
    clock.move_to(T0 + timedelta(minutes=40))
    marker = last_event_id()

    assert sweep_stale() == {"recovered": 2, "failed_after_retries": 1}

    run = events_since(marker)
    assert {e.actor for e in run} == {SWEEP_ACTOR}
    assert run[0].action == "memory.job.backlog_stale_sweep.started"
    assert run[0].payload == {"stale_minutes": 30, "max_retries": 3}
    assert run[-1].action == "memory.job.backlog_stale_sweep.completed"
    assert run[-1].payload == {"recovered": 2, "failed_after_retries": 1}
    per_row = {e.target_id: e for e in run[1:-1]}
    assert len(per_row) == len(run) - 2 == 3
    assert {pk: e.action for pk, e in per_row.items()} == {
        str(first.pk): "reasoning.research.backlog.recovered",
        str(second.pk): "reasoning.research.backlog.recovered",
        str(capped.pk): "reasoning.research.backlog.failed_after_retries",
    }
    assert {e.target_type for e in per_row.values()} == {TARGET_TYPE}
    assert per_row[str(first.pk)].payload == {
        "request_id": str(first.pk),
        "trigger_type": first.trigger_type,
        "reason": "operator_requested",
        "source": "operator",
        "retry_count": 1,
        "stuck_minutes": 40.0,
    }
    assert per_row[str(second.pk)].payload["stuck_minutes"] == 39.0
    assert per_row[str(capped.pk)].payload["retry_count"] == 3
    assert per_row[str(capped.pk)].payload["stuck_minutes"] == 38.0
    assert QUESTION not in str([e.payload for e in run])
    assert fresh(recent).status == Status.DISPATCHED
    assert events("memory.job.backlog_stale_sweep.error") == []


def test_empty_sweep_still_audits_its_run(clock: time_machine.Coordinates) -> None:
    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}

    (started,) = events("memory.job.backlog_stale_sweep.started")
    (completed,) = events("memory.job.backlog_stale_sweep.completed")
    assert started.pk < completed.pk
    assert completed.payload == {"recovered": 0, "failed_after_retries": 0}


def test_pending_and_terminal_rows_are_never_touched(clock: time_machine.Coordinates) -> None:
    long_ago = T0 - timedelta(days=2)
    pending = enqueue_at(clock, long_ago)
    recovered = recover(clock, enqueue_at(clock, long_ago), long_ago)  # pending again, retry 1
    done = completed_at(clock, long_ago)
    gave_up = completed_at(clock, long_ago, error="gave_up")
    exhausted = failed_after_retries_at(clock, long_ago + timedelta(hours=6))
    rows = [pending, recovered, done, gave_up, exhausted]
    before = {row.pk: snapshot(row) for row in rows}
    sweeps_so_far = len(events("reasoning.research.backlog.recovered"))
    clock.move_to(T0)

    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}

    assert {row.pk: snapshot(row) for row in rows} == before
    assert len(events("reasoning.research.backlog.recovered")) == sweeps_so_far


def test_completed_row_can_no_longer_be_swept(clock: time_machine.Coordinates) -> None:
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=29))
    services.complete(row.pk, actor=DISPATCHER)
    clock.move_to(T0 + timedelta(hours=3))

    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}

    stored = fresh(row)
    assert (stored.status, stored.completed_at) == (Status.COMPLETED, T0 + timedelta(minutes=29))


def test_swept_row_can_no_longer_be_completed(clock: time_machine.Coordinates, operator: APIClient) -> None:
    flow_id = make_flow()
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=31))
    sweep_stale()

    with pytest.raises(Conflict) as caught:
        services.complete(row.pk, actor=DISPATCHER, flow_id=flow_id)
    assert caught.value.status_code == 409
    response = operator.post(
        f"/admin/v1/reasoning/research/backlog/{row.pk}/complete", {"flow_id": str(flow_id)}, format="json"
    )
    assert response.status_code == 409, response.content

    stored = fresh(row)
    assert (stored.status, stored.completed_at, stored.completed_flow_id) == (Status.PENDING, None, None)
    assert events("reasoning.research.backlog.completed") == []


def test_row_failed_after_retries_can_no_longer_be_completed(clock: time_machine.Coordinates) -> None:
    row = failed_after_retries_at(clock, T0)

    with pytest.raises(Conflict):
        services.complete(row.pk, actor=DISPATCHER)
    with pytest.raises(Conflict):
        services.complete(row.pk, actor=DISPATCHER, error="gave_up")

    assert fresh(row).status == Status.FAILED_AFTER_RETRIES


def test_row_completed_after_the_sweep_picked_it_is_left_completed(
    clock: time_machine.Coordinates, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sweep lists stale ids, then locks and re-checks them batch by batch; a completion
    # that commits in between must win.
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=31))
    sweep_batch = services.sweep_batch

    def completed_first(ids: list[uuid.UUID], cutoff: datetime, now: datetime, *, actor: str) -> tuple[int, int]:
        services.complete(row.pk, actor=DISPATCHER)
        return sweep_batch(ids, cutoff, now, actor=actor)

    monkeypatch.setattr(services, "sweep_batch", completed_first)

    assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}

    assert fresh(row).status == Status.COMPLETED
    assert events("reasoning.research.backlog.recovered") == []


def test_sweep_thresholds_come_from_settings(clock: time_machine.Coordinates) -> None:
    with override_settings(BACKLOG_STALE_MINUTES=10, BACKLOG_MAX_RETRIES=1):
        row = dispatched_at(clock, T0)
        clock.move_to(T0 + timedelta(minutes=10))
        assert sweep_stale() == {"recovered": 0, "failed_after_retries": 0}
        clock.move_to(T0 + timedelta(minutes=10, seconds=1))
        assert sweep_stale() == {"recovered": 1, "failed_after_retries": 0}
        pull(clock, row, T0 + timedelta(minutes=11))
        clock.move_to(T0 + timedelta(minutes=21, seconds=1))
        assert sweep_stale() == {"recovered": 0, "failed_after_retries": 1}

    stored = fresh(row)
    assert (stored.status, stored.retry_count) == (Status.FAILED_AFTER_RETRIES, 1)
    started = events("memory.job.backlog_stale_sweep.started")
    assert [e.payload for e in started] == [{"stale_minutes": 10, "max_retries": 1}] * 3


def test_zero_retries_fails_the_first_stuck_dispatch(clock: time_machine.Coordinates) -> None:
    row = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=31))

    with override_settings(BACKLOG_MAX_RETRIES=0):
        assert sweep_stale() == {"recovered": 0, "failed_after_retries": 1}

    stored = fresh(row)
    assert (stored.status, stored.retry_count, stored.failure_reason) == (
        Status.FAILED_AFTER_RETRIES,
        0,
        "stale_after_retries",
    )


def test_sweep_works_through_more_rows_than_one_batch(clock: time_machine.Coordinates) -> None:
    ResearchRequest.objects.bulk_create(
        ResearchRequest(
            trigger_type="bulk",
            question=QUESTION,
            reason="operator_requested",
            source="operator",
            requested_by=OPERATOR,
            status=Status.DISPATCHED,
            dispatched_at=T0 - timedelta(minutes=31),
            created_at=T0 - timedelta(minutes=31),
        )
        for _ in range(501)
    )

    assert sweep_stale() == {"recovered": 501, "failed_after_retries": 0}

    assert not ResearchRequest.objects.dispatched().exists()
    assert len(events("reasoning.research.backlog.recovered")) == 501


# --- TTL purge ----------------------------------------------------------------------------------


def terminal_rows_completed_at(clock: time_machine.Coordinates, at: datetime) -> list[ResearchRequest]:
    exhausted = failed_after_retries_at(clock, at)
    return [completed_at(clock, at), completed_at(clock, at, error="gave_up"), exhausted]


def test_terminal_rows_are_kept_until_30_days_after_completion(clock: time_machine.Coordinates) -> None:
    rows = terminal_rows_completed_at(clock, T0)
    assert {fresh(row).status for row in rows} == {
        Status.COMPLETED,
        Status.FAILED_VOLUNTARY,
        Status.FAILED_AFTER_RETRIES,
    }
    assert {fresh(row).completed_at for row in rows} == {T0}

    clock.move_to(T0 + timedelta(days=30) - timedelta(seconds=1))
    assert purge_expired() == {"deleted": 0}
    clock.move_to(T0 + timedelta(days=30))
    assert purge_expired() == {"deleted": 0}

    assert ResearchRequest.objects.filter(pk__in=[row.pk for row in rows]).count() == 3


def test_terminal_rows_are_deleted_just_after_30_days(clock: time_machine.Coordinates) -> None:
    rows = terminal_rows_completed_at(clock, T0)
    clock.move_to(T0 + timedelta(days=30, seconds=1))

    assert purge_expired() == {"deleted": 3}

    assert not ResearchRequest.objects.filter(pk__in=[row.pk for row in rows]).exists()


def test_pending_and_dispatched_rows_are_never_purged(clock: time_machine.Coordinates) -> None:
    year_ago = T0 - timedelta(days=365)
    pending = enqueue_at(clock, year_ago)
    recovered = recover(clock, enqueue_at(clock, year_ago), year_ago)
    dispatched = dispatched_at(clock, year_ago + timedelta(hours=1))
    clock.move_to(T0)

    assert purge_expired() == {"deleted": 0}

    assert ResearchRequest.objects.filter(pk__in=[pending.pk, dispatched.pk, recovered.pk]).count() == 3


def test_purge_goes_by_completed_at_not_created_at(clock: time_machine.Coordinates) -> None:
    row = dispatched_at(clock, T0 - timedelta(days=60))
    clock.move_to(T0 - timedelta(days=29))
    services.complete(row.pk, actor=DISPATCHER)
    clock.move_to(T0)

    assert purge_expired() == {"deleted": 0}
    assert ResearchRequest.objects.filter(pk=row.pk).exists()

    clock.move_to(T0 + timedelta(days=1, seconds=1))
    assert purge_expired() == {"deleted": 1}
    assert not ResearchRequest.objects.filter(pk=row.pk).exists()


def test_purge_audits_its_run_and_keeps_the_history_of_purged_rows(clock: time_machine.Coordinates) -> None:
    rows = terminal_rows_completed_at(clock, T0)
    survivor = completed_at(clock, T0 + timedelta(days=10))
    history = {row.pk: actions_of(row) for row in rows}
    assert history[rows[0].pk] == [
        "reasoning.research.deeper_request_created",
        "reasoning.research.backlog.dispatched",
        "reasoning.research.backlog.completed",
    ]
    clock.move_to(T0 + timedelta(days=31))
    marker = last_event_id()

    purge_expired()

    run = events_since(marker)
    assert [e.action for e in run] == ["memory.job.backlog_ttl_purge.started", "memory.job.backlog_ttl_purge.completed"]
    assert {e.actor for e in run} == {PURGE_ACTOR}
    assert run[0].payload == {"ttl_days": 30}
    assert run[1].payload == {"deleted": 3}
    assert {row.pk: actions_of(row) for row in rows} == history
    assert ResearchRequest.objects.filter(pk=survivor.pk).exists()


def test_purge_works_through_several_batches(clock: time_machine.Coordinates) -> None:
    done = [completed_at(clock, T0 + timedelta(minutes=n)) for n in range(5)]
    pending = enqueue_at(clock, T0)
    clock.move_to(T0 + timedelta(days=40))

    assert purge_expired(batch_size=2) == {"deleted": 5}

    assert not ResearchRequest.objects.filter(pk__in=[row.pk for row in done]).exists()
    assert ResearchRequest.objects.filter(pk=pending.pk).exists()


def test_purge_ttl_comes_from_settings(clock: time_machine.Coordinates) -> None:
    row = completed_at(clock, T0)

    with override_settings(BACKLOG_TTL_DAYS=7):
        clock.move_to(T0 + timedelta(days=7) - timedelta(seconds=1))
        assert purge_expired() == {"deleted": 0}
        clock.move_to(T0 + timedelta(days=7, seconds=1))
        assert purge_expired() == {"deleted": 1}

    assert not ResearchRequest.objects.filter(pk=row.pk).exists()
    assert [e.payload for e in events("memory.job.backlog_ttl_purge.started")] == [{"ttl_days": 7}] * 2


# --- loop health: the pure verdict ----------------------------------------------------------------

JUST = timedelta(microseconds=1)
MIN15 = timedelta(minutes=15)
MIN25 = timedelta(minutes=25)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("pending", "dispatched", "failures", "verdict", "reasons"),
    [
        (None, None, 0, "healthy", []),
        (timedelta(0), timedelta(0), 0, "healthy", []),
        (None, MIN15 - JUST, 0, "healthy", []),
        (None, MIN15, 0, "warn", ["oldest_dispatched_over_15m"]),
        (None, MIN25 - JUST, 0, "warn", ["oldest_dispatched_over_15m"]),
        (None, MIN25, 0, "critical", ["oldest_dispatched_over_25m"]),
        (HOUR - JUST, None, 0, "healthy", []),
        (HOUR, None, 0, "critical", ["oldest_pending_over_1h"]),
        (None, None, 4, "healthy", []),
        (None, None, 5, "warn", ["recent_failures_at_least_5"]),
        (None, MIN15, 5, "warn", ["oldest_dispatched_over_15m", "recent_failures_at_least_5"]),
        (HOUR, MIN15, 0, "critical", ["oldest_pending_over_1h", "oldest_dispatched_over_15m"]),
        (None, MIN25, 5, "critical", ["oldest_dispatched_over_25m", "recent_failures_at_least_5"]),
        (
            HOUR,
            MIN25,
            5,
            "critical",
            ["oldest_dispatched_over_25m", "oldest_pending_over_1h", "recent_failures_at_least_5"],
        ),
    ],
)
def test_loop_health_boundaries(
    pending: timedelta | None, dispatched: timedelta | None, failures: int, verdict: str, reasons: list[str]
) -> None:
    health = loop_health(oldest_pending_age=pending, oldest_dispatched_age=dispatched, recent_failures=failures)

    assert (health.verdict, health.reasons) == (verdict, reasons)


# --- loop health: backlog_status ----------------------------------------------------------------


def test_status_of_an_empty_backlog(clock: time_machine.Coordinates) -> None:
    status = backlog_status()

    assert status == {
        "status_distribution": dict.fromkeys(STATUSES, 0),
        "total": 0,
        "oldest_pending_age_seconds": None,
        "oldest_dispatched_age_seconds": None,
        "retry_distribution": {},
        "recent_failures": {"window_hours": 24, "count": 0, "items": []},
        "loop_health": {"verdict": "healthy", "reasons": []},
    }


@pytest.mark.parametrize(
    ("age", "verdict", "reasons"),
    [
        (timedelta(minutes=14, seconds=59), "healthy", []),
        (timedelta(minutes=15), "warn", ["oldest_dispatched_over_15m"]),
        (timedelta(minutes=24, seconds=59), "warn", ["oldest_dispatched_over_15m"]),
        (timedelta(minutes=25), "critical", ["oldest_dispatched_over_25m"]),
    ],
)
def test_status_verdict_follows_the_oldest_dispatched_age(
    clock: time_machine.Coordinates, age: timedelta, verdict: str, reasons: list[str]
) -> None:
    dispatched_at(clock, T0)
    dispatched_at(clock, T0 + timedelta(minutes=5))
    clock.move_to(T0 + age)

    status = backlog_status()

    assert status["oldest_dispatched_age_seconds"] == age.total_seconds()
    assert status["oldest_pending_age_seconds"] is None
    assert status["loop_health"] == {"verdict": verdict, "reasons": reasons}
    assert backlog_status(now=T0 + age) == status


@pytest.mark.parametrize(
    ("age", "verdict", "reasons"),
    [
        (timedelta(minutes=59, seconds=59), "healthy", []),
        (timedelta(hours=1), "critical", ["oldest_pending_over_1h"]),
    ],
)
def test_status_verdict_follows_the_oldest_pending_age(
    clock: time_machine.Coordinates, age: timedelta, verdict: str, reasons: list[str]
) -> None:
    enqueue_at(clock, T0)
    enqueue_at(clock, T0 + timedelta(minutes=30))
    clock.move_to(T0 + age)

    status = backlog_status()

    assert status["oldest_pending_age_seconds"] == age.total_seconds()
    assert status["oldest_dispatched_age_seconds"] is None
    assert status["loop_health"] == {"verdict": verdict, "reasons": reasons}


def test_status_ages_are_measured_from_the_now_given(clock: time_machine.Coordinates) -> None:
    dispatched_at(clock, T0)
    enqueue_at(clock, T0 + timedelta(minutes=10))
    clock.move_to(T0 + timedelta(minutes=12))

    status = backlog_status(now=T0 + timedelta(hours=1, minutes=10))

    assert status["oldest_dispatched_age_seconds"] == 4200.0
    assert status["oldest_pending_age_seconds"] == 3600.0
    assert status["loop_health"] == {
        "verdict": "critical",
        "reasons": ["oldest_dispatched_over_25m", "oldest_pending_over_1h"],
    }


def test_recent_failures_count_only_the_last_24_hours(clock: time_machine.Coordinates) -> None:
    completed_at(clock, T0, error="gave_up")  # 25 h before the read: not counted
    edge = completed_at(clock, T0 + timedelta(hours=1), error="gave_up")  # exactly 24 h before
    latest = failed_after_retries_at(clock, T0 + timedelta(hours=8))
    completed_at(clock, T0 + timedelta(hours=9))  # a success is no failure
    clock.move_to(T0 + timedelta(hours=25))

    status = backlog_status()

    assert status["recent_failures"]["count"] == 2
    assert [item["id"] for item in status["recent_failures"]["items"]] == [latest.pk, edge.pk]
    assert status["recent_failures"]["items"][0] == {
        "id": latest.pk,
        "trigger_type": latest.trigger_type,
        "reason": "operator_requested",
        "status": "failed_after_retries",
        "failure_reason": "stale_after_retries",
        "retry_count": 3,
        "completed_at": T0 + timedelta(hours=8),
    }
    assert status["recent_failures"]["items"][1]["failure_reason"] == "gave_up"
    assert backlog_status(now=T0 + timedelta(hours=25, seconds=1))["recent_failures"]["count"] == 1


def test_five_recent_failures_warn_and_four_do_not(clock: time_machine.Coordinates) -> None:
    completed_at(clock, T0 - timedelta(hours=25), error="gave_up")  # too old to count
    for n in range(4):
        completed_at(clock, T0 + timedelta(minutes=n), error="gave_up")
    clock.move_to(T0 + timedelta(hours=1))
    assert backlog_status()["loop_health"] == {"verdict": "healthy", "reasons": []}

    failed_after_retries_at(clock, T0 + timedelta(hours=1))

    status = backlog_status()
    assert status["recent_failures"]["count"] == 5
    assert status["loop_health"] == {"verdict": "warn", "reasons": ["recent_failures_at_least_5"]}


def test_recent_failures_list_at_most_10_newest_first(clock: time_machine.Coordinates) -> None:
    failures = [completed_at(clock, T0 + timedelta(minutes=n), error=f"err_{n}") for n in range(12)]
    clock.move_to(T0 + timedelta(hours=1))

    recent = backlog_status()["recent_failures"]

    assert recent["count"] == 12
    assert [item["id"] for item in recent["items"]] == [row.pk for row in reversed(failures)][:10]
    assert [item["failure_reason"] for item in recent["items"]] == [f"err_{n}" for n in range(11, 1, -1)]


def test_status_and_retry_distributions(clock: time_machine.Coordinates) -> None:
    recovered = recover(clock, enqueue_at(clock, T0), T0)  # pending, retry 1
    enqueue_at(clock, T0 + timedelta(minutes=40))
    dispatched_at(clock, T0 + timedelta(minutes=41))
    completed_at(clock, T0 + timedelta(minutes=42))
    clock.move_to(T0 + timedelta(minutes=45))

    status = backlog_status()

    assert status["status_distribution"] == {
        "pending": 2,
        "dispatched": 1,
        "completed": 1,
        "failed_voluntary": 0,
        "failed_after_retries": 0,
    }
    assert list(status["status_distribution"]) == STATUSES
    assert status["total"] == 4
    assert recovered.retry_count == 1
    assert status["retry_distribution"] == {"0": 3, "1": 1}


# --- loop health: the HTTP route ----------------------------------------------------------------


def test_backlog_route_reports_ages_and_verdict_at_the_travelled_clock(
    clock: time_machine.Coordinates, operator: APIClient
) -> None:
    dispatched_at(clock, T0)
    enqueue_at(clock, T0 + timedelta(minutes=10))
    failed = completed_at(clock, T0 + timedelta(minutes=11), error="gave_up")
    clock.move_to(T0 + timedelta(minutes=20))

    response = operator.get("/admin/v1/reasoning/research/backlog")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["oldest_dispatched_age_seconds"] == 1200.0
    assert body["oldest_pending_age_seconds"] == 600.0
    assert body["status_distribution"] == {
        "pending": 1,
        "dispatched": 1,
        "completed": 0,
        "failed_voluntary": 1,
        "failed_after_retries": 0,
    }
    assert body["retry_distribution"] == {"0": 3}
    assert body["recent_failures"]["count"] == 1
    assert body["recent_failures"]["items"][0]["id"] == str(failed.pk)
    assert body["recent_failures"]["items"][0]["failure_reason"] == "gave_up"
    assert body["loop_health"] == {"verdict": "warn", "reasons": ["oldest_dispatched_over_15m"]}
    (read,) = events("admin.reasoning.research.backlog_read")
    assert read.payload == {"total": 3, "loop_health": "warn"}

    clock.move_to(T0 + timedelta(minutes=25))
    later = operator.get("/admin/v1/reasoning/research/backlog").json()
    assert later["oldest_dispatched_age_seconds"] == 1500.0
    assert later["loop_health"] == {"verdict": "critical", "reasons": ["oldest_dispatched_over_25m"]}

    clock.move_to(T0 + timedelta(minutes=11, hours=24, seconds=1))
    aged = operator.get("/admin/v1/reasoning/research/backlog").json()
    assert aged["recent_failures"] == {"window_hours": 24, "count": 0, "items": []}


def test_backlog_route_needs_the_admin_scope(
    clock: time_machine.Coordinates, reader: APIClient, anonymous: APIClient
) -> None:
    assert reader.get("/admin/v1/reasoning/research/backlog").status_code == 403
    assert anonymous.get("/admin/v1/reasoning/research/backlog").status_code == 401
    assert events("admin.reasoning.research.backlog_read") == []


# --- consumer -----------------------------------------------------------------------------------


@override_settings(RESEARCH_DISPATCHER_URL="")
def test_consumer_without_a_dispatcher_fails_each_pulled_row(clock: time_machine.Coordinates) -> None:
    rows = [enqueue_at(clock, T0 + timedelta(minutes=n)) for n in range(3)]
    clock.move_to(T0 + timedelta(minutes=5))
    marker = last_event_id()

    counts = consume()

    assert counts == {**NO_COUNTS, "pulled": 3, "failed": 3}
    for row in rows:
        stored = fresh(row)
        assert stored.status == Status.FAILED_VOLUNTARY
        assert stored.failure_reason == "no_dispatcher_configured"
        assert stored.completed_at == stored.dispatched_at == T0 + timedelta(minutes=5)
    run = events_since(marker)
    assert {e.actor for e in run} == {CONSUMER_ACTOR}
    assert [e.action for e in run] == [
        "memory.job.backlog_consumer.started",
        *["reasoning.research.backlog.dispatched", "reasoning.research.backlog.failed_voluntary"] * 3,
        "memory.job.backlog_consumer.completed",
    ]
    assert run[0].payload == {"dispatcher": "none"}
    assert run[-1].payload == counts
    assert [e.target_id for e in run if e.action.endswith("failed_voluntary")] == [str(row.pk) for row in rows]
    assert {e.payload["error"] for e in run if e.action.endswith("failed_voluntary")} == {"no_dispatcher_configured"}


def test_consumer_pulls_at_most_the_batch_oldest_first(clock: time_machine.Coordinates) -> None:
    rows = [enqueue_at(clock, T0 + timedelta(minutes=n)) for n in range(5)]
    clock.move_to(T0 + timedelta(minutes=10))

    with override_settings(BACKLOG_CONSUMER_BATCH=2):
        assert consume() == {**NO_COUNTS, "pulled": 2, "failed": 2}

    assert [fresh(row).status for row in rows] == [Status.FAILED_VOLUNTARY] * 2 + [Status.PENDING] * 3
    assert consume(limit=1) == {**NO_COUNTS, "pulled": 1, "failed": 1}
    assert fresh(rows[2]).status == Status.FAILED_VOLUNTARY
    assert ResearchRequest.objects.pending().count() == 2


def test_consumer_on_an_empty_backlog_audits_a_run_with_zero_counts(clock: time_machine.Coordinates) -> None:
    assert consume() == NO_COUNTS

    (completed,) = events("memory.job.backlog_consumer.completed")
    assert completed.payload == NO_COUNTS


def test_consumer_leaves_dispatched_rows_alone(clock: time_machine.Coordinates) -> None:
    busy = dispatched_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=1))

    assert consume() == NO_COUNTS

    assert snapshot(busy)[:3] == (Status.DISPATCHED, 0, T0)


@override_settings(BACKLOG_CONSUMER_ENABLED=False)
def test_disabled_consumer_does_nothing(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=1))
    marker = last_event_id()

    assert consume_if_enabled() is None

    assert snapshot(row)[:2] == (Status.PENDING, 0)
    assert events_since(marker) == []


@override_settings(BACKLOG_CONSUMER_ENABLED=True, RESEARCH_DISPATCHER_URL="")
def test_enabled_consumer_consumes(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=1))

    assert consume_if_enabled() == {**NO_COUNTS, "pulled": 1, "failed": 1}

    assert fresh(row).failure_reason == "no_dispatcher_configured"
    assert len(events("memory.job.backlog_consumer.completed")) == 1


def test_dispatcher_naming_a_recorded_flow_completes_the_row(clock: time_machine.Coordinates) -> None:
    flow_id = make_flow()
    row = enqueue_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=2))
    dispatcher = FakeDispatcher(lambda request: DispatchResult(flow_id=flow_id))

    counts = consume(dispatcher)

    assert counts == {**NO_COUNTS, "pulled": 1, "completed": 1}
    # The dispatcher is handed a row that is already claimed (and can read its question).
    assert dispatcher.seen == [(row.pk, Status.DISPATCHED, T0 + timedelta(minutes=2), QUESTION)]
    stored = fresh(row)
    assert (stored.status, stored.completed_flow_id, stored.failure_reason) == (Status.COMPLETED, flow_id, "")
    (completed,) = events("reasoning.research.backlog.completed")
    assert completed.actor == CONSUMER_ACTOR
    assert completed.payload["flow_id"] == str(flow_id)
    assert events("memory.job.backlog_consumer.started")[0].payload == {"dispatcher": "fake"}


def test_dispatcher_naming_an_unknown_flow_fails_the_row(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)
    dispatcher = FakeDispatcher(lambda request: DispatchResult(flow_id=uuid.uuid4()))

    assert consume(dispatcher) == {**NO_COUNTS, "pulled": 1, "failed": 1}

    stored = fresh(row)
    assert (stored.status, stored.failure_reason, stored.completed_flow_id) == (
        Status.FAILED_VOLUNTARY,
        "dispatcher_unknown_flow",
        None,
    )
    assert events("reasoning.research.backlog.completed") == []
    (failed,) = events("reasoning.research.backlog.failed_voluntary")
    assert failed.payload["error"] == "dispatcher_unknown_flow"


def test_dispatcher_error_fails_the_row_with_that_label(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)

    assert consume(FakeDispatcher(lambda request: DispatchResult(error="dispatcher_http_500"))) == {
        **NO_COUNTS,
        "pulled": 1,
        "failed": 1,
    }

    assert (fresh(row).status, fresh(row).failure_reason) == (Status.FAILED_VOLUNTARY, "dispatcher_http_500")


def test_accepted_row_stays_dispatched_until_the_dispatcher_reports(clock: time_machine.Coordinates) -> None:
    flow_id = make_flow()
    row = enqueue_at(clock, T0)
    clock.move_to(T0 + timedelta(minutes=1))

    assert consume(FakeDispatcher(lambda request: DispatchResult(accepted=True))) == {
        **NO_COUNTS,
        "pulled": 1,
        "accepted": 1,
    }

    stored = fresh(row)
    assert (stored.status, stored.dispatched_at, stored.completed_at) == (
        Status.DISPATCHED,
        T0 + timedelta(minutes=1),
        None,
    )
    assert actions_of(row) == ["reasoning.research.deeper_request_created", "reasoning.research.backlog.dispatched"]
    # Not pulled again by the next run; the dispatcher completes it itself later.
    assert consume(FakeDispatcher(lambda request: DispatchResult(accepted=True)))["pulled"] == 0
    clock.move_to(T0 + timedelta(minutes=20))
    services.complete(row.pk, actor=DISPATCHER, flow_id=flow_id)
    assert fresh(row).status == Status.COMPLETED


def test_row_swept_back_while_the_dispatcher_ran_is_lost_not_completed(clock: time_machine.Coordinates) -> None:
    flow_id = make_flow()
    row = enqueue_at(clock, T0)

    def slow(request: ResearchRequest) -> DispatchResult:
        clock.move_to(T0 + timedelta(minutes=31))
        assert sweep_stale() == {"recovered": 1, "failed_after_retries": 0}
        return DispatchResult(flow_id=flow_id)

    counts = consume(FakeDispatcher(slow), limit=1)

    assert counts == {**NO_COUNTS, "pulled": 1, "lost": 1}
    stored = fresh(row)
    assert (stored.status, stored.retry_count, stored.completed_at, stored.completed_flow_id) == (
        Status.PENDING,
        1,
        None,
        None,
    )
    assert events("reasoning.research.backlog.completed") == []
    assert events("memory.job.backlog_consumer.completed")[-1].payload == counts


def test_row_reset_to_pending_while_the_dispatcher_ran_is_lost(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)

    def reset(request: ResearchRequest) -> DispatchResult:
        ResearchRequest.objects.filter(pk=request.pk).update(status=Status.PENDING, dispatched_at=None)
        return DispatchResult(error="gave_up")

    assert consume(FakeDispatcher(reset), limit=1) == {**NO_COUNTS, "pulled": 1, "lost": 1}

    stored = fresh(row)
    assert (stored.status, stored.failure_reason) == (Status.PENDING, "")
    assert events("reasoning.research.backlog.failed_voluntary") == []


def test_mixed_answers_are_counted_each_in_its_own_bucket(clock: time_machine.Coordinates) -> None:
    flow_id = make_flow()
    ok, unknown, gave_up, later = (enqueue_at(clock, T0 + timedelta(minutes=n)) for n in range(4))
    answers = {
        ok.pk: DispatchResult(flow_id=flow_id),
        unknown.pk: DispatchResult(flow_id=uuid.uuid4()),
        gave_up.pk: DispatchResult(error="gave_up"),
        later.pk: DispatchResult(accepted=True),
    }
    dispatcher = FakeDispatcher(lambda request: answers[request.pk])

    counts = consume(dispatcher)

    assert counts == {"pulled": 4, "completed": 1, "failed": 2, "accepted": 1, "lost": 0}
    assert [pk for pk, *_ in dispatcher.seen] == [ok.pk, unknown.pk, gave_up.pk, later.pk]
    assert [fresh(row).status for row in (ok, unknown, gave_up, later)] == [
        Status.COMPLETED,
        Status.FAILED_VOLUNTARY,
        Status.FAILED_VOLUNTARY,
        Status.DISPATCHED,
    ]


def test_dispatcher_crash_is_audited_and_raised(clock: time_machine.Coordinates) -> None:
    row = enqueue_at(clock, T0)

    def crash(request: ResearchRequest) -> DispatchResult:
        raise RuntimeError("dispatcher blew up")

    with pytest.raises(RuntimeError):
        consume(FakeDispatcher(crash))

    (error,) = events("memory.job.backlog_consumer.error")
    assert error.payload == {**NO_COUNTS, "pulled": 1, "error_type": "RuntimeError"}
    assert events("memory.job.backlog_consumer.completed") == []
    assert fresh(row).status == Status.DISPATCHED  # the stale sweep takes it back


# --- setup_schedules --------------------------------------------------------------------------


def consumer_spec() -> dict[str, Any]:
    (spec,) = (spec for spec in jobs.SCHEDULES if spec["name"] == "research_backlog.consumer")
    return spec


def test_setup_schedules_creates_the_sweep_and_the_purge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(consumer_spec(), "enabled", False)
    call_command("setup_schedules", stdout=StringIO())
    call_command("setup_schedules", stdout=StringIO())

    sweep = Schedule.objects.get(name="research_backlog.stale_sweep")
    assert (sweep.func, sweep.schedule_type, sweep.minutes, sweep.repeats) == (
        "research_backlog.jobs.sweep_stale",
        Schedule.MINUTES,
        5,
        -1,
    )
    purge = Schedule.objects.get(name="research_backlog.ttl_purge")
    assert (purge.func, purge.schedule_type, purge.repeats) == (
        "research_backlog.jobs.purge_expired",
        Schedule.DAILY,
        -1,
    )
    assert not Schedule.objects.filter(name="research_backlog.consumer").exists()


def test_setup_schedules_points_existing_schedules_at_the_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Deployed before the bodies moved to jobs.py: the same names, the old functions.
    monkeypatch.setitem(consumer_spec(), "enabled", False)
    Schedule.objects.create(
        name="research_backlog.stale_sweep", func="research_backlog.services.sweep_stale", schedule_type="I", minutes=5
    )
    Schedule.objects.create(
        name="research_backlog.ttl_purge", func="research_backlog.services.purge_expired", schedule_type="D"
    )
    out = StringIO()

    call_command("setup_schedules", stdout=out)

    funcs = dict(Schedule.objects.filter(name__startswith="research_backlog.").values_list("name", "func"))
    assert funcs == {
        "research_backlog.stale_sweep": "research_backlog.jobs.sweep_stale",
        "research_backlog.ttl_purge": "research_backlog.jobs.purge_expired",
    }
    assert "updated schedule research_backlog.stale_sweep -> research_backlog.jobs.sweep_stale" in out.getvalue()


def test_consumer_is_not_scheduled_by_default() -> None:
    # The module-level spec was built from the setting at import; the default is off.
    assert consumer_spec()["enabled"] is False
    out = StringIO()

    call_command("setup_schedules", stdout=out)

    assert not Schedule.objects.filter(name="research_backlog.consumer").exists()
    assert "skipped schedule research_backlog.consumer (disabled)" in out.getvalue()


def test_consumer_schedule_follows_its_enabled_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = consumer_spec()
    monkeypatch.setitem(spec, "enabled", True)
    call_command("setup_schedules", stdout=StringIO())

    consumer = Schedule.objects.get(name="research_backlog.consumer")
    assert (consumer.func, consumer.schedule_type, consumer.minutes, consumer.repeats) == (
        "research_backlog.jobs.consume_if_enabled",
        Schedule.MINUTES,
        1,
        -1,
    )

    monkeypatch.setitem(spec, "enabled", False)
    out = StringIO()
    call_command("setup_schedules", stdout=out)

    assert not Schedule.objects.filter(name="research_backlog.consumer").exists()
    assert "removed schedule research_backlog.consumer (disabled)" in out.getvalue()
    assert Schedule.objects.filter(name="research_backlog.stale_sweep").count() == 1


# --- management commands ------------------------------------------------------------------------


def test_backlog_sweep_command_prints_the_counts(clock: time_machine.Coordinates) -> None:
    capped = at_retry_cap(clock, T0 - timedelta(hours=5))
    pull(clock, capped, T0)
    stuck = dispatched_at(clock, T0 + timedelta(minutes=1))
    clock.move_to(T0 + timedelta(minutes=40))
    out = StringIO()

    call_command("backlog_sweep", stdout=out)

    assert out.getvalue().strip() == "recovered=1 failed_after_retries=1"
    assert fresh(capped).status == Status.FAILED_AFTER_RETRIES
    assert fresh(stuck).status == Status.PENDING


def test_backlog_purge_command_prints_the_count(clock: time_machine.Coordinates) -> None:
    completed_at(clock, T0)
    completed_at(clock, T0, error="gave_up")
    completed_at(clock, T0 + timedelta(days=5))
    clock.move_to(T0 + timedelta(days=31))
    out = StringIO()

    call_command("backlog_purge", stdout=out)

    assert out.getvalue().strip() == "deleted=2"
    assert ResearchRequest.objects.count() == 1


@override_settings(RESEARCH_DISPATCHER_URL="")
def test_backlog_consume_without_a_dispatcher_refuses_unless_yes(clock: time_machine.Coordinates) -> None:
    rows = [enqueue_at(clock, T0 + timedelta(minutes=n)) for n in range(3)]
    clock.move_to(T0 + timedelta(minutes=5))

    with pytest.raises(CommandError, match="no_dispatcher_configured"):
        call_command("backlog_consume", stdout=StringIO())
    assert [fresh(row).status for row in rows] == [Status.PENDING] * 3
    assert events("memory.job.backlog_consumer.started") == []

    out = StringIO()
    call_command("backlog_consume", "--yes", "--limit", "2", stdout=out)

    assert out.getvalue().strip() == "pulled=2 completed=0 failed=2 accepted=0 lost=0"
    assert [fresh(row).status for row in rows] == [Status.FAILED_VOLUNTARY] * 2 + [Status.PENDING]


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_backlog_consume_refuses_a_limit_below_one(clock: time_machine.Coordinates, limit: str) -> None:
    row = enqueue_at(clock, T0)

    with pytest.raises(CommandError, match="--limit must be at least 1"):
        call_command("backlog_consume", "--yes", "--limit", limit, stdout=StringIO())

    assert fresh(row).status == Status.PENDING
    assert events("memory.job.backlog_consumer.started") == []


@override_settings(RESEARCH_DISPATCHER_URL="http://127.0.0.1:9/research-hook")
def test_backlog_consume_with_a_dispatcher_runs_without_yes(
    clock: time_machine.Coordinates, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow_id = make_flow()
    row = enqueue_at(clock, T0)
    monkeypatch.setattr(jobs, "build_dispatcher", lambda: FakeDispatcher(lambda r: DispatchResult(flow_id=flow_id)))
    out = StringIO()

    call_command("backlog_consume", stdout=out)

    assert out.getvalue().strip() == "pulled=1 completed=1 failed=0 accepted=0 lost=0"
    assert fresh(row).completed_flow_id == flow_id
