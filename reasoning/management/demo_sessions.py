"""Demo sessions, outcomes, drift and a multi-agent turn for ``load_demo`` (idempotent: fixed ids).

1. Seven sessions for each reference agent, four decisions each, every flow closed and its
   outcome recorded (correct, incorrect or unknown) through ``services.record_outcome``.
2. The correlator's latest session drifts: one decision instead of four, at a much lower
   confidence, so its drift report is ``investigate`` against a baseline of six sessions.
3. One turn (``TURN_TRACE_ID``) run by three agents: the critic's flow names the
   researcher's flow as its ``trigger_ref`` and the correlator's names the critic's, the
   turn view's cross-flow links.
4. Drift reports for the sessions that have none yet (``jobs.compute_drift_reports``); a
   second run finds every demo session reported and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reasoning.jobs import compute_drift_reports
from reasoning.models import DriftReport, ReasoningFlow
from reasoning.outcomes.services import record_outcome
from reasoning.recording.services import add_steps, close_flow, start_flow

SESSION_AGENTS = ("researcher", "critic", "correlator")
SESSIONS_PER_AGENT = 7
DECISIONS_PER_SESSION = 4
DRIFTING_AGENT = "correlator"
TURN_TRACE_ID = "demo-turn-1"
_ACTOR = "system:demo"


@dataclass(frozen=True)
class DemoSessions:
    sessions: int
    new_flows: int
    new_outcomes: int
    new_reports: int
    turn_trace_id: str
    drifting_agent: str
    drifting_level: str


def session_id(agent: str, number: int) -> str:
    return f"demo-session-{agent}-{number}"


def _correct(number: int, decision: int) -> bool | None:
    """The outcome of a session's decision: the last unknown, the first wrong in every third
    session, else right (so the latest, seventh, session is as accurate as usual)."""
    if decision == DECISIONS_PER_SESSION - 1:
        return None
    return not (decision == 0 and number % 3 == 0)


def _ensure_flow(
    demo_id: Callable[[str], uuid.UUID],
    agents: dict[str, dict[str, Any]],
    name: str,
    agent: str,
    *,
    confidence: float,
    flow: dict[str, Any],
) -> tuple[ReasoningFlow, bool]:
    """Open, fill and close one flow (each call is replay-safe, so a second run writes nothing)."""
    spec = agents[agent]
    opened, created = start_flow(
        {"id": demo_id(name), "trigger_type": spec["trigger_type"], "agent": agent, **flow}, actor=_ACTOR
    )
    first, _, last = spec["steps"]
    steps = []
    previous: uuid.UUID | None = None
    for position, (kind, summary) in enumerate((first, last), start=1):
        step_id = demo_id(f"{name}-step-{position}")
        steps.append(
            {
                "id": step_id,
                "kind": kind,
                "agent": agent,
                "summary_text": summary,
                "confidence": confidence,
                "latency_ms": 90 + 40 * position,
                "parent_step_id": previous,
            }
        )
        previous = step_id
    add_steps(opened.pk, steps, actor=_ACTOR)
    if ReasoningFlow.objects.filter(pk=opened.pk).active().exists():
        outcome_type, outcome_summary = spec["outcome"]
        close_flow(
            opened.pk, state="completed", actor=_ACTOR, outcome_type=outcome_type, outcome_summary=outcome_summary
        )
    return opened, created


def load_sessions_and_turn(demo_id: Callable[[str], uuid.UUID], agents: dict[str, dict[str, Any]]) -> DemoSessions:
    """Load the demo sessions, their outcomes, the drift reports and the turn (see the module)."""
    new_flows = new_outcomes = 0
    wanted_sessions: list[str] = []
    for number in range(1, SESSIONS_PER_AGENT + 1):
        # Interleaved, as agents run side by side; each agent's sessions still end in number order.
        for agent in SESSION_AGENTS:
            drifting = agent == DRIFTING_AGENT and number == SESSIONS_PER_AGENT
            wanted_sessions.append(session_id(agent, number))
            for decision in range(1 if drifting else DECISIONS_PER_SESSION):
                name = f"{session_id(agent, number)}-{decision}"
                flow, created = _ensure_flow(
                    demo_id,
                    agents,
                    name,
                    agent,
                    confidence=0.42 if drifting else round(0.9 - 0.02 * ((number + decision) % 3), 2),
                    flow={
                        "trigger_ref": f"demo/{agent}/session-{number}/{decision}",
                        "trigger_summary": agents[agent]["trigger"],
                        "trace_id": f"demo-session-trace-{agent}-{number}-{decision}",
                        "session_id": session_id(agent, number),
                    },
                )
                new_flows += created
                if not ReasoningFlow.objects.filter(pk=flow.pk, outcome_recorded_at__isnull=False).exists():
                    correct = False if drifting else _correct(number, decision)
                    label = {True: "follow_up_confirmed", False: "follow_up_not_needed", None: "not_yet_known"}
                    record_outcome(flow.pk, label[correct], correct, actor=_ACTOR)
                    new_outcomes += 1

    # One turn of three agents under one trace id, each flow triggered by the previous one.
    previous: ReasoningFlow | None = None
    for agent in SESSION_AGENTS:
        flow, created = _ensure_flow(
            demo_id,
            agents,
            f"demo-turn-1-{agent}",
            agent,
            confidence=0.88,
            flow={
                "trigger_ref": str(previous.pk) if previous else "demo/turn-1/question",
                "trigger_summary": agents[agent]["trigger"],
                "trace_id": TURN_TRACE_ID,
            },
        )
        new_flows += created
        previous = flow

    # The job writes audit events on every run: only run it when a demo session lacks a report.
    reported = DriftReport.objects.filter(session_id__in=wanted_sessions).count()
    new_reports = len(compute_drift_reports()) if reported < len(wanted_sessions) else 0
    latest = DriftReport.objects.filter(
        agent=DRIFTING_AGENT, session_id=session_id(DRIFTING_AGENT, SESSIONS_PER_AGENT)
    ).first()
    return DemoSessions(
        sessions=len(wanted_sessions),
        new_flows=new_flows,
        new_outcomes=new_outcomes,
        new_reports=new_reports,
        turn_trace_id=TURN_TRACE_ID,
        drifting_agent=DRIFTING_AGENT,
        drifting_level=latest.level if latest else "",
    )
