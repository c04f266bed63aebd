"""The dashboard's rollups (reasoning.rollups) and the job that keeps them (``reasoning.dashboard_rollups``).

The dashboard read from the rollups is compared with the same dashboard computed from the flows and
steps themselves (``operator_dashboard(..., direct_queries=True)``, the queries it ran before the
rollups): every count, cost and token equal, the duration percentiles within the sketch's stated
error (2 %, or 1 ms). Flows are written through the write path (``ingest.write``, as the demo
loader does) with their own times, so flows can open days ago, close late and carry backdated steps.
"""

from __future__ import annotations

import dataclasses
import math
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings

from reasoning import rollups
from reasoning.dashboard.queries import Dashboard, operator_dashboard
from reasoning.models import FlowRollup, FlowRollupDirty, StepRollup, StepRollupPending
from reasoning.recording import ingest
from tests.conftest import events

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 30, 14, 30, tzinfo=UTC)
OPENER = "token:agent"
BLOCKED_SUMMARY = "Wrote to jane.roe@example.com"  # the guard refuses an e-mail address


@pytest.fixture(autouse=True)
def frozen() -> Iterator[Any]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def step(
    agent: str = "researcher",
    model: str = "",
    tokens: tuple[int | None, int | None, int | None] = (None, None, None),
    *,
    at: datetime | None = None,
    summary: str = "Read the notes",
) -> dict[str, Any]:
    """A step body as the write path takes it; ``at``: when it was written (default: now)."""
    body: dict[str, Any] = {"kind": "llm_prompt" if model else "retrieval", "agent": agent, "summary_text": summary}
    if model:
        body["model"] = model
    for name, value in zip(("input_tokens", "output_tokens", "reasoning_tokens"), tokens, strict=True):
        if value is not None:
            body[name] = value
    if at is not None:
        body |= {"created_at": at, "started_at": at}
    return body


def close(state: str = "completed") -> dict[str, Any]:
    if state == "aborted":
        return {"flow_state": "aborted", "abort_reason": "tool_error"}
    return {"flow_state": "completed", "outcome_type": "recommendation_delivered"}


def opened(
    at: datetime,
    seconds: float | None = 2.0,
    *,
    state: str = "completed",
    agent: str = "researcher",
    steps: list[dict[str, Any]] | None = None,
) -> ingest.Item:
    """A flow opened ``at`` and closed ``seconds`` later (None: left open)."""
    return ingest.Item(
        flow_id=uuid.uuid4(),
        create={"trigger_type": "user_question", "agent": agent},
        steps=steps if steps is not None else [step(agent)],
        close=close(state) if seconds is not None else None,
        created_at=at,
        closed_at=at + timedelta(seconds=seconds) if seconds is not None else None,
    )


def write(*items: ingest.Item) -> list[uuid.UUID]:
    results = ingest.write(list(items), actor=OPENER)
    for result in results:
        result.raise_error()
    return [item.flow_id for item in items if item.flow_id is not None]


def within_error(approximate: float | None, exact: float | None) -> bool:
    if approximate is None or exact is None:
        return approximate is exact
    return abs(approximate - exact) <= rollups.DURATION_ERROR * exact + 0.001


def assert_same_as_direct(first: date | None = None, last: date | None = None) -> Dashboard:
    """The dashboard from the rollups equals the one computed from the flows (percentiles within the error)."""
    with CaptureQueriesContext(connection) as captured:
        rolled = operator_dashboard(NOW, first, last)
    assert any("reasoning_flow_rollup" in query["sql"] for query in captured.captured_queries)
    direct = operator_dashboard(NOW, first, last, direct_queries=True)

    assert rolled.hours == direct.hours
    untimed = [dataclasses.replace(day, p50=None, p95=None) for day in rolled.days]
    assert untimed == [dataclasses.replace(day, p50=None, p95=None) for day in direct.days]
    for ours, exact in zip(rolled.days, direct.days, strict=True):
        assert within_error(ours.p50, exact.p50), (ours.start, ours.p50, exact.p50)
        assert within_error(ours.p95, exact.p95), (ours.start, ours.p95, exact.p95)
    assert rolled.agents == direct.agents
    assert rolled.step_buckets == direct.step_buckets
    assert rolled.usage == direct.usage
    return rolled


