"""The sessions pages, for operators: every session (``/dashboard/admin/reasoning/sessions``) and
one session's decisions in time order (``…/sessions/{session_id}``).

The list reads ``SessionPage`` (the sessions route's query: one statement a page, newest last
decision first, keyset pages, an agent filter) and the latest drift level of each session's
agents; it is not audited, like the route (labels, counts and times only). A session's page
reads its decisions through ``read_session_replay`` (audited as
``admin.reasoning.session.replay_read``, like the replay route) and its summary and drift
reports; each decision links to its flow and its turn.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from core.access import operator_required
from core.actors import actor_for
from core.errors import InvalidInput, NotFound
from core.pages import time_range_values, with_time_range
from reasoning.agents.drift import level_label, pill
from reasoning.models import DriftReport, total_tokens
from reasoning.outcomes.services import read_session_replay
from reasoning.outcomes.sessions import SessionPage, SessionSummary, check_session_id, session_summaries

SESSIONS_PER_PAGE = 50
DECISIONS_PER_PAGE = 100


def _drift_levels(summaries: list[SessionSummary]) -> dict[str, list[tuple[str, str]]]:
    """Each session's drift levels, one per agent judged on it: (agent, level)."""
    levels: dict[str, list[tuple[str, str]]] = {}
    reports = DriftReport.objects.filter(session_id__in=[s.session_id for s in summaries]).order_by("agent")
    for session_id, agent, level in reports.values_list("session_id", "agent", "level"):
        levels.setdefault(session_id, []).append((agent, level))
    return levels


def _row(summary: SessionSummary, levels: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "summary": summary,
        "url": reverse("admin-session-page", args=[summary.session_id]),
        "duration": (summary.last_at - summary.first_at).total_seconds(),
        "tokens": total_tokens(summary.input_tokens, summary.output_tokens),
        "drift": [
            {"agent": agent, "level": level, "label": level_label(level), "pill": pill(level)}
            for agent, level in levels
        ],
    }


@operator_required
@require_safe
def sessions_page(request: HttpRequest) -> HttpResponse:
    """Every session, newest last decision first; ``?agent=`` keeps the sessions an agent took part in."""
    error = ""
    try:
        page = SessionPage.parse(with_time_range(request.GET))
    except InvalidInput as exc:
        error = f"{exc.field}: {exc.detail}" if exc.field else exc.detail
        page = SessionPage()
    summaries, next_cursor = page.page(SESSIONS_PER_PAGE)
    levels = _drift_levels(summaries)
    context = {
        "rows": [_row(summary, levels.get(summary.session_id, [])) for summary in summaries],
        "agent": page.agent,
        "period": page.period,
        "periods": PERIOD_CHOICES,
        "range": time_range_values(page.created_after, page.created_before),
        "filtered": bool(page.params()),
        "error": error,
        "next_url": "?" + urlencode(page.params(next_cursor)) if next_cursor else None,
        "first_url": "?" + urlencode(page.params()) if page.cursor else None,
    }
    return render(request, "reasoning/sessions.html", context)


PERIOD_CHOICES = [
    ("", "any time"),
    ("1h", "last hour"),
    ("24h", "last 24 h"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
]


@operator_required
@require_safe
def session_page(request: HttpRequest, session_id: str) -> HttpResponse:
    """One session: its summary, drift reports and decisions oldest first, each linking to its
    flow and its turn (audited). An unknown session renders the 404 page."""
    try:
        check_session_id(session_id)
        cursor = request.GET.get("cursor", "").strip()
        decisions, next_cursor = read_session_replay(
            session_id, actor=actor_for(request), limit=DECISIONS_PER_PAGE, cursor=cursor
        )
    except (InvalidInput, NotFound):
        return render(request, "reasoning/session_not_found.html", status=404)
    summary = session_summaries([session_id]).get(session_id)
    if summary is None:
        return render(request, "reasoning/session_not_found.html", status=404)
    reports = DriftReport.objects.filter(session_id=session_id).order_by("agent")
    context = {
        "summary": summary,
        "duration": (summary.last_at - summary.first_at).total_seconds(),
        "reports": [
            {"report": report, "label": level_label(report.level), "pill": pill(report.level)} for report in reports
        ],
        "decisions": [
            {
                **decision,
                "url": reverse("admin-flow-page", args=[decision["id"]]),
                "turn_url": reverse("admin-turn-page", args=[decision["trace_id"]]) if decision["trace_id"] else "",
            }
            for decision in decisions
        ],
        "next_url": "?" + urlencode({"cursor": next_cursor}) if next_cursor else None,
        "first_url": "?" if cursor else None,
    }
    return render(request, "reasoning/session.html", context)
