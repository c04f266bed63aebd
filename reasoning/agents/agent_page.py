"""/dashboard/admin/reasoning/agents/{agent}: one agent, for operators.

Three parts, each read the way its API route reads it (docs/outcomes-and-drift.md, "The
agent page"):

* **Drift**: one drift report's five signals, the session's value beside the baseline's with
  a pair of bars, the change that counts as drift, the thresholds and the level; the latest
  report unless ``?report=<session id>`` picks one from the history listed under it.
* **Sessions**: the agent's sessions newest first (``reasoning.outcomes.sessions.SessionPage``), each
  with its drift level, ``SESSIONS_PER_PAGE`` a page (``?cursor=``).
* **Failed steps**: the agent's steps whose work failed, by error type (``failures``), with a
  link to its flows that hold one.
* **Review**: the agent's decisions recorded incorrect with their questions and step
  timelines (``services.read_agent_review``, audited as the review route is), optionally
  ``?since=``, ``REVIEW_DECISIONS`` a page (``?review_cursor=``).

A constant number of queries whatever the number of sessions, reports or decisions shown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from core import svg
from core.access import operator_required
from core.actors import actor_for
from core.errors import InvalidInput
from reasoning.agents import drift, queries, review, services
from reasoning.agents.drift import level_label, pill
from reasoning.agents.list_page import AgentRow, agent_rows
from reasoning.agents.routes import parse_agent
from reasoning.models import DriftReport
from reasoning.outcomes.sessions import SessionPage, SessionSummary

SESSIONS_PER_PAGE = 20
FAILURE_TYPES = 10
REVIEW_DECISIONS = 10
REPORT_HISTORY = 12
BAR_WIDTH = 160
BAR_HEIGHT = 8

# Name, what it measures, and whether it is a share (shown as a percentage, bars on 0..1).
SIGNAL_LABELS: dict[str, tuple[str, str]] = {
    "confidence": ("Mean confidence", "mean outcome_confidence of the session's decisions"),
    "decisions": ("Decisions", "the session's number of decisions"),
    "escalation_rate": ("Escalation rate", "share of decisions escalated"),
    "accuracy": ("Accuracy", "correct / judged"),
    "decision_mix": ("Decision-type mix", "Jensen-Shannon distance of the decision types from the baseline's"),
}
PERCENT_SIGNALS = frozenset({"escalation_rate", "accuracy"})
CHANGE_WORDS = {"down": "fall", "up": "rise", "either": "change", "absolute": "distance"}


def _format(signal: str, value: float | None) -> str:
    if value is None:
        return "—"
    if signal in PERCENT_SIGNALS:
        return f"{value:.0%}"
    if signal == "decisions":
        return f"{value:.1f}".removesuffix(".0")
    return f"{value:.2f}"


def _threshold(signal: str, value: float) -> str:
    return f"{value:.2f}" if drift.DIRECTIONS[signal] == "absolute" else f"{value:.0%}"


@dataclass(frozen=True)
class SignalRow:
    """One signal of a drift report, as the page shows it."""

    signal: str
    value: float | None
    baseline: float | None
    level: str
    thresholds: Sequence[float]

    @property
    def label(self) -> str:
        return SIGNAL_LABELS[self.signal][0]

    @property
    def help(self) -> str:
        return SIGNAL_LABELS[self.signal][1]

    @property
    def value_text(self) -> str:
        return _format(self.signal, self.value)

    @property
    def baseline_text(self) -> str:
        return _format(self.signal, self.baseline)

    @property
    def change_text(self) -> str:
        """The deviation the level was read from (drift.deviation), in words."""
        change = drift.deviation(self.signal, self.value, self.baseline)
        if change is None:
            return "—"
        word = CHANGE_WORDS[drift.DIRECTIONS[self.signal]]
        if drift.DIRECTIONS[self.signal] == "absolute":
            return f"{word} {change:.2f}"
        if change <= 0:
            return f"no {word}"
        return f"{word} {change:.0%}"

    @property
    def thresholds_text(self) -> str:
        watch, alert, investigate = (_threshold(self.signal, value) for value in self.thresholds)
        word = CHANGE_WORDS[drift.DIRECTIONS[self.signal]]
        return f"{word} ≥ {watch} watch, {alert} alert, {investigate} investigate"

    @property
    def pill(self) -> str:
        return pill(self.level)

    @property
    def level_label(self) -> str:
        return level_label(self.level)

    @property
    def bars(self) -> dict[str, Any]:
        """Two bars, session above baseline, on one scale: 0..1 for shares and distances,
        0..the larger of the two for the decision count."""
        top = 1.0
        if self.signal == "decisions":
            top = max(self.value or 0.0, self.baseline or 0.0) or 1.0
        scale = svg.Scale(0.0, top, 0.0, BAR_WIDTH, clamp=True)
        return {
            "width": BAR_WIDTH,
            "height": 2 * BAR_HEIGHT + 4,
            "bar_height": BAR_HEIGHT,
            "baseline_y": BAR_HEIGHT + 4,
            "session": svg.bar_length(self.value, scale),
            "baseline": svg.bar_length(self.baseline, scale),
            "title": f"{self.label}: this session {self.value_text}, baseline {self.baseline_text}",
        }


def signal_rows(report: DriftReport, thresholds: Mapping[str, Sequence[float]]) -> list[SignalRow]:
    rows = []
    for name in drift.SIGNALS:
        signal = report.signals.get(name) or {}
        rows.append(
            SignalRow(
                signal=name,
                value=signal.get("value"),
                baseline=signal.get("baseline"),
                level=signal.get("level", drift.INSUFFICIENT_BASELINE),
                thresholds=thresholds[name],
            )
        )
    return rows


@dataclass(frozen=True)
class SessionRow:
    summary: SessionSummary
    drift_level: str  # "" when the drift job has not judged it (yet)
    agent: str

    @property
    def decisions(self) -> int:
        """This agent's decisions in the session (the session may hold other agents' too)."""
        return self.summary.agent_decisions.get(self.agent, 0)

    @property
    def pill(self) -> str:
        return pill(self.drift_level)

    @property
    def level_label(self) -> str:
        return level_label(self.drift_level)

    @property
    def flows_url(self) -> str:
        return reverse("admin-flow-list") + "?" + urlencode({"session_id": self.summary.session_id})


def _link(request: HttpRequest, **changes: str | None) -> str:
    """This page's URL with some query parameters changed (None: removed)."""
    params: QueryDict = request.GET.copy()
    for name, value in changes.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = value
    query = params.urlencode()
    return request.path + (f"?{query}" if query else "")


