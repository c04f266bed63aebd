"""The one read behind drift: every session's aggregates, for every agent, in one SQL pass.

A session of an agent is the agent's flows that share a non-blank ``session_id`` (flows
without an agent or a session are in no session). It is **completed** when it has at least
one flow and none of them is active (every flow completed or aborted); it ended at the latest
``closed_at`` of its flows. An escalation is a flow closed with ``outcome_type`` ``escalated``
or holding a step of kind ``escalation`` (the sessions summary uses the same definition).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable

from core.replica import reading_connection
from reasoning.agents.drift import SessionStats
from reasoning.models import DriftReport

ESCALATED_OUTCOME = "escalated"
ESCALATION_STEP_KIND = "escalation"

# One pass over the flows: grouped by (agent, session, trigger type) first, so the outer
# grouping can build the trigger-type mix with jsonb_object_agg in the same statement.
_SESSION_AGGREGATES = """
WITH per_type AS (
    SELECT f.agent, f.session_id, f.trigger_type,
           count(*) AS decisions,
           count(*) FILTER (WHERE f.flow_state = 'active') AS open_flows,
           sum(f.outcome_confidence) AS confidence_sum,
           count(f.outcome_confidence) AS confidence_n,
           count(*) FILTER (
               WHERE f.outcome_type = %(escalated)s
                  OR EXISTS (SELECT 1 FROM reasoning_step s WHERE s.flow_id = f.id AND s.kind = %(kind)s)
           ) AS escalations,
           count(*) FILTER (WHERE f.outcome_correct) AS correct,
           count(*) FILTER (WHERE NOT f.outcome_correct) AS incorrect,
           max(f.closed_at) AS ended_at
    FROM reasoning_flow f
    WHERE f.session_id <> '' AND f.agent <> '' {agent_filter}
    GROUP BY f.agent, f.session_id, f.trigger_type
)
SELECT agent, session_id, sum(decisions)::int, sum(confidence_sum) / nullif(sum(confidence_n), 0),
       sum(escalations)::int, sum(correct)::int, sum(incorrect)::int, max(ended_at),
       jsonb_object_agg(trigger_type, decisions)
FROM per_type
GROUP BY agent, session_id
HAVING sum(open_flows) = 0
"""


def completed_sessions(agent: str | None = None) -> dict[str, list[SessionStats]]:
    """Every completed session, by agent (of one agent when ``agent`` is given): one query."""
    sql = _SESSION_AGGREGATES.format(agent_filter="AND f.agent = %(agent)s" if agent is not None else "")
    params = {"escalated": ESCALATED_OUTCOME, "kind": ESCALATION_STEP_KIND, "agent": agent}
    by_agent: dict[str, list[SessionStats]] = defaultdict(list)
    with reading_connection().cursor() as cursor:
        cursor.execute(sql, params)
        for name, session_id, decisions, confidence, escalations, correct, incorrect, ended_at, mix in cursor:
            # Django's psycopg setup hands jsonb over as text.
            mix = json.loads(mix) if isinstance(mix, str) else mix
            by_agent[name].append(
                SessionStats(
                    session_id=session_id,
                    ended_at=ended_at,
                    decisions=decisions,
                    mean_confidence=float(confidence) if confidence is not None else None,
                    escalations=escalations,
                    correct=correct,
                    incorrect=incorrect,
                    trigger_counts={key: int(count) for key, count in mix.items()},
                )
            )
    return dict(by_agent)


def reported_sessions(agents: Iterable[str] | None = None) -> dict[str, set[str]]:
    """The (agent -> session ids) that already have a drift report: one query."""
    reports = DriftReport.objects.all()
    if agents is not None:
        reports = reports.filter(agent__in=list(agents))
    found: dict[str, set[str]] = defaultdict(set)
    for name, session_id in reports.values_list("agent", "session_id"):
        found[name].add(session_id)
    return dict(found)