def test_rollups_equal_the_direct_aggregates_after_a_mix_of_writes() -> None:
    old, older, _, _, _, recent = write(
        opened(NOW - timedelta(days=10), None, agent="critic"),  # closed late, below
        opened(NOW - timedelta(days=20), None, agent="triage"),  # closed late, below, with nothing else
        opened(NOW - timedelta(days=3), 4.0, steps=[step("researcher", "gpt-4o", (1000, 200, None))] * 3),
        opened(NOW - timedelta(days=3, minutes=-10), 60, state="aborted", agent="critic"),
        opened(NOW - timedelta(days=2), 0.5, steps=[step(summary=BLOCKED_SUMMARY)]),  # guard-blocked
        opened(NOW - timedelta(hours=1), None),
    )
    rollups.refresh()
    assert not rollups.status().owed
    assert_same_as_direct()

    # Steps reach the open flow (a priced model, an unpriced one); the old flow gets a step
    # written 9 days ago and closes now, an older one just closes (aborted); a new flow brings a
    # step dated 5 days back.
    write(
        ingest.Item(flow_id=older, close=close("aborted"), closed_at=NOW),
        ingest.Item(
            flow_id=recent,
            steps=[step("researcher", "gpt-4o-mini", (500, 50, 7)), step("researcher", "clinic-llm-7b", (20, 2, None))],
        ),
        ingest.Item(
            flow_id=old,
            steps=[step("critic", "gpt-4o", (10, 1, None), at=NOW - timedelta(days=9))],
            close=close(),
            closed_at=NOW,
        ),
        opened(
            NOW - timedelta(minutes=20), 1.5, steps=[step("planner", "gpt-4o", (5, 5, 5), at=NOW - timedelta(days=5))]
        ),
    )
    assert rollups.status().owed
    # Before the job: the marked hours are read from the flows, the pending usage added.
    assert_same_as_direct()

    # The old flows' hours, the open flow's (its cost), the new flow's.
    assert rollups.refresh()["hours"] == 4
    assert not rollups.status().owed
    dashboard = assert_same_as_direct()
    assert assert_same_as_direct(NOW.date() - timedelta(days=6), NOW.date()) != dashboard
    assert_same_as_direct(date(2026, 9, 1), date(2026, 11, 30))
    # What it says, for the record: the late-closed flow counts on its day, closed, with its 10-day duration.
    day = next(day for day in dashboard.days if day.start.date() == (NOW - timedelta(days=10)).date())
    assert (day.completed, day.active) == (1, 0)
    assert day.p50 is not None and within_error(day.p50, 10 * 86400)
    assert {(row.agent, row.model) for row in dashboard.usage} == {
        ("researcher", "gpt-4o"),
        ("researcher", "gpt-4o-mini"),
        ("researcher", "clinic-llm-7b"),
        ("critic", "gpt-4o"),
        ("planner", "gpt-4o"),
    }


def test_an_hour_changed_after_the_job_is_read_from_the_flows_until_the_next_run() -> None:
    hour = rollups.hour_of(NOW - timedelta(hours=2))
    write(opened(NOW - timedelta(hours=2)))
    rollups.refresh()
    assert FlowRollup.objects.get(hour=hour).completed == 1

    write(opened(NOW - timedelta(hours=2) + timedelta(minutes=5), state="aborted"))

    # The stored row is stale, the hour is marked, and the dashboard counts both flows.
    assert (FlowRollup.objects.get(hour=hour).completed, FlowRollup.objects.get(hour=hour).aborted) == (1, 0)
    assert FlowRollupDirty.objects.filter(hour=hour).exists()
    counted = next(h for h in operator_dashboard(NOW).hours if h.start == hour)
    assert (counted.completed, counted.aborted) == (1, 1)
    assert_same_as_direct()

    rollups.refresh()
    assert (FlowRollup.objects.get(hour=hour).completed, FlowRollup.objects.get(hour=hour).aborted) == (1, 1)
    assert not FlowRollupDirty.objects.exists()


