"""``manage.py mcp_server`` over stdio, driven by the ``mcp`` package's own client against the
test database (the token comes from ``RFT_MCP_TOKEN``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from django.conf import settings
from mcp import ClientSession, StdioServerParameters, stdio_client

from reasoning.models import ReasoningFlow
from tests.factories import make_pathway
from tests.mcp_server import scenario
from tests.servers import environment_for_test_database

pytestmark = pytest.mark.django_db(transaction=True)


def parameters(token: str) -> StdioServerParameters:
    env = {**environment_for_test_database(), "RFT_MCP_TOKEN": token}
    return StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp_server"], env=env, cwd=settings.BASE_DIR
    )


def over_stdio(token: str, run: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with stdio_client(parameters(token)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await run(session)

    return scenario.run_async(main)


def test_a_whole_flow_is_recorded_through_the_tools(make_token: Callable[..., str]) -> None:
    token = make_token("reasoning.write", "reasoning.admin", "reasoning.cot.read", name="mcp-agent")
    pathway = make_pathway("user_question", "mcp/bp")
    flow_id, texts = over_stdio(token, lambda session: scenario.full_flow(session, pathway))
    scenario.assert_recorded_as_http_would(flow_id, "token:mcp-agent")
    scenario.assert_no_reasoning(texts)


def test_a_read_only_token_cannot_open_a_flow(make_token: Callable[..., str]) -> None:
    over_stdio(make_token("reasoning.read"), scenario.scope_refusal)
    assert not ReasoningFlow.objects.exists()


def test_bad_arguments_are_tool_errors(make_token: Callable[..., str]) -> None:
    over_stdio(make_token("reasoning.write", "reasoning.admin"), scenario.bad_arguments)


def test_the_command_refuses_a_missing_or_unknown_token() -> None:
    env = environment_for_test_database()
    env.pop("RFT_MCP_TOKEN", None)
    for extra in ({}, {"RFT_MCP_TOKEN": "rft_not-a-token"}):
        done = subprocess.run(
            [sys.executable, "manage.py", "mcp_server"],
            cwd=settings.BASE_DIR,
            env={**env, **extra},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert "RFT_MCP_TOKEN" in done.stderr