def _agent(raw: str) -> str | None:
    try:
        return parse_agent(raw)
    except InvalidInput:
        return None


@operator_required
@require_safe
def agent_page(request: HttpRequest, agent: str) -> HttpResponse:
    """The agent page; an agent no flow and no drift report names renders the 404 page."""
    name = _agent(agent)
    rows: list[AgentRow] = agent_rows(name) if name else []
    if name is None or not rows:
        return render(request, "reasoning/agent_not_found.html", status=404)
    row = rows[0]
    errors: dict[str, str] = {}

    history = list(DriftReport.objects.filter(agent=name).order_by("-session_ended_at", "-id")[:REPORT_HISTORY])
    chosen_id = request.GET.get("report", "").strip()
    report = history[0] if history else None
    if chosen_id:
        report = next((item for item in history if item.session_id == chosen_id), None)
        if report is None:
            report = DriftReport.objects.filter(agent=name, session_id=chosen_id[:100]).first()
        if report is None:
            errors["report"] = "No drift report for that session: showing the latest."
            report = history[0] if history else None

    try:
        sessions_page = SessionPage.parse({"agent": name, "cursor": request.GET.get("cursor", "")})
    except InvalidInput:
        errors["cursor"] = "That page link is out of date: showing the newest sessions."
        sessions_page = SessionPage(agent=name)
    summaries, next_sessions = sessions_page.page(SESSIONS_PER_PAGE)
    levels = dict(
        DriftReport.objects.filter(agent=name, session_id__in=[s.session_id for s in summaries]).values_list(
            "session_id", "level"
        )
    )
    sessions = [SessionRow(summary, levels.get(summary.session_id, ""), name) for summary in summaries]

    since_raw = request.GET.get("since", "").strip()
    since: datetime | None = None
    try:
        since = review.parse_since(since_raw)
    except InvalidInput as exc:
        errors["since"] = f"since: {exc.detail}"
    review_page = None
    if "since" not in errors:
        review_cursor = request.GET.get("review_cursor", "").strip()
        try:
            review_page = services.read_agent_review(
                name, actor=actor_for(request), since=since, limit=REVIEW_DECISIONS, cursor=review_cursor
            )
        except InvalidInput:
            errors["review_cursor"] = "That page link is out of date: showing the newest decisions."
            review_page = services.read_agent_review(
                name, actor=actor_for(request), since=since, limit=REVIEW_DECISIONS
            )

    context = {
        "row": row,
        "report": report,
        "signals": signal_rows(report, settings.DRIFT_THRESHOLDS) if report else [],
        "report_pill": pill(report.level) if report else "",
        "report_level": level_label(report.level) if report else "",
        "history": [
            {
                "report": item,
                "pill": pill(item.level),
                "level": level_label(item.level),
                "url": _link(request, report=item.session_id),
                "current": report is not None and item.pk == report.pk,
            }
            for item in history
        ],
        "min_baseline": settings.DRIFT_MIN_BASELINE_SESSIONS,
        "window": settings.DRIFT_BASELINE_SESSIONS,
        "sessions": sessions,
        "newest_sessions_url": _link(request, cursor=None) if sessions_page.cursor else "",
        "older_sessions_url": _link(request, cursor=next_sessions) if next_sessions else "",
        "review": review_page,
        "since": since_raw,
        "newest_review_url": _link(request, review_cursor=None) if request.GET.get("review_cursor") else "",
        "older_review_url": (
            _link(request, review_cursor=review_page.next_cursor) if review_page and review_page.next_cursor else ""
        ),
        "errors": errors,
        "failures": queries.failures(name, FAILURE_TYPES),
        "failed_flows_url": reverse("admin-flow-list") + "?" + urlencode({"agent": name, "failed": "true"}),
    }
    return render(request, "reasoning/agent.html", context, status=400 if "since" in errors else 200)
