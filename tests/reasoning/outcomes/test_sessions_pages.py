"""The sessions pages (issue 41, part 4): every session, and one session's decisions in time order.

What an operator checks: the sessions with their numbers, newest first, filtered by agent and
paged; a session's summary, its drift and its decisions each linking to its flow and turn; the
read of a session's decisions audited like the replay route; an unknown session is the 404 page.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from reasoning.outcomes import pages
from reasoning.outcomes.services import record_outcome
from tests.conftest import events
from tests.factories import NOW, make_flow
from tests.html import Element, doc

LIST = "/dashboard/admin/reasoning/sessions"
REPLAY_READ = "admin.reasoning.session.replay_read"


def plant(session: str, *, agent: str = "triage", minutes: int = 0, correct: bool | None = None) -> str:
    with time_machine.travel(NOW + timedelta(minutes=minutes), tick=False):
        flow_id = make_flow(steps=["Retrieved the labs"], session_id=session, agent=agent, trace_id=f"turn-{session}")
    if correct is not None:
        record_outcome(flow_id, "escalated", correct, actor="system:test")
    return str(flow_id)


def rows(html: Element) -> dict[str, Element]:
    return {
        row.attrs["data-session"]: row
        for row in html.one("table", "session-list").select("tr")
        if "data-session" in row.attrs
    }


def cell(row: Element, name: str) -> str:
    return row.one("td", data_cell=name).text


def test_the_list_shows_each_session_newest_first_with_its_numbers(operator_client: Client) -> None:
    plant("s-1", minutes=0, correct=True)
    plant("s-1", minutes=5, agent="critic", correct=False)
    plant("s-2", minutes=30)

    listed = rows(doc(operator_client.get(LIST)))

    assert list(listed) == ["s-2", "s-1"]
    first = listed["s-1"]
    assert (cell(first, "agents"), cell(first, "decisions"), cell(first, "accuracy")) == ("critic, triage", "2", "50 %")
    assert cell(first, "duration") == "5 min 0 s"
    assert first.one("a").attrs["href"] == f"{LIST}/s-1"
    assert cell(listed["s-2"], "accuracy") == "—"
    assert events(REPLAY_READ) == []  # the list reads counts only: not audited


def test_the_list_keeps_one_agents_sessions_and_pages_on(
    operator_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "SESSIONS_PER_PAGE", 2)
    for number in range(3):
        plant(f"t-{number}", minutes=number)
    plant("other", agent="critic", minutes=10)

    first = doc(operator_client.get(LIST, {"agent": "triage"}))
    assert list(rows(first)) == ["t-2", "t-1"]
    older = first.one("a", rel="next").attrs["href"]
    assert list(rows(doc(operator_client.get(LIST + older)))) == ["t-0"]


def test_a_bad_agent_filter_says_which_field_and_shows_every_session(operator_client: Client) -> None:
    plant("s-1")

    html = doc(operator_client.get(LIST, {"agent": "no spaces allowed"}))

    assert html.one("p", "error").text.startswith("agent:")
    assert list(rows(html)) == ["s-1"]


def test_a_session_shows_its_decisions_in_time_order_with_links_and_audits_the_read(
    operator_client: Client, operator_user: object
) -> None:
    later = plant("s-1", minutes=5, agent="critic", correct=False)
    earlier = plant("s-1", minutes=0, correct=True)

    html = doc(operator_client.get(f"{LIST}/s-1"))

    decisions = [
        row.attrs["data-flow"]
        for row in html.one("table", "session-decisions").select("tr")
        if "data-flow" in row.attrs
    ]
    assert decisions == [earlier, later]
    assert html.one("dd", data_total="decisions").text == "2"
    assert html.one("dd", data_total="accuracy").text == "50 %"
    assert html.one("dd", data_total="judged").text == "2 of 2"
    links = [a.attrs["href"] for a in html.one("tr", data_flow=earlier).select("a")]
    assert links == [f"/dashboard/admin/reasoning/{earlier}", "/dashboard/admin/reasoning/turns/turn-s-1"]
    (event,) = events(REPLAY_READ)
    assert event.actor == f"user:{operator_user.pk}"  # type: ignore[attr-defined]
    assert event.payload == {"flow_count": 2, "next_page": False}


@pytest.mark.parametrize("session", ["nobody", "x" * 101])
def test_an_unknown_session_is_the_not_found_page(operator_client: Client, session: str) -> None:
    response = operator_client.get(f"{LIST}/{session}")

    assert response.status_code == 404
    assert "Session not found" in response.content.decode()


def call(model: str, inputs: int, outputs: int) -> dict[str, object]:
    return {
        "kind": "llm_prompt",
        "agent": "triage",
        "summary_text": "Asked the model",
        "model": model,
        "input_tokens": inputs,
        "output_tokens": outputs,
    }


def test_sessions_and_a_session_show_their_tokens_and_cost(operator_client: Client) -> None:
    # gpt-4o: $2.5 in, $10 out per million tokens; clinic-llm-7b has no known price.
    with time_machine.travel(NOW, tick=False):
        make_flow(steps=[call("gpt-4o", 100_000, 10_000)], session_id="paid", agent="triage")  # $0.35
    with time_machine.travel(NOW + timedelta(minutes=1), tick=False):
        make_flow(steps=[call("gpt-4o", 20_000, 1_000)], session_id="paid", agent="triage")  # $0.06
        make_flow(steps=[call("clinic-llm-7b", 500, 50)], session_id="private", agent="triage")
        make_flow(steps=["Retrieved the labs"], session_id="plain", agent="triage")

    listed = rows(doc(operator_client.get(LIST)))
    assert (cell(listed["paid"], "tokens"), cell(listed["paid"], "cost")) == ("131,000", "$0.41")
    assert (cell(listed["private"], "tokens"), cell(listed["private"], "cost")) == ("550", "—")
    assert (cell(listed["plain"], "tokens"), cell(listed["plain"], "cost")) == ("—", "—")

    page = doc(operator_client.get(f"{LIST}/paid"))
    assert page.one("dd", data_total="tokens").text == "120,000 in / 11,000 out"
    assert page.one("dd", data_total="cost").text == "$0.41"
    costs = [
        row.one("td", data_cell="cost").text
        for row in page.one("table", "session-decisions").select("tr")
        if "data-flow" in row.attrs
    ]
    assert costs == ["$0.35", "$0.06"]


def test_a_window_keeps_the_sessions_with_a_decision_in_it(operator_client: Client) -> None:
    plant("morning", minutes=0)
    plant("noon", minutes=180)
    plant("noon", minutes=200)
    plant("evening", minutes=480)

    # NOW is 12:00 UTC; the page reads From and To in the operator's time zone (UTC here).
    window = {"from": "2026-03-02T14:00", "to": "2026-03-02T16:00"}
    html = doc(operator_client.get(LIST, window))
    assert list(rows(html)) == ["noon"]
    assert html.one("input", name="from").attrs["value"] == "2026-03-02T14:00"
    bad = doc(operator_client.get(LIST, {"to": "soon"}))
    assert "to:" in bad.one("p", "error").text
    with time_machine.travel(NOW + timedelta(minutes=481), tick=False):
        assert list(rows(doc(operator_client.get(LIST, {"period": "1h"})))) == ["evening"]
