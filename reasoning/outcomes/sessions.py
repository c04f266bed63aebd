"""Sessions: the flows (decisions) that share a non-empty ``session_id``.

``session_summaries(ids)`` summarises given sessions and ``SessionPage.parse(params).page(limit)``
lists them newest first (by their last flow), each in one aggregate statement whatever the
number of sessions or flows; ``replay(session_id)`` is a session's decisions in time order.
Counts, labels and times only: no summary text, rationale or raw reasoning is read here.

Definitions (docs/outcomes-and-drift.md, "Sessions"):

* ``total_decisions``: the session's flows, whatever their state.
* ``with_outcome``: flows whose outcome is recorded; ``correct`` / ``incorrect``: those
  recorded as true / false (an outcome recorded with ``correct`` null counts in neither).
* ``accuracy`` = correct / (correct + incorrect), null when nothing was judged: unknown is
  not wrong, so an outcome recorded as "not known" does not lower it.
* ``escalations``: flows closed with ``outcome_type`` ``escalated`` or holding at least one
  step of kind ``escalation`` (each flow counts once).
* ``agent``: the agent with the most flows (ties: the first in alphabetical order);
  ``agents``: every non-blank agent, most flows first.
* ``mean_confidence``: the mean ``outcome_confidence`` of the flows that have one.
* ``input_tokens`` / ``output_tokens`` / ``cost_usd``: the flows' model usage summed (null when
  no flow reported any: unknown is not zero); the cost at each call's price on its day.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from core.api_views import parse_instant
from core.cursors import decode_cursor, encode_cursor, moment, text
from core.errors import InvalidInput
from core.labels import LABEL_PATTERN, label_validator
from core.replica import reading_connection

MAX_SESSION_ID = 100  # ReasoningFlow.session_id's length
ESCALATED_OUTCOME = "escalated"
ESCALATION_STEP = "escalation"
_LABEL_RE = re.compile(LABEL_PATTERN)


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    agent: str
    agents: list[str]
    total_decisions: int
    with_outcome: int
    correct: int
    incorrect: int
    decision_types: dict[str, int]  # trigger_type → flows
    first_at: datetime
    last_at: datetime
    mean_confidence: float | None
    escalations: int
    # Each agent's decisions in the session (a session may hold several agents' flows).
    agent_decisions: dict[str, int] = field(default_factory=dict)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    # The list's order and cursor: the last decision within the list's window (else ``last_at``).
    window_last: datetime | None = None

    @property
    def accuracy(self) -> float | None:
        judged = self.correct + self.incorrect
        return self.correct / judged if judged else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "agent": self.agent,
            "agents": self.agents,
            "total_decisions": self.total_decisions,
            "with_outcome": self.with_outcome,
            "correct": self.correct,
            "incorrect": self.incorrect,
            "accuracy": self.accuracy,
            "decision_types": self.decision_types,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "mean_confidence": self.mean_confidence,
            "escalations": self.escalations,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
        }


# The summary of the sessions the ``chosen`` CTE names, newest first. ``chosen`` is one of
# the two constant fragments below: no input ever reaches the statement's text.
_SUMMARY = """
WITH chosen AS ({chosen}),
flow AS (
    SELECT f.session_id, chosen.window_last, f.agent, f.trigger_type, f.outcome_recorded_at, f.outcome_correct,
           f.outcome_confidence, f.created_at, f.input_tokens, f.output_tokens, f.cost_usd,
           (f.outcome_type = %(escalated)s OR EXISTS (
               SELECT 1 FROM reasoning_step s WHERE s.flow_id = f.id AND s.kind = %(escalation)s
           )) AS escalated
      FROM reasoning_flow f JOIN chosen USING (session_id)
     WHERE f.session_id <> ''
),
by_agent AS (
    SELECT session_id, jsonb_agg(agent ORDER BY n DESC, agent) AS agents, jsonb_object_agg(agent, n) AS per_agent
      FROM (SELECT session_id, agent, count(*) AS n FROM flow WHERE agent <> '' GROUP BY 1, 2) counted
     GROUP BY 1
),
by_type AS (
    SELECT session_id, jsonb_object_agg(trigger_type, n) AS decision_types
      FROM (SELECT session_id, trigger_type, count(*) AS n FROM flow GROUP BY 1, 2) counted
     GROUP BY 1
)
SELECT flow.session_id,
       count(*),
       count(flow.outcome_recorded_at),
       count(*) FILTER (WHERE flow.outcome_correct),
       count(*) FILTER (WHERE NOT flow.outcome_correct),
       min(flow.created_at),
       max(flow.created_at),
       avg(flow.outcome_confidence),
       count(*) FILTER (WHERE flow.escalated),
       (SELECT agents FROM by_agent WHERE by_agent.session_id = flow.session_id),
       (SELECT decision_types FROM by_type WHERE by_type.session_id = flow.session_id),
       (SELECT per_agent FROM by_agent WHERE by_agent.session_id = flow.session_id),
       sum(flow.input_tokens),
       sum(flow.output_tokens),
       sum(flow.cost_usd)::float8,
       coalesce(flow.window_last, max(flow.created_at))
  FROM flow
 GROUP BY flow.session_id, flow.window_last
 ORDER BY coalesce(flow.window_last, max(flow.created_at)) DESC, flow.session_id DESC