def test_the_write_path_owes_only_what_changes_a_rollup() -> None:
    (flow_id,) = write(opened(NOW - timedelta(hours=3), None, steps=[]))
    assert list(FlowRollupDirty.objects.values_list("hour", flat=True)) == [rollups.hour_of(NOW - timedelta(hours=3))]
    rollups.refresh()

    # A step without usage on an open flow changes no rollup: nothing is written for it.
    write(ingest.Item(flow_id=flow_id, steps=[step()]))
    assert not FlowRollupDirty.objects.exists() and not StepRollupPending.objects.exists()

    # A call to a model without a price: its usage is owed, the flow (no cost) unchanged.
    write(ingest.Item(flow_id=flow_id, steps=[step("researcher", "clinic-llm-7b", (40, 4, None))]))
    assert not FlowRollupDirty.objects.exists()
    assert list(StepRollupPending.objects.values_list("model", "steps", "priced")) == [("clinic-llm-7b", 1, 0)]
    rollups.refresh()

    # A priced call changes the flow's cost (its hour) and owes its usage, under the step's own hour.
    write(ingest.Item(flow_id=flow_id, steps=[step("researcher", "gpt-4o", (100, 10, None))]))
    assert FlowRollupDirty.objects.count() == 1
    pending = StepRollupPending.objects.get()
    assert (pending.hour, pending.agent, pending.model, pending.steps, pending.input_tokens) == (
        rollups.hour_of(NOW),
        "researcher",
        "gpt-4o",
        1,
        100,
    )
    assert pending.priced == 1 and pending.cost > 0

    # The close marks the flow's hour again.
    write(ingest.Item(flow_id=flow_id, close=close()))
    assert FlowRollupDirty.objects.count() == 2


def test_the_job_is_idempotent_and_audits_a_run_only_when_something_was_owed(
    audit_actions: Any,
) -> None:
    write(
        opened(NOW - timedelta(days=1), 3.0, steps=[step("researcher", "gpt-4o", (100, 10, None))]),
        opened(NOW - timedelta(hours=5), None, agent="critic"),
    )
    done = rollups.refresh()

    assert (done["hours"], done["usage_rows"], done["batches"]) == (2, 1, 1)
    assert [e.payload for e in events("memory.job.dashboard_rollups.completed")] == [
        {"hours": 2, "usage_rows": 1, "batches": 1}
    ]
    stored = _rollup_rows()
    # Nothing owed: the next run does nothing and audits nothing.
    before = len(audit_actions())
    assert rollups.refresh() == {}
    assert len(audit_actions()) == before
    assert _rollup_rows() == stored
    # Built again from nothing, the rollups come out the same.
    rollups.owe_everything()
    assert StepRollup.objects.count() == 0
    rollups.refresh()
    assert _rollup_rows() == stored


def test_a_run_that_fails_half_way_leaves_the_marks_and_the_usage_owed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(opened(NOW - timedelta(hours=1), 3.0, steps=[step("researcher", "gpt-4o", (100, 10, None))]))
    marks, pending = FlowRollupDirty.objects.count(), StepRollupPending.objects.count()

    def crash(cursor: Any) -> int:
        raise RuntimeError("the worker died")

    # The failure comes after the hours were recomputed, in the same transaction.
    monkeypatch.setattr(rollups, "fold_usage", crash)
    with pytest.raises(RuntimeError):
        rollups.refresh()

    assert (FlowRollupDirty.objects.count(), StepRollupPending.objects.count()) == (marks, pending)
    assert not FlowRollup.objects.exists() and not StepRollup.objects.exists()
    assert [e.payload["error_type"] for e in events("memory.job.dashboard_rollups.error")] == ["RuntimeError"]
    assert_same_as_direct()  # still exact, read from the flows

    monkeypatch.undo()
    rollups.refresh()
    assert not rollups.status().owed
    assert FlowRollup.objects.count() == 1 and StepRollup.objects.count() == 1
    assert_same_as_direct()


