"""The demo's MCP agent: one flow recorded through the tools, idempotent, with a usable token."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from mcp_server import demo
from mcp_server.tools import run_tool
from reasoning.models import ReasoningFlow

pytestmark = pytest.mark.django_db


def test_load_demo_records_a_flow_through_the_mcp_tools_once() -> None:
    out = StringIO()
    call_command("load_demo", stdout=out)
    flow = ReasoningFlow.objects.get(pk=demo.FLOW_ID)
    assert flow.flow_state == ReasoningFlow.State.COMPLETED and flow.outcome_correct is True
    assert [step.kind for step in flow.steps.order_by("created_at")] == ["retrieval", "llm_prompt", "verdict"]
    assert flow.steps.filter(reasoning_content_chars__gt=0).count() == 1
    actions = set(AuditEvent.objects.filter(actor="token:demo-mcp-agent").values_list("action", flat=True))
    assert {
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.flow.completed",
        "reasoning.flow.outcome_recorded",
        "reasoning.pathway.matched",
    } <= actions

    # The printed token connects an MCP client: it reads the flow back through a tool.
    line = next(line for line in out.getvalue().splitlines() if "mcp_server:" in line)
    token = re.search(r"RFT_MCP_TOKEN=(\S+)", line).group(1)  # type: ignore[union-attr]
    answer = run_tool("get_flow", {"flow_id": str(demo.FLOW_ID)}, token)
    assert not answer.is_error, answer.text
    assert len(json.loads(answer.text)["steps"]) == 3

    events = AuditEvent.objects.count()
    again = StringIO()
    call_command("load_demo", stdout=again)
    assert AuditEvent.objects.count() == events
    assert "1 flow recorded through the MCP tools (0 new)" in again.getvalue()
    assert "RFT_MCP_TOKEN=<token>" in again.getvalue()  # the secret is shown once only