"""
_CHOSEN_BY_ID = "SELECT DISTINCT unnest(%(ids)s::text[]) AS session_id, NULL::timestamptz AS window_last"
# One page of sessions, newest last flow first, after the cursor; one row more than the page
# says whether there is a next one. Reads the session index (reasoning_flow_session_created).
_CHOSEN_PAGE = """
    SELECT session_id, max(created_at) AS window_last FROM reasoning_flow
     WHERE session_id <> ''
       AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
       AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
     GROUP BY session_id
    HAVING (%(agent)s = '' OR bool_or(agent = %(agent)s))
       AND (%(after_at)s::timestamptz IS NULL
            OR (max(created_at), session_id) < (%(after_at)s::timestamptz, %(after_id)s::text))
     ORDER BY max(created_at) DESC, session_id DESC
     LIMIT %(limit)s
"""


def _summaries(chosen: str, params: Mapping[str, Any]) -> list[SessionSummary]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            _SUMMARY.format(chosen=chosen),
            {"escalated": ESCALATED_OUTCOME, "escalation": ESCALATION_STEP, **params},
        )
        rows = cursor.fetchall()
    summaries = []
    for row in rows:
        session_id, total, with_outcome, correct, incorrect, first_at, last_at, mean, escalations = row[:9]
        agents = _json(row[9]) or []
        summaries.append(
            SessionSummary(
                session_id=session_id,
                agent=agents[0] if agents else "",
                agents=agents,
                total_decisions=total,
                with_outcome=with_outcome,
                correct=correct,
                incorrect=incorrect,
                decision_types=dict(sorted((_json(row[10]) or {}).items())),
                first_at=first_at,
                last_at=last_at,
                mean_confidence=None if mean is None else float(mean),
                escalations=escalations,
                agent_decisions=dict(_json(row[11]) or {}),
                input_tokens=None if row[12] is None else int(row[12]),
                output_tokens=None if row[13] is None else int(row[13]),
                cost_usd=row[14],
                window_last=row[15],
            )
        )
    return summaries


def _json(value: Any) -> Any:
    # psycopg decodes jsonb itself; a plain string only if a driver did not.
    return json.loads(value) if isinstance(value, str) else value


def session_summaries(session_ids: Sequence[str]) -> dict[str, SessionSummary]:
    """The summaries of the given sessions that have flows, by session id (one query)."""
    wanted = [session_id for session_id in dict.fromkeys(session_ids) if session_id]
    if not wanted:
        return {}
    return {summary.session_id: summary for summary in _summaries(_CHOSEN_BY_ID, {"ids": wanted})}


def check_session_id(value: str) -> str:
    """A session id from a URL: at most 100 characters, no NUL (400 naming ``session_id``)."""
    if not value or len(value) > MAX_SESSION_ID or "\x00" in value:
        raise InvalidInput(f"must be 1 to {MAX_SESSION_ID} characters, without NUL", field="session_id")
    return value


# The sessions list's presets: a session with a decision in the last hour, day, week or month.
SESSION_PERIODS = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}


@dataclass(frozen=True)
class SessionPage:
    """``GET /admin/v1/reasoning/sessions``: sessions newest first (by ``last_at``, ties by id),
    optionally only those in which ``agent`` made a decision, and only those with a decision in a
    window (``period``, ``created_after``, ``created_before``; ordered by their last decision in it,
    while each summary covers the whole session); keyset pages."""

    agent: str = ""
    period: str = ""
    created_after: datetime | None = None
    created_before: datetime | None = None
    cursor: str = ""

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> SessionPage:
        agent = params.get("agent", "").strip()
        if agent and (len(agent) > 100 or not _LABEL_RE.match(agent)):
            raise InvalidInput(str(label_validator.message), field="agent")
        period = params.get("period", "").strip()
        if period and period not in SESSION_PERIODS:
            raise InvalidInput(f"must be one of {', '.join(SESSION_PERIODS)}", field="period")
        page = cls(
            agent=agent,
            period=period,
            created_after=parse_instant(params.get("created_after"), "created_after"),
            created_before=parse_instant(params.get("created_before"), "created_before"),
            cursor=params.get("cursor", "").strip(),
        )
        if page.cursor:
            page._cursor_values()  # a bad cursor is a 400 now, not at the query
        return page

    def params(self, cursor: str | None = None) -> dict[str, str]:
        """The query parameters that give this list (at ``cursor``), without empty ones."""
        out = {
            "agent": self.agent,
            "period": self.period,
            "created_after": self.created_after.isoformat() if self.created_after else "",
            "created_before": self.created_before.isoformat() if self.created_before else "",
            "cursor": cursor or "",
        }
        return {name: value for name, value in out.items() if value}

    def _since(self) -> datetime | None:
        starts = [self.created_after] if self.created_after is not None else []
        if self.period:
            starts.append(timezone.now() - SESSION_PERIODS[self.period])
        return max(starts, default=None)

    def page(self, limit: int) -> tuple[list[SessionSummary], str | None]:
        """At most ``limit`` summaries after the cursor, and the next page's cursor (one query)."""
        after_at, after_id = self._cursor_values() if self.cursor else (None, "")
        params = {
            "agent": self.agent,
            "since": self._since(),
            "until": self.created_before,
            "after_at": after_at,
            "after_id": after_id,
            "limit": limit + 1,
        }
        rows = _summaries(_CHOSEN_PAGE, params)
        if len(rows) <= limit:
            return rows, None
        last = rows[limit - 1]
        return rows[:limit], encode_cursor((last.window_last or last.last_at).isoformat(), last.session_id)

    def _cursor_values(self) -> tuple[datetime, str]:
        at, session_id = decode_cursor(self.cursor, moment, text)
        return at, session_id


