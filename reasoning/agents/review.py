"""The 1:1 performance review of an agent: its decisions recorded incorrect, with their step
timelines, grouped by decision type, each with 1 to 3 targeted questions.

Contract (docs/outcomes-and-drift.md, "Performance review"):

* A decision is incorrect when its outcome was recorded with ``correct: false``. Decisions
  come newest judgement first (``outcome_recorded_at``, then id, descending), and ``since``
  keeps those judged at or after it: a decision made before the previous review but judged
  after it is in the next one, so consecutive reviews miss nothing.
* One page is at most ``limit`` decisions; its groups are the page's decisions by
  ``trigger_type``, in the order of each group's newest decision.
* Steps are in the order they began (``started_at``, else ``created_at``, then position),
  as the flow read orders them. Summary and rationale are shown, as an operator sees them
  on the flow page; inputs, outputs, their PII and raw reasoning are never read.
* Questions come from ``TEMPLATES``, in order, the first ``MAX_QUESTIONS`` that apply; when
  none applies, ``FALLBACK``. They quote numbers, step kinds and positions, never text.

Two queries a page, whatever its size: the flows, then all their steps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.db.models.functions import Coalesce

from core.api_views import parse_instant
from core.cursors import decode_cursor, encode_cursor, moment
from reasoning.models import ReasoningFlow, ReasoningStep

MAX_QUESTIONS = 3
HIGH_CONFIDENCE = 0.8  # outcome_confidence at or above which a wrong decision was a confident one
SLOW_STEP_MS = 2000  # the slowest step is asked about when it took at least this long
RETRIEVAL_KINDS = frozenset({"retrieval"})

FLOW_FIELDS = (
    "id",
    "trace_id",
    "session_id",
    "trigger_type",
    "flow_state",
    "outcome_type",
    "outcome",
    "outcome_confidence",
    "step_count",
    "patient_safe_summary",
    "created_at",
    "closed_at",
    "outcome_recorded_at",
)
# No inputs, outputs, PII columns or reasoning_content: the query names what the review shows.
STEP_FIELDS = (
    "position",
    "kind",
    "agent",
    "summary_text",
    "rationale",
    "confidence",
    "latency_ms",
    "started_at",
)


# --- Questions -------------------------------------------------------------------------------


def _high_confidence(flow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str | None:
    confidence = flow["outcome_confidence"]
    if confidence is None or confidence < HIGH_CONFIDENCE:
        return None
    return f"Confidence was {confidence:.2f} on a decision recorded incorrect: what evidence supported it?"


def _no_retrieval(flow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str | None:
    if not steps or any(step["kind"] in RETRIEVAL_KINDS for step in steps):
        return None
    verdict = steps[-1]
    return (
        f"No retrieval step preceded the verdict (step #{verdict['position']}, {verdict['kind']}): "
        "what was the decision based on?"
    )


def _slowest_step(flow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str | None:
    timed = [step for step in steps if step["latency_ms"] is not None]
    if not timed:
        return None
    slowest = max(timed, key=lambda step: step["latency_ms"])  # ties: the earliest in the timeline
    if slowest["latency_ms"] < SLOW_STEP_MS:
        return None
    seconds = slowest["latency_ms"] / 1000
    return (
        f"Step #{slowest['position']} ({slowest['kind']}) took {seconds:.1f} s, the slowest: did it time out or retry?"
    )


def _merged_branches(flow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> str | None:
    merges = [step for step in steps if step["extra_parent_ids"]]
    if not merges:
        return None
    widest = max(merges, key=lambda step: len(step["extra_parent_ids"]))  # ties: the earliest
    branches = 1 + len(widest["extra_parent_ids"])
    return f"Step #{widest['position']} merged {branches} branches: which branch carried the decision?"


Template = Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], "str | None"]

# In the order they are asked; the table in docs/outcomes-and-drift.md lists them.
TEMPLATES: tuple[tuple[str, Template], ...] = (
    ("high_confidence", _high_confidence),
    ("no_retrieval", _no_retrieval),
    ("slowest_step", _slowest_step),
    ("merged_branches", _merged_branches),
)
FALLBACK = (
    "generic",
    "The decision was recorded incorrect: which step first went wrong, and what would have made it right?",
)


def questions(flow: Mapping[str, Any], steps: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """1 to ``MAX_QUESTIONS`` questions about one incorrect decision (``steps`` in timeline
    order, each with its ``extra_parent_ids``)."""
    asked = []
    for name, template in TEMPLATES:
        text = template(flow, steps)
        if text is not None:
            asked.append({"template": name, "text": text})
        if len(asked) == MAX_QUESTIONS:
            break
    if not asked:
        asked.append({"template": FALLBACK[0], "text": FALLBACK[1]})
    return asked


# --- The page --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewPage:
    groups: list[dict[str, Any]]
    flow_count: int
    question_count: int
    next_cursor: str | None


def parse_since(raw: str | None) -> datetime | None:
    """An ISO 8601 date (its midnight in ``TIME_ZONE``) or a date-time with an offset."""
    return parse_instant(raw, "since", dates=True)


def review(agent: str, *, since: datetime | None, limit: int, cursor: str = "") -> ReviewPage:
    """One page of ``agent``'s incorrect decisions, newest judgement first, grouped (two queries)."""
    flows = ReasoningFlow.objects.filter(agent=agent, outcome_correct=False, outcome_recorded_at__isnull=False)
    if since is not None:
        flows = flows.filter(outcome_recorded_at__gte=since)
    if cursor:
        after_at, after_id = _decode(cursor)
        flows = flows.filter(Q(outcome_recorded_at__lt=after_at) | Q(outcome_recorded_at=after_at, id__lt=after_id))
    rows = list(flows.order_by("-outcome_recorded_at", "-id").values(*FLOW_FIELDS)[: limit + 1])
    next_cursor = _encode(rows[limit - 1]) if len(rows) > limit else None
    rows = rows[:limit]

    steps_of: dict[uuid.UUID, list[dict[str, Any]]] = {row["id"]: [] for row in rows}
    if rows:
        steps = (
            ReasoningStep.objects.filter(flow_id__in=list(steps_of))
            .order_by("flow_id", Coalesce("started_at", "created_at"), "position")
            .values("flow_id", "extra_parent_ids", *STEP_FIELDS)
        )
        for step in steps:
            steps_of[step["flow_id"]].append(step)

    groups: dict[str, dict[str, Any]] = {}
    question_count = 0
    for row in rows:
        timeline = steps_of[row["id"]]
        asked = questions(row, timeline)
        question_count += len(asked)
        decision = {
            **row,
            "steps": [{name: step[name] for name in STEP_FIELDS} for step in timeline],
            "questions": asked,
        }
        group = groups.setdefault(
            row["trigger_type"], {"decision_type": row["trigger_type"], "count": 0, "decisions": []}
        )
        group["count"] += 1
        group["decisions"].append(decision)
    return ReviewPage(list(groups.values()), len(rows), question_count, next_cursor)


def _encode(row: Mapping[str, Any]) -> str:
    return encode_cursor(row["outcome_recorded_at"].isoformat(), str(row["id"]))


def _decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    at, flow_id = decode_cursor(cursor, moment, uuid.UUID)
    return at, flow_id
