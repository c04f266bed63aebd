"""/dashboard/admin/reasoning/agents: one row per agent, for operators.

Each row: the agent's sessions, decisions (its flows), accuracy (correct / judged, as the
session summaries count it), mean outcome confidence, the level of its latest drift report
and a sparkline of accuracy and confidence over its last ``SPARK_SESSIONS`` sessions
(oldest first, ordered by their last flow). Read in one statement whatever the number of
agents or sessions (``agent_rows``); it groups every flow that has an agent, so its cost
grows with them, like the sessions list (docs/outcomes-and-drift.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_safe

from core import svg
from core.access import operator_required
from reasoning.agents import queries
from reasoning.agents.drift import pill
from reasoning.models import total_tokens

SPARK_SESSIONS = 20
SPARK_WIDTH = 120
SPARK_HEIGHT = 32
SPARK_PAD = 3  # keeps a value of 0 or 1 (and its stroke) inside the box


@dataclass(frozen=True)
class Sparkline:
    width: int
    height: int
    accuracy: str  # polyline points ("" when no session has a value)
    confidence: str
    title: str


@dataclass(frozen=True)
class AgentRow:
    agent: str
    sessions: int
    decisions: int
    correct: int
    incorrect: int
    mean_confidence: float | None
    drift_level: str  # "" when the agent has no drift report yet
    recent_accuracy: list[float | None]  # its last sessions, oldest first
    recent_confidence: list[float | None]
    input_tokens: int | None = None  # its flows' model usage; None when none reported any
    output_tokens: int | None = None
    cost_usd: float | None = None

    @property
    def tokens(self) -> int | None:
        return total_tokens(self.input_tokens, self.output_tokens)

    @property
    def accuracy(self) -> float | None:
        judged = self.correct + self.incorrect
        return self.correct / judged if judged else None

    @property
    def pill(self) -> str:
        return pill(self.drift_level)

    @property
    def drift_label(self) -> str:
        return self.drift_level.replace("_", " ")

    @property
    def url(self) -> str:
        return reverse("admin-agent-page", args=[self.agent])

    @property
    def flows_url(self) -> str:
        return reverse("admin-flow-list") + "?" + urlencode({"agent": self.agent})

    @property
    def sparkline(self) -> Sparkline:
        return sparkline(self.recent_accuracy, self.recent_confidence)


def agent_rows(agent: str = "") -> list[AgentRow]:
    """Every agent that has a flow, alphabetically, or only ``agent`` (one query)."""
    return [AgentRow(**facts) for facts in queries.agent_facts(agent, sessions=SPARK_SESSIONS)]


def spark_points(values: Sequence[float | None], *, width: int = SPARK_WIDTH, height: int = SPARK_HEIGHT) -> str:
    """SVG polyline points for values in 0..1 (``core.svg.sparkline``); 1 is at the top and a
    missing value is skipped (the line joins its neighbours)."""
    return svg.sparkline(values, width=width, height=height, pad=SPARK_PAD)


def sparkline(accuracy: Sequence[float | None], confidence: Sequence[float | None]) -> Sparkline:
    """The two lines of a row's sparkline, and a title that reads their values out."""

    def read(values: Sequence[float | None], fmt: str) -> str:
        return ", ".join("—" if v is None else format(v, fmt) for v in values)

    title = (
        f"Last {len(accuracy)} sessions, oldest first. Accuracy: {read(accuracy, '.0%')}. "
        f"Mean confidence: {read(confidence, '.2f')}."
        if accuracy
        else "No sessions yet."
    )
    return Sparkline(SPARK_WIDTH, SPARK_HEIGHT, spark_points(accuracy), spark_points(confidence), title)


@operator_required
@require_safe
def agents_page(request: HttpRequest) -> HttpResponse:
    """The agents page (not audited: counts, labels and levels only, like the sessions routes)."""
    return render(request, "reasoning/agents.html", {"agents": agent_rows(), "spark_sessions": SPARK_SESSIONS})
