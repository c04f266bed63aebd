"""Demo rows for ``load_demo``: one flow an agent recorded through the MCP tools.

The flow is written the way an MCP client writes it — every call goes through
``mcp_server.tools`` into the routes' own views, with a ``demo-mcp-agent`` token — so the
demo shows in the dashboards (actor ``token:demo-mcp-agent`` in the audit trail) what an agent
connected over MCP leaves behind. Runs after the pathways' demo (INSTALLED_APPS order), so the
agent finds and reuses a proven pathway. Idempotent: the flow has a fixed id.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import CommandError

from reasoning.models import ApiToken, ReasoningFlow
from reasoning.tokens import create_api_token, rotate_api_token

from .tools import run_tool

DEMO_ACTOR = "system:demo"
AGENT_NAME = "demo-mcp-agent"  # the name of the agent's API token (its secret is generated)
SCOPES = (ApiToken.Scope.WRITE, ApiToken.Scope.ADMIN)
FLOW_ID = uuid.uuid5(uuid.UUID("6f1d2c3e-8a4b-4c5d-9e6f-7a8b9c0d1e2f"), "mcp-demo-flow")
STEP_IDS = [uuid.uuid5(FLOW_ID, f"step-{position}") for position in (1, 2, 3)]
CONNECT = "connect an MCP client: RFT_MCP_TOKEN=<token> manage.py mcp_server, or POST /mcp (docs/mcp.md)"


def load_demo_data() -> str:
    if ReasoningFlow.objects.filter(pk=FLOW_ID).exists():
        return f"1 flow recorded through the MCP tools (0 new); {CONNECT}"
    # No enclosing transaction: each tool call commits as its route does (the write path's
    # durable atomic blocks cannot nest), exactly as a connected agent's calls would.
    token = _token()
    if token is None:
        return f"skipped: the token {AGENT_NAME!r} is revoked"
    reused = _record(token)
    return (
        f"1 flow recorded through the MCP tools (1 new, reused {reused} pathway), flow {FLOW_ID}; "
        f"{CONNECT.replace('<token>', token)} — shown once, rotate_api_token {AGENT_NAME} for a new one"
    )


def _token() -> str | None:
    """A fresh secret for the demo agent's token (created, or rotated when it exists)."""
    existing = ApiToken.objects.filter(name=AGENT_NAME).first()
    if existing is None:
        return create_api_token(name=AGENT_NAME, scopes=SCOPES, actor=DEMO_ACTOR)[1]
    if existing.revoked_at is not None:
        return None
    return rotate_api_token(name=AGENT_NAME, actor=DEMO_ACTOR)[1]


def _call(name: str, token: str, **arguments: Any) -> Any:
    answer = run_tool(name, arguments, token)
    if answer.is_error:
        raise CommandError(f"MCP demo: tool {name} refused: {answer.text}")
    return json.loads(answer.text)


def _record(token: str) -> int:
    """Open, reuse a pathway, add three steps, close, record the outcome. Returns how many
    pathways the agent reused (0 when the library has none for its trigger)."""
    _call(
        "open_flow",
        token,
        id=str(FLOW_ID),
        trigger_type="user_question",
        trigger_ref="demo/mcp/1",
        trigger_summary="Asked through an MCP client whether a follow-up visit is needed",
        agent="researcher",
        trace_id="demo-mcp-trace",
    )
    matched = _call("match_pathways", token, trigger_type="user_question", trigger_ref="demo/researcher/3")
    candidates = matched.get("candidates") or []
    if candidates:
        _call("record_pathway_hit", token, pathway_id=candidates[0]["id"])
    steps = [
        ("retrieval", "Looked up a proven pathway for this kind of question", 0.94, None),
        ("llm_prompt", "Compared the latest readings with the guideline targets", 0.92, "Weighed both readings."),
        ("verdict", "Concluded that a follow-up visit is the right next step", 0.93, None),
    ]
    parent: str | None = None
    for step_id, (kind, summary, confidence, reasoning) in zip(STEP_IDS, steps, strict=True):
        fields: dict[str, Any] = {
            "flow_id": str(FLOW_ID),
            "id": str(step_id),
            "kind": kind,
            "agent": "researcher",
            "summary_text": summary,
            "confidence": confidence,
            "latency_ms": 120,
        }
        if parent is not None:
            fields["parent_step_id"] = parent
        if reasoning is not None:
            fields["reasoning_content"] = reasoning
        parent = _call("add_step", token, **fields)["id"]
    _call(
        "close_flow",
        token,
        flow_id=str(FLOW_ID),
        flow_state="completed",
        outcome_type="recommendation_delivered",
        outcome_summary="Recommended a follow-up visit with the care team",
    )
    _call("record_outcome", token, flow_id=str(FLOW_ID), outcome="follow_up_booked", correct=True)
    return 1 if candidates else 0
