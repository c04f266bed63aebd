"""The agents' reads in SQL (the pages shape them): one row of facts per agent; an agent's
failed steps by error type.

``agent_facts`` reads every agent that has a flow, or one, in one statement whatever the
number of agents or sessions; it groups every flow that has an agent, so its cost grows
with them, like the sessions list (docs/outcomes-and-drift.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.replica import reading_connection

# Per (agent, session) first (flows without a session form the agent's '' group, which counts
# toward its totals but is no session), then per agent, with its last sessions as a JSON array
# and its latest drift report's level (index reasoning_drift_agent_ended).
_AGENTS = """
WITH per_session AS (
    SELECT agent, session_id, count(*) AS decisions,
           count(*) FILTER (WHERE outcome_correct) AS correct,
           count(*) FILTER (WHERE NOT outcome_correct) AS incorrect,
           sum(outcome_confidence) AS confidence_sum, count(outcome_confidence) AS confidence_n,
           max(created_at) AS last_at,
           sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens, sum(cost_usd) AS cost_usd
      FROM reasoning_flow
     WHERE agent <> '' AND (%(agent)s = '' OR agent = %(agent)s)
     GROUP BY agent, session_id
),
recent AS (
    SELECT *, row_number() OVER (PARTITION BY agent ORDER BY last_at DESC, session_id DESC) AS rank
      FROM per_session
     WHERE session_id <> ''
)
SELECT p.agent,
       count(*) FILTER (WHERE p.session_id <> '')::int,
       sum(p.decisions)::int, sum(p.correct)::int, sum(p.incorrect)::int,
       sum(p.confidence_sum) / nullif(sum(p.confidence_n), 0),
       (SELECT jsonb_agg(jsonb_build_array(
                   r.correct::float / nullif(r.correct + r.incorrect, 0),
                   r.confidence_sum / nullif(r.confidence_n, 0)) ORDER BY r.last_at, r.session_id)
          FROM recent r WHERE r.agent = p.agent AND r.rank <= %(sessions)s),
       (SELECT d.level FROM reasoning_drift_report d
         WHERE d.agent = p.agent ORDER BY d.session_ended_at DESC, d.id DESC LIMIT 1),
       sum(p.input_tokens)::bigint, sum(p.output_tokens)::bigint, sum(p.cost_usd)::float8
  FROM per_session p
 GROUP BY p.agent
 ORDER BY p.agent
"""


def agent_facts(agent: str = "", *, sessions: int) -> list[dict[str, Any]]:
    """Per agent, alphabetically (only ``agent`` when given): its sessions, decisions, correct and
    incorrect outcomes, mean confidence, latest drift level ("" when none), the accuracy and
    confidence of its last ``sessions`` sessions, oldest first, and its flows' tokens and cost
    (None when none reported any)."""
    with reading_connection().cursor() as cursor:
        cursor.execute(_AGENTS, {"sessions": sessions, "agent": agent})
        rows = cursor.fetchall()
    result = []
    for name, session_count, decisions, correct, incorrect, confidence, recent, level, inputs, outputs, cost in rows:
        points = _json(recent) or []
        result.append(
            {
                "agent": name,
                "sessions": session_count,
                "decisions": decisions,
                "correct": correct,
                "incorrect": incorrect,
                "mean_confidence": None if confidence is None else float(confidence),
                "drift_level": level or "",
                "recent_accuracy": [_float(a) for a, _ in points],
                "recent_confidence": [_float(c) for _, c in points],
                "input_tokens": inputs,
                "output_tokens": outputs,
                "cost_usd": cost,
            }
        )
    return result


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class FailureRow:
    """The agent's failed steps of one error type (a label, never a message)."""

    error_type: str
    steps: int
    flows: int
    last_at: datetime


# The agent's failed steps by error type, most first: a scan of the partial index
# reasoning_step_failed (failed steps are few), then the agent's among them.
_FAILURES = """
    SELECT error_type, count(*), count(DISTINCT flow_id), max(coalesce(started_at, created_at))
      FROM reasoning_step
     WHERE outcome = 'error' AND agent = %s
     GROUP BY error_type
     ORDER BY count(*) DESC, error_type
     LIMIT %s
"""


def failures(agent: str, limit: int) -> list[FailureRow]:
    """The agent's failed steps grouped by error type, the ``limit`` most frequent."""
    with reading_connection().cursor() as cursor:
        cursor.execute(_FAILURES, [agent, limit])
        return [FailureRow(*row) for row in cursor.fetchall()]
