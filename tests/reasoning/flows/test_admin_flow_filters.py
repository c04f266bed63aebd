"""GET /admin/v1/reasoning/flows: filters, the created_at window, cursor pages."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest
import time_machine
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow
from tests.factories import open_flow

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/v1/reasoning/flows"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def open_flow_at(client: APIClient, at: datetime, **fields: Any) -> str:
    with time_machine.travel(at, tick=False):
        flow_id: str = open_flow(client, **fields)["id"]
    return flow_id


def ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()]


@pytest.fixture
def flows(agent: APIClient) -> dict[str, str]:
    """Four flows an hour apart, of two agents, two sessions and two trigger types."""
    return {
        "researcher-1": open_flow_at(agent, T0, agent="researcher", session_id="s-1"),
        "critic-1": open_flow_at(agent, T0 + timedelta(hours=1), agent="critic", session_id="s-1"),
        "researcher-2": open_flow_at(
            agent, T0 + timedelta(hours=2), agent="researcher", session_id="s-2", trigger_type="lab_result"
        ),
        "critic-2": open_flow_at(agent, T0 + timedelta(hours=3), agent="critic", session_id="s-2"),
    }


def test_agent_filter_returns_only_that_agents_flows_newest_first(operator: APIClient, flows: dict[str, str]) -> None:
    assert ids(operator.get(LIST_URL, {"agent": "critic"})) == [flows["critic-2"], flows["critic-1"]]


def test_session_filter(operator: APIClient, flows: dict[str, str]) -> None:
    assert ids(operator.get(LIST_URL, {"session_id": "s-1"})) == [flows["critic-1"], flows["researcher-1"]]


def test_trigger_type_filter(operator: APIClient, flows: dict[str, str]) -> None:
    assert ids(operator.get(LIST_URL, {"trigger_type": "lab_result"})) == [flows["researcher-2"]]


def test_filters_combine(operator: APIClient, flows: dict[str, str]) -> None:
    assert ids(operator.get(LIST_URL, {"agent": "researcher", "session_id": "s-2"})) == [flows["researcher-2"]]


def test_created_window_includes_its_start_and_excludes_its_end(operator: APIClient, flows: dict[str, str]) -> None:
    window = {
        "created_after": (T0 + timedelta(hours=1)).isoformat(),
        "created_before": (T0 + timedelta(hours=3)).isoformat(),
    }

    assert ids(operator.get(LIST_URL, window)) == [flows["researcher-2"], flows["critic-1"]]


def test_created_after_accepts_z_and_an_encoded_offset(operator: APIClient, flows: dict[str, str]) -> None:
    as_z = ids(operator.get(LIST_URL, {"created_after": "2026-03-01T11:00:00Z"}))
    as_offset = ids(operator.get(f"{LIST_URL}?created_after={quote('2026-03-01T12:00:00+01:00')}"))

    assert as_z == as_offset == [flows["critic-2"], flows["researcher-2"]]


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        pytest.param("created_after=yesterday", "created_after", "ISO 8601", id="created_after-word"),
        pytest.param("created_after=2026-13-01T00:00:00Z", "created_after", "ISO 8601", id="created_after-month-13"),
        pytest.param("created_before=2026-03-01T09:00:00", "created_before", "time zone", id="created_before-naive"),
        # An unencoded "+" arrives as a space.
        pytest.param("created_before=2026-03-01T09:00:00+01:00", "created_before", "", id="created_before-plus"),
        pytest.param("cursor=not-a-cursor", "cursor", "not a cursor this route issued", id="cursor-garbage"),
        pytest.param("cursor=WyJ4IiwieSJd", "cursor", "not a cursor this route issued", id="cursor-wrong-content"),
        pytest.param("agent=%00", "agent", "without NUL", id="agent-NUL"),
        pytest.param("session_id=" + "s" * 101, "session_id", "at most 100", id="session_id-101"),
        pytest.param("trigger_type=a%20question", "trigger_type", "[A-Za-z0-9_.:/-]", id="trigger_type-not-a-label"),
        pytest.param("colour=red", "colour", "Unknown query parameter.", id="unknown"),
    ],
)
def test_bad_filter_value_is_400_naming_it(operator: APIClient, query: str, field: str, says: str) -> None:
    response = operator.get(f"{LIST_URL}?{query}")

    assert response.status_code == 400, response.content
    assert says in str(response.json()[field])


# --- Cursor pages ------------------------------------------------------------------------------


def read_all_pages(operator: APIClient, query: dict[str, str | int]) -> list[list[str]]:
    pages: list[list[str]] = []
    response = operator.get(LIST_URL, query)
    while True:
        pages.append(ids(response))
        cursor = response.headers.get("X-Next-Cursor")
        if cursor is None:
            assert "Link" not in response.headers
            return pages
        assert response.headers["Link"].endswith('rel="next"')
        assert f"cursor={cursor}" in response.headers["Link"]
        response = operator.get(LIST_URL, {**query, "cursor": cursor})
        assert len(pages) < 10, "the cursor does not advance"


def test_cursor_pages_walk_every_flow_once_newest_first(operator: APIClient, flows: dict[str, str]) -> None:
    pages = read_all_pages(operator, {"limit": 3})

    assert pages == [[flows["critic-2"], flows["researcher-2"], flows["critic-1"]], [flows["researcher-1"]]]


def test_cursor_pages_keep_the_filters(operator: APIClient, flows: dict[str, str]) -> None:
    pages = read_all_pages(operator, {"limit": 1, "agent": "critic"})

    assert pages == [[flows["critic-2"]], [flows["critic-1"]]]


def test_a_page_that_ends_exactly_at_the_last_flow_has_no_next_cursor(
    operator: APIClient, flows: dict[str, str]
) -> None:
    response = operator.get(LIST_URL, {"limit": 4})

    assert len(ids(response)) == 4
    assert "X-Next-Cursor" not in response.headers


def test_flows_created_in_the_same_instant_are_paged_by_id_without_gaps(agent: APIClient, operator: APIClient) -> None:
    same = {open_flow_at(agent, T0) for _ in range(5)}

    pages = read_all_pages(operator, {"limit": 2})

    walked = [flow_id for page in pages for flow_id in page]
    assert [len(page) for page in pages] == [2, 2, 1]
    assert set(walked) == same
    assert walked == sorted(same, reverse=True)


def test_a_flow_written_between_two_pages_does_not_shift_the_next_page(
    agent: APIClient, operator: APIClient, flows: dict[str, str]
) -> None:
    first = operator.get(LIST_URL, {"limit": 2})
    open_flow_at(agent, T0 + timedelta(hours=4))

    second = operator.get(LIST_URL, {"limit": "2", "cursor": str(first.headers["X-Next-Cursor"])})

    assert ids(second) == [flows["critic-1"], flows["researcher-1"]]


def test_existing_clients_still_get_a_plain_list_of_flows(operator: APIClient, flows: dict[str, str]) -> None:
    body = operator.get(LIST_URL).json()

    assert isinstance(body, list)
    assert {"id", "trigger_type", "agent", "session_id", "flow_state", "created_at"} <= set(body[0])


def test_list_with_filters_and_cursor_costs_one_query(
    operator: APIClient, flows: dict[str, str], django_assert_num_queries: Callable[..., Any]
) -> None:
    cursor = operator.get(LIST_URL, {"limit": 1}).headers["X-Next-Cursor"]
    query: dict[str, str | int] = {
        "agent": "critic",
        "session_id": "s-2",
        "created_after": T0.isoformat(),
        "limit": 1,
        "cursor": cursor,
    }

    # Expect 1 query: one page of flows (limit + 1 rows); the token is cached since the first request.
    with django_assert_num_queries(1):
        response = operator.get(LIST_URL, query)

    assert response.status_code == 200
    assert ReasoningFlow.objects.filter(agent="critic").count() == 2