# --- Replay --------------------------------------------------------------------------------

# A session's decisions in the order they were made, each with its step kinds in the order the
# steps began (as the admin flow read orders them). Labels, numbers and times: no text but the
# outcome, which passed the summary guard when it was recorded.
_REPLAY = """
SELECT f.id, f.trace_id, f.trigger_type, f.agent, f.flow_state, f.outcome_type, f.outcome,
       f.outcome_correct, f.outcome_confidence, f.step_count, f.patient_safe_summary,
       ARRAY(SELECT s.kind FROM reasoning_step s WHERE s.flow_id = f.id
              ORDER BY COALESCE(s.started_at, s.created_at), s.position) AS step_kinds,
       f.created_at, f.closed_at, f.outcome_recorded_at, f.input_tokens, f.output_tokens, f.cost_usd::float8
  FROM reasoning_flow f
 WHERE f.session_id = %(session_id)s AND f.session_id <> ''
   AND (%(after_at)s::timestamptz IS NULL
        OR (f.created_at, f.id) > (%(after_at)s::timestamptz, %(after_id)s::uuid))
 ORDER BY f.created_at, f.id
 LIMIT %(limit)s
"""
REPLAY_COLUMNS = (
    "id",
    "trace_id",
    "trigger_type",
    "agent",
    "flow_state",
    "outcome_type",
    "outcome",
    "outcome_correct",
    "outcome_confidence",
    "step_count",
    "patient_safe_summary",
    "step_kinds",
    "created_at",
    "closed_at",
    "outcome_recorded_at",
    "input_tokens",
    "output_tokens",
    "cost_usd",
)


def replay(session_id: str, *, limit: int, cursor: str = "") -> tuple[list[dict[str, Any]], str | None]:
    """At most ``limit`` of the session's decisions, oldest first, after ``cursor``; and the
    next page's cursor (one query)."""
    after_at, after_id = _replay_cursor(cursor) if cursor else (None, None)
    params = {"session_id": session_id, "after_at": after_at, "after_id": after_id, "limit": limit + 1}
    with reading_connection().cursor() as db:
        db.execute(_REPLAY, params)
        rows = [dict(zip(REPLAY_COLUMNS, row, strict=True)) for row in db.fetchall()]
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], encode_cursor(last["created_at"].isoformat(), str(last["id"]))


def _replay_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    at, flow_id = decode_cursor(cursor, moment, uuid.UUID)
    return at, flow_id
