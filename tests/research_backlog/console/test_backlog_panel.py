"""The Research Console: the backlog panel and its loop-health pill."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from tests.conftest import events
from tests.factories import NOW, QUESTION, make_request
from tests.html import doc
from tests.research_backlog.support import BACKLOG, BACKLOG_READ_PROXY, HTMX, chips, facts, place_failures

pytestmark = pytest.mark.django_db


def test_backlog_panel_shows_counts_ages_and_recent_failures(
    clock: time_machine.Coordinates, operator_client: Client, actor: str
) -> None:
    make_request(created_at=NOW - timedelta(minutes=50))
    make_request(created_at=NOW - timedelta(minutes=5), retry_count=1)
    make_request(status="dispatched", created_at=NOW - timedelta(hours=1), dispatched_at=NOW - timedelta(minutes=12))
    make_request(status="completed", completed_at=NOW - timedelta(hours=1))
    make_request(
        trigger_type="lab_result",
        status="failed_voluntary",
        completed_at=NOW - timedelta(hours=2),
        failure_reason="vendor_timeout",
    )
    make_request(
        trigger_type="claim_review",
        status="failed_after_retries",
        completed_at=NOW - timedelta(minutes=30),
        failure_reason="stale_after_retries",
        retry_count=3,
    )
    make_request(status="failed_voluntary", completed_at=NOW - timedelta(hours=30), failure_reason="too_old_to_show")

    response = operator_client.get(BACKLOG, headers=HTMX)

    assert response.status_code == 200
    panel = doc(response).by_id("backlog")
    assert chips(panel) == {
        "pending": "2",
        "dispatched": "1",
        "completed": "1",
        "failed_voluntary": "2",
        "failed_after_retries": "1",
    }
    assert facts(panel) == {
        "Oldest pending": "50 min",
        "Oldest dispatched": "12 min",
        "Retries": "0: 5 · 1: 1 · 3: 1",
    }
    assert "Recent failures (2 in 24 h)" in panel.text
    rows = [[td.text for td in tr.select("td")] for tr in panel.one("tbody").select("tr")]
    # Times are local with the zone named, then how long ago; statuses read as words, while
    # the identifiers an operator may search for (trigger type, failure reason) stay raw.
    assert rows == [
        ["2 Mar 2026, 11:30 UTC (30 min ago)", "claim_review", "Failed after retries", "stale_after_retries"],
        ["2 Mar 2026, 10:00 UTC (2 h ago)", "lab_result", "Failed voluntary", "vendor_timeout"],
    ]
    assert [td.attrs["title"] for td in panel.one("tbody").select("td") if "title" in td.attrs] == [
        "failed_after_retries",
        "failed_voluntary",
    ]
    assert "too_old_to_show" not in panel.text
    assert QUESTION not in response.content.decode()
    pill = panel.one("span", "pill")
    assert "pill-healthy" in pill.classes() and pill.text == "Healthy"
    (event,) = events(BACKLOG_READ_PROXY)
    assert (event.actor, event.payload) == (actor, {"total": 7, "loop_health": "healthy"})


def test_empty_backlog_panel(operator_client: Client) -> None:
    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    assert set(chips(panel).values()) == {"0"}
    assert list(chips(panel)) == ["pending", "dispatched", "completed", "failed_voluntary", "failed_after_retries"]
    assert facts(panel) == {"Oldest pending": "none waiting", "Oldest dispatched": "none waiting", "Retries": "none"}
    assert "Recent failures (0 in 24 h)" in panel.text
    assert not panel.select("table")


@pytest.mark.parametrize(
    ("age", "shown"),
    [
        (timedelta(seconds=45), "45 s"),
        (timedelta(minutes=20, seconds=59), "20 min"),
        (timedelta(hours=1, minutes=5), "1 h 5 min"),
        (timedelta(days=2, hours=3, minutes=59), "2 d 3 h"),
    ],
)
def test_oldest_pending_age_reads_naturally(
    clock: time_machine.Coordinates, operator_client: Client, age: timedelta, shown: str
) -> None:
    make_request(created_at=NOW - age)

    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    assert facts(panel)["Oldest pending"] == shown


@pytest.mark.parametrize(
    ("pending_age", "dispatched_age", "failures", "verdict", "because"),
    [
        (timedelta(minutes=59), timedelta(minutes=14), 4, "healthy", ""),
        (None, timedelta(minutes=15), 0, "warn", "oldest_dispatched_over_15m"),
        (None, None, 5, "warn", "recent_failures_at_least_5"),
        (None, timedelta(minutes=25), 0, "critical", "oldest_dispatched_over_25m"),
        (timedelta(hours=1), None, 0, "critical", "oldest_pending_over_1h"),
        (timedelta(hours=2), timedelta(minutes=16), 5, "critical", "oldest_pending_over_1h"),
    ],
)
def test_loop_health_pill_follows_the_thresholds(
    clock: time_machine.Coordinates,
    operator_client: Client,
    pending_age: timedelta | None,
    dispatched_age: timedelta | None,
    failures: int,
    verdict: str,
    because: str,
) -> None:
    if pending_age is not None:
        make_request(created_at=NOW - pending_age)
    if dispatched_age is not None:
        make_request(status="dispatched", created_at=NOW - timedelta(hours=3), dispatched_at=NOW - dispatched_age)
    place_failures(failures)

    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    pill = panel.one("span", "pill")
    assert [c for c in pill.classes() if c.startswith("pill-")] == [f"pill-{verdict}"]
    assert pill.text == verdict.capitalize()
    because_line = [p for p in panel.select("p", "muted") if p.text.startswith("Because:")]
    if because:
        assert len(because_line) == 1
        # Read as words; the raw reason stays in the title.
        assert because.replace("_", " ").capitalize() in because_line[0].text
        assert because in [span.attrs["title"] for span in because_line[0].select("span")]
    else:
        assert because_line == []
    assert events(BACKLOG_READ_PROXY)[0].payload["loop_health"] == verdict


def test_critical_lists_every_reason(clock: time_machine.Coordinates, operator_client: Client) -> None:
    make_request(created_at=NOW - timedelta(hours=2))
    make_request(status="dispatched", created_at=NOW - timedelta(hours=3), dispatched_at=NOW - timedelta(minutes=16))
    place_failures(5)

    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    assert [p.text for p in panel.select("p", "muted") if p.text.startswith("Because:")] == [
        "Because: Oldest pending over 1h; Oldest dispatched over 15m; Recent failures at least 5."
    ]