def test_percentiles_from_the_histograms_are_within_two_percent() -> None:
    rng = random.Random(42)
    # 400 flows over two days, durations spread evenly on a log scale from 1 ms to 2 hours.
    items = [
        opened(NOW - timedelta(days=1 + i % 2, minutes=i), math.exp(rng.uniform(math.log(0.001), math.log(7200))))
        for i in range(400)
    ]
    write(*items)
    rollups.refresh()

    dashboard = assert_same_as_direct()

    assert sum(day.closed for day in dashboard.days) == 400
    assert all(day.p50 is not None for day in dashboard.days if day.closed)


def test_the_operators_days_from_the_rollups_across_a_daylight_saving_change(settings: Settings) -> None:
    settings.TIME_ZONE = "America/New_York"
    # New York left daylight saving time at 06:00 UTC on 1 Nov 2026: 01:00-02:00 came twice.
    write(
        opened(datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),  # 01:30 EDT
        opened(datetime(2026, 11, 1, 6, 30, tzinfo=UTC)),  # 01:30 EST
        opened(datetime(2026, 11, 30, 3, 30, tzinfo=UTC)),  # 22:30 on the 29th
    )
    rollups.refresh()

    dashboard = assert_same_as_direct(date(2026, 10, 31), date(2026, 11, 2))
    assert [day.total for day in dashboard.days] == [0, 2, 0]
    assert assert_same_as_direct().days[-2].total == 1


def test_a_zone_off_whole_hours_is_read_from_the_flows(settings: Settings) -> None:
    settings.TIME_ZONE = "Asia/Kolkata"  # UTC+05:30: its days are not sets of UTC hours
    write(opened(datetime(2026, 11, 29, 18, 40, tzinfo=UTC)))  # 00:10 on the 30th in Kolkata
    rollups.refresh()

    with CaptureQueriesContext(connection) as captured:
        dashboard = operator_dashboard(NOW)

    assert not any("rollup" in query["sql"] for query in captured.captured_queries)
    assert dashboard == operator_dashboard(NOW, direct_queries=True)
    assert dashboard.days[-1].total == 1


def _rollup_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    flows = list(FlowRollup.objects.order_by("hour").values_list())
    usage = list(
        StepRollup.objects.order_by("hour", "agent", "model").values_list(
            "hour", "agent", "model", "steps", "input_tokens", "output_tokens", "reasoning_tokens", "cost", "priced"
        )
    )
    return flows, usage


def test_the_job_is_scheduled_every_minute() -> None:
    from reasoning.management.commands.setup_schedules import collect_schedules

    (spec,) = [spec for spec in collect_schedules() if spec["name"] == "reasoning.dashboard_rollups"]
    assert (spec["func"], spec["schedule_type"], spec["minutes"]) == ("reasoning.rollups.refresh", "I", 1)
    module, _, name = spec["func"].rpartition(".")
    assert callable(getattr(__import__(module, fromlist=[name]), name))


def test_the_command_runs_the_job_or_starts_again_from_the_flows() -> None:
    write(opened(NOW - timedelta(days=2), steps=[step("researcher", "gpt-4o", (100, 10, None))]))

    out = StringIO()
    call_command("refresh_rollups", "--status", stdout=out)
    assert out.getvalue() == "owed: 1 dirty hour(s), 1 pending usage row(s)\n"
    out = StringIO()
    call_command("refresh_rollups", stdout=out)
    assert out.getvalue().splitlines() == [
        "rollups: 1 hour(s) recomputed, 1 usage row(s) added",
        "owed: 0 dirty hour(s), 0 pending usage row(s)",
    ]
    stored = _rollup_rows()
    out = StringIO()
    call_command("refresh_rollups", "--rebuild", stdout=out)
    assert out.getvalue().splitlines()[0] == "owed again: 1 hour(s), 1 usage row(s)"
    assert _rollup_rows() == stored
