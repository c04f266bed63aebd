"""What the MCP tests do through a connected ``mcp.ClientSession``, whichever the transport
(stdio: ``test_stdio.py``; streamable HTTP under /mcp: ``test_http.py``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import pytest
from mcp import ClientSession, MCPError, types

from audit.models import AuditEvent
from pathways.models import Pathway
from reasoning.models import ReasoningFlow

T = TypeVar("T")

# Planted as a step's raw chain-of-thought: no tool result or resource may ever show it.
COT_MARKER = "COT-MARKER-7f3c1d"
TOOLS = {
    "open_flow",
    "add_step",
    "close_flow",
    "record_outcome",
    "match_pathways",
    "record_pathway_hit",
    "enqueue_research",
    "get_flow",
    "backlog_status",
}


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(main)`` on a thread of its own: the test's thread may already run an event loop
    (Playwright's sync API keeps one running for the whole session once a browser test ran in
    this worker), and an event loop cannot be started inside another."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, main).result()


def text_of(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


async def call(session: ClientSession, name: str, texts: list[str], **arguments: Any) -> Any:
    """The tool's JSON; the call must succeed."""
    result = await session.call_tool(name, arguments)
    texts.append(text_of(result))
    assert not result.is_error, texts[-1]
    return json.loads(texts[-1])


async def full_flow(session: ClientSession, pathway: Pathway) -> tuple[str, list[str]]:
    """Record a whole flow through the tools, reuse a pathway, read both resources. Returns the
    flow's id and every text the server answered."""
    texts: list[str] = []
    listed = await session.list_tools()
    assert {tool.name for tool in listed.tools} == TOOLS
    open_schema = next(tool for tool in listed.tools if tool.name == "open_flow").input_schema
    assert "trigger_type" in open_schema["required"]

    flow = await call(
        session,
        "open_flow",
        texts,
        trigger_type="user_question",
        trigger_ref="mcp/bp-followup",
        trigger_summary="Patient asked whether a follow-up visit is needed",
        agent="researcher",
    )
    first = await call(
        session,
        "add_step",
        texts,
        flow_id=flow["id"],
        kind="retrieval",
        agent="researcher",
        summary_text="Retrieved the current guideline",
        confidence=0.95,
        reasoning_content=f"thinking… {COT_MARKER}",
    )
    await call(
        session,
        "add_step",
        texts,
        flow_id=flow["id"],
        kind="decision",
        agent="researcher",
        summary_text="Recommended a follow-up visit",
        confidence=0.93,
        parent_step_id=first["id"],
    )
    closed = await call(
        session,
        "close_flow",
        texts,
        flow_id=flow["id"],
        flow_state="completed",
        outcome_type="recommendation_delivered",
        outcome_summary="Recommended a follow-up visit with the care team",
    )
    assert closed["flow_state"] == "completed"
    recorded = await call(
        session, "record_outcome", texts, flow_id=flow["id"], outcome="follow_up_booked", correct=True
    )
    assert recorded["outcome_correct"] is True

    read = await call(session, "get_flow", texts, flow_id=flow["id"])
    assert [step["kind"] for step in read["steps"]] == ["retrieval", "decision"]
    assert read["steps"][1]["parent_step_id"] == first["id"]

    matched = await call(session, "match_pathways", texts, trigger_type="user_question", trigger_ref="mcp/bp")
    assert str(pathway.pk) in {candidate["id"] for candidate in matched["candidates"]}
    hit = await call(session, "record_pathway_hit", texts, pathway_id=str(pathway.pk))
    assert hit["hit_count"] == pathway.hit_count + 1
    queued = await call(
        session,
        "enqueue_research",
        texts,
        trigger_type="user_question",
        trigger_ref="mcp/bp-followup",
        question="Which guideline covers follow-up intervals?",
    )
    assert queued["status"] == "pending"
    backlog = await call(session, "backlog_status", texts)
    assert backlog["status_distribution"]["pending"] >= 1

    for uri in (f"pathway://{pathway.pk}", f"flow://{flow['id']}"):
        contents = await session.read_resource(uri)
        (content,) = contents.contents
        assert isinstance(content, types.TextResourceContents)
        texts.append(content.text)
    assert json.loads(texts[-2])["signature"]["step_kinds"] == list(pathway.step_kinds)
    projection = json.loads(texts[-1])
    assert projection["flow_id"] == flow["id"] and projection["step_count"] == 2
    return flow["id"], texts


def assert_recorded_as_http_would(flow_id: str, actor: str) -> None:
    """The tools wrote what the routes write, with the same audit events, named for the token."""
    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert flow.flow_state == ReasoningFlow.State.COMPLETED and flow.outcome_correct is True
    assert flow.steps.count() == 2
    actions = set(AuditEvent.objects.filter(actor=actor).values_list("action", flat=True))
    assert {
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.flow.completed",
        "reasoning.flow.outcome_recorded",
        "admin.reasoning.flow.read",
        "reasoning.pathway.matched",
        "reasoning.research.deeper_request_created",
    } <= actions
    # The raw reasoning was stored (writers keep it), only never shown.
    assert flow.steps.filter(reasoning_content_chars__gt=0).count() == 1


def assert_no_reasoning(texts: list[str]) -> None:
    assert texts
    for text in texts:
        assert COT_MARKER not in text
        assert '"reasoning_content"' not in text


async def scope_refusal(session: ClientSession) -> None:
    """A read-only token cannot open a flow: a tool error with the route's 403 message."""
    result = await session.call_tool("open_flow", {"trigger_type": "user_question"})
    assert result.is_error
    assert json.loads(text_of(result)) == {"detail": "This route needs the 'reasoning.write' scope."}
    with pytest.raises(MCPError, match=r"needs the 'reasoning\.admin' scope"):
        await session.read_resource(f"flow://{uuid.uuid4()}")


async def bad_arguments(session: ClientSession) -> None:
    """Bad arguments are tool errors naming the fields, and the server keeps serving."""
    result = await session.call_tool("open_flow", {"trigger_type": "has spaces!", "confidence": 2})
    assert result.is_error
    assert json.loads(text_of(result)) == {"confidence": ["Unknown field."]}  # the route's strict body

    result = await session.call_tool("open_flow", {"trigger_type": "has spaces!"})
    assert result.is_error
    errors = json.loads(text_of(result))
    assert list(errors) == ["trigger_type"] and isinstance(errors["trigger_type"], list)

    result = await session.call_tool("add_step", {"flow_id": "not-a-uuid", "kind": "retrieval"})
    assert result.is_error and json.loads(text_of(result)) == {"flow_id": ["must be a valid UUID"]}

    result = await session.call_tool("get_flow", {"flow_id": str(uuid.uuid4()), "include_reasoning": True})
    assert result.is_error and json.loads(text_of(result)) == {"include_reasoning": ["Unknown argument."]}

    unknown = {"flow_id": str(uuid.uuid4()), "flow_state": "aborted", "abort_reason": "tool_error"}
    result = await session.call_tool("close_flow", unknown)
    assert result.is_error and "does not exist" in json.loads(text_of(result))["detail"]  # the route's 404

    with pytest.raises(MCPError):
        await session.read_resource(f"flow://{uuid.uuid4()}")
    assert "backlog_status" in {tool.name for tool in (await session.list_tools()).tools}
