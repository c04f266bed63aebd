"""Streamable HTTP at /mcp of the real web server (``tests.servers.Gunicorn``), driven by the
``mcp`` package's own client with the same bearer tokens as the API."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from reasoning.models import ReasoningFlow, ReasoningStep
from tests.factories import make_pathway
from tests.mcp_server import scenario
from tests.servers import Gunicorn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def served(django_db_setup: None, django_db_blocker: Any) -> Iterator[Gunicorn]:
    with django_db_blocker.unblock(), Gunicorn(workers=2) as gunicorn:
        yield gunicorn


def over_http(served: Gunicorn, token: str, run: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(f"{served.url}/mcp", http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            return await run(session)

    return scenario.run_async(main)


def test_a_whole_flow_is_recorded_through_the_tools(served: Gunicorn, make_token: Callable[..., str]) -> None:
    token = make_token("reasoning.write", "reasoning.admin", "reasoning.cot.read", name="mcp-remote")
    pathway = make_pathway("user_question", "mcp/bp")
    flow_id, texts = over_http(served, token, lambda session: scenario.full_flow(session, pathway))
    scenario.assert_recorded_as_http_would(flow_id, "token:mcp-remote")
    scenario.assert_no_reasoning(texts)


def test_a_read_only_token_cannot_open_a_flow(served: Gunicorn, make_token: Callable[..., str]) -> None:
    over_http(served, make_token("reasoning.read"), scenario.scope_refusal)
    assert not ReasoningFlow.objects.exists()


def test_bad_arguments_are_tool_errors(served: Gunicorn, make_token: Callable[..., str]) -> None:
    over_http(served, make_token("reasoning.write", "reasoning.admin"), scenario.bad_arguments)


@pytest.mark.parametrize("authorization", [None, "Bearer rft_not-a-token", "Basic abc"])
def test_mcp_without_a_valid_token_is_401(served: Gunicorn, authorization: str | None) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if authorization:
        headers["Authorization"] = authorization
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
    answer = served.server.request("POST", "/mcp", body, headers)
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == 'Bearer realm="api"'
    assert "detail" in answer.json()


def test_the_api_is_still_served_beside_mcp(served: Gunicorn, make_token: Callable[..., str]) -> None:
    headers = {"Authorization": f"Bearer {make_token('reasoning.write')}", "Content-Type": "application/json"}
    answer = served.server.request("POST", "/api/reasoning/flows", b'{"trigger_type": "user_question"}', headers)
    assert answer.status == 201


def test_a_writer_cannot_add_steps_to_another_writers_flow(served: Gunicorn, make_token: Callable[..., str]) -> None:
    async def open_one(session: ClientSession) -> Any:
        return await scenario.call(session, "open_flow", [], trigger_type="user_question")

    async def intrude(session: ClientSession) -> Any:
        step = {"flow_id": flow["id"], "kind": "retrieval", "agent": "intruder", "summary_text": "Tried to add"}
        result = await session.call_tool("add_step", step)
        assert result.is_error
        return json.loads(scenario.text_of(result))

    flow = over_http(served, make_token("reasoning.write"), open_one)
    # As the route answers: another caller's flow is one that does not exist.
    assert "does not exist" in over_http(served, make_token("reasoning.write"), intrude)["detail"]
    assert not ReasoningStep.objects.filter(flow_id=flow["id"]).exists()


def test_a_plain_json_rpc_initialize_is_answered_with_json(served: Gunicorn, make_token: Callable[..., str]) -> None:
    # The docs/mcp.md curl example: stateless, one JSON answer per POST.
    headers = {
        "Authorization": f"Bearer {make_token('reasoning.read')}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()
    answer = served.server.request("POST", "/mcp", body, headers)
    assert answer.status == 200, answer.body
    assert answer.json()["result"]["serverInfo"]["name"] == "reasoning-flow-tracker"


SECURITY_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


@pytest.mark.parametrize("token", [True, False], ids=["answered", "refused"])
def test_mcp_answers_carry_the_security_headers(served: Gunicorn, make_token: Callable[..., str], token: bool) -> None:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {make_token('reasoning.read')}"
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()
    answer = served.server.request("POST", "/mcp", body, headers)

    assert answer.status == (200 if token else 401)
    assert {name: answer.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert "camera=()" in answer.headers["permissions-policy"]


def test_get_mcp_is_a_405_at_once_not_an_endless_stream(served: Gunicorn, make_token: Callable[..., str]) -> None:
    headers = {"Authorization": f"Bearer {make_token('reasoning.read')}", "Accept": "text/event-stream"}
    answer = served.server.request("GET", "/mcp", b"", headers)
    assert (answer.status, answer.headers["allow"]) == (405, "POST")
    assert answer.headers["x-content-type-options"] == "nosniff"
