"""Drift per agent: how one session of an agent compares with the agent's own recent sessions.

Pure functions, no I/O (numpy for the statistics): callers gather one ``SessionStats`` per
completed session (``reasoning.agents.drift_queries``) and ``judge_agent`` turns an agent's sessions
into a ``Judgement`` per session. The contract, with the thresholds table, is
docs/outcomes-and-drift.md "Drift per agent".

Algorithm, for one session S of agent A:

1. The baseline is A's last ``window`` completed sessions that ended before S (sessions in
   order of ``(ended_at, session_id)``). Fewer than ``min_baseline`` of them: every signal,
   and the report, is ``insufficient_baseline``: no level is guessed from too little history.
2. Five signals of S, each with the baseline's value: the mean over the baseline sessions
   that have one (a session without judged outcomes has no accuracy, and is left out of the
   accuracy mean rather than counted as 0).
   ``confidence`` mean ``outcome_confidence`` of the session's flows; ``decisions`` its
   number of flows; ``escalation_rate`` escalated flows / flows; ``accuracy``
   correct / (correct + incorrect); ``decision_mix`` the Jensen-Shannon distance (base 2,
   so 0..1) between the session's trigger-type counts and the baseline's pooled counts
   (its baseline value: the mean distance of each baseline session to that pool).
3. Each signal's deviation: the relative change against the baseline mean in the direction
   that matters (``DIRECTIONS``), ``(value - baseline) / max(baseline, floor)``, rounded to 9
   decimals so that a change of exactly a threshold reaches it; ``decision_mix`` uses the
   distance itself. No value or no baseline value: no deviation (level ``normal``, or
   ``insufficient_baseline`` when the baseline has no value at all).
4. The level: ``investigate`` at or past the third threshold, ``alert`` the second,
   ``watch`` the first, else ``normal``. The report's level is the worst of its signals.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

SIGNALS = ("confidence", "decisions", "escalation_rate", "accuracy", "decision_mix")

INSUFFICIENT_BASELINE = "insufficient_baseline"
NORMAL = "normal"
WATCH = "watch"
ALERT = "alert"
INVESTIGATE = "investigate"
# Worst last. ``insufficient_baseline`` ranks lowest: it never outweighs a real level.
LEVELS = (INSUFFICIENT_BASELINE, NORMAL, WATCH, ALERT, INVESTIGATE)
_RANK = {level: rank for rank, level in enumerate(LEVELS)}

# Which change is drift: "down" a fall, "up" a rise, "either" both, "absolute" the value itself.
DIRECTIONS = {
    "confidence": "down",
    "decisions": "either",
    "escalation_rate": "up",
    "accuracy": "down",
    "decision_mix": "absolute",
}
# The smallest denominator of a relative change: a baseline of no escalations makes the first
# escalations a change measured against 5 percentage points, not a division by zero.
FLOORS = {"confidence": 0.05, "decisions": 1.0, "escalation_rate": 0.05, "accuracy": 0.05}
# (watch, alert, investigate) per signal; settings.DRIFT_THRESHOLDS overrides them.
DEFAULT_THRESHOLDS: dict[str, tuple[float, float, float]] = {
    "confidence": (0.10, 0.20, 0.35),
    "decisions": (0.25, 0.50, 0.75),
    "escalation_rate": (0.50, 0.75, 1.00),
    "accuracy": (0.10, 0.20, 0.30),
    "decision_mix": (0.20, 0.35, 0.50),
}
DEFAULT_WINDOW = 20
DEFAULT_MIN_BASELINE = 5


@dataclass(frozen=True)
class SessionStats:
    """What one completed session of an agent did: counts and a mean, no text."""

    session_id: str
    ended_at: datetime
    decisions: int
    mean_confidence: float | None = None
    escalations: int = 0
    correct: int = 0
    incorrect: int = 0
    trigger_counts: Mapping[str, int] | None = None

    @property
    def escalation_rate(self) -> float | None:
        return self.escalations / self.decisions if self.decisions > 0 else None

    @property
    def accuracy(self) -> float | None:
        judged = self.correct + self.incorrect
        return self.correct / judged if judged > 0 else None


@dataclass(frozen=True)
class Signal:
    value: float | None
    baseline: float | None
    level: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "baseline": self.baseline, "level": self.level}


@dataclass(frozen=True)
class Judgement:
    session: SessionStats
    baseline_sessions: int
    signals: dict[str, Signal]
    level: str

    def signals_dict(self) -> dict[str, dict[str, Any]]:
        return {name: signal.as_dict() for name, signal in self.signals.items()}


def level_for(deviation: float | None, thresholds: Sequence[float]) -> str:
    """The level a deviation reaches: each threshold is inclusive (``>=``)."""
    if deviation is None or math.isnan(deviation):
        return NORMAL
    watch, alert, investigate = thresholds
    if deviation >= investigate:
        return INVESTIGATE
    if deviation >= alert:
        return ALERT
    if deviation >= watch:
        return WATCH
    return NORMAL


def worst(levels: Sequence[str]) -> str:
    """The most severe level; ``insufficient_baseline`` only when nothing else is there."""
    return max(levels, key=_RANK.__getitem__, default=INSUFFICIENT_BASELINE)


def deviation(signal: str, value: float | None, baseline: float | None) -> float | None:
    """Step 3 of the module docstring: the signal's change that counts as drift (>= 0 is drift)."""
    if value is None or baseline is None:
        return None
    direction = DIRECTIONS[signal]
    if direction == "absolute":
        return round(float(value), 9)
    change = (value - baseline) / max(abs(baseline), FLOORS[signal])
    if direction == "down":
        change = -change
    elif direction == "either":
        change = abs(change)
    return round(float(change), 9)


def js_distance(p: Mapping[str, int], q: Mapping[str, int]) -> float:
    """Jensen-Shannon distance (the square root of the divergence, base 2: 0..1) of two count
    mixes. Proportional mixes are at 0, disjoint ones at 1; two empty mixes at 0, an empty
    and a non-empty one at 1."""
    keys = sorted(set(p) | set(q))
    a = np.array([[max(p.get(k, 0), 0) for k in keys]], dtype=float)
    b = np.array([max(q.get(k, 0), 0) for k in keys], dtype=float)
    return float(_js_rows(a, b)[0])


Matrix = np.ndarray[Any, np.dtype[np.float64]]


def _js_rows(rows: Matrix, q: Matrix) -> Matrix:
    """``js_distance`` of each row of count matrix ``rows`` (n x k) to the counts ``q`` (k)."""
    row_totals, q_total = rows.sum(axis=1), q.sum()
    empty = row_totals == 0
    if q_total == 0:
        return np.where(empty, 0.0, 1.0)
    a = rows / np.where(empty, 1.0, row_totals)[:, None]
    b = q / q_total
    m = (a + b) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_a = np.where(a > 0, a * np.log2(a / m), 0.0).sum(axis=1)
        kl_b = np.where(b > 0, b * np.log2(b / m), 0.0).sum(axis=1)
    distances = np.sqrt(np.maximum(0.5 * kl_a + 0.5 * kl_b, 0.0)).clip(0.0, 1.0)
    return np.where(empty, 1.0, distances)


_VALUE: dict[str, Callable[[SessionStats], float | None]] = {
    "confidence": lambda s: s.mean_confidence,
    "decisions": lambda s: float(s.decisions),
    "escalation_rate": lambda s: s.escalation_rate,
    "accuracy": lambda s: s.accuracy,
}


@dataclass(frozen=True)
class _Columns:
    """An agent's sessions (in order) as arrays: a column per signal (NaN for no value) and
    the trigger-type counts, so each session's baseline is a slice."""

    sessions: Sequence[SessionStats]
    values: dict[str, Matrix]
    counts: Matrix

    @classmethod
    def of(cls, sessions: Sequence[SessionStats]) -> _Columns:
        keys = sorted({key for s in sessions for key in (s.trigger_counts or {})})
        values = {
            name: np.array([np.nan if (v := value_of(s)) is None else v for s in sessions], dtype=float)
            for name, value_of in _VALUE.items()
        }
        counts = np.array(
            [[max((s.trigger_counts or {}).get(key, 0), 0) for key in keys] for s in sessions], dtype=float
        ).reshape(len(sessions), len(keys))
        return cls(sessions, values, counts)

    def judge(self, index: int, start: int, thresholds: Mapping[str, Sequence[float]], min_baseline: int) -> Judgement:
        """Steps 2-4 of the module docstring: session ``index`` against sessions ``start..index-1``."""
        size = index - start
        enough = size >= min_baseline
        signals: dict[str, Signal] = {}
        for name, column in self.values.items():
            value = None if math.isnan(column[index]) else float(column[index])
            base = _nanmean(column[start:index])
            if not enough or base is None:
                level = INSUFFICIENT_BASELINE
            else:
                level = level_for(deviation(name, value, base), thresholds[name])
            signals[name] = Signal(value, base, level)
        mix: float | None = None
        mix_base: float | None = None
        if size:
            pooled = self.counts[start:index].sum(axis=0)
            mix = float(_js_rows(self.counts[index : index + 1], pooled)[0])
            mix_base = float(np.mean(_js_rows(self.counts[start:index], pooled)))
        mix_level = level_for(deviation("decision_mix", mix, mix_base), thresholds["decision_mix"])
        signals["decision_mix"] = Signal(mix, mix_base, mix_level if enough else INSUFFICIENT_BASELINE)
        level = worst([s.level for s in signals.values()]) if enough else INSUFFICIENT_BASELINE
        return Judgement(session=self.sessions[index], baseline_sessions=size, signals=signals, level=level)


def _nanmean(values: Matrix) -> float | None:
    present = values[~np.isnan(values)]
    return float(np.mean(present)) if present.size else None


def judge(
    session: SessionStats,
    baseline: Sequence[SessionStats],
    *,
    thresholds: Mapping[str, Sequence[float]] = DEFAULT_THRESHOLDS,
    min_baseline: int = DEFAULT_MIN_BASELINE,
) -> Judgement:
    """Steps 2-4 of the module docstring for one session against its baseline sessions."""
    columns = _Columns.of([*baseline, session])
    return columns.judge(len(baseline), 0, thresholds, min_baseline)


def session_order(session: SessionStats) -> tuple[datetime, str]:
    return (session.ended_at, session.session_id)


def judge_agent(
    sessions: Sequence[SessionStats],
    *,
    only: set[str] | None = None,
    window: int = DEFAULT_WINDOW,
    min_baseline: int = DEFAULT_MIN_BASELINE,
    thresholds: Mapping[str, Sequence[float]] = DEFAULT_THRESHOLDS,
) -> list[Judgement]:
    """Judge each of one agent's completed sessions (those in ``only``, when given) against
    the ``window`` sessions that ended before it (step 1). In session order."""
    ordered = sorted(sessions, key=session_order)
    columns = _Columns.of(ordered)
    return [
        columns.judge(index, max(0, index - window), thresholds, min_baseline)
        for index, session in enumerate(ordered)
        if only is None or session.session_id in only
    ]


# --- How a level reads on a page ---------------------------------------------------------

# The drift level's pill (site.css); a level that judges nothing gets the neutral one.
PILLS = {
    "normal": "pill-healthy",
    "watch": "pill-warn",
    "alert": "pill-critical",
    "investigate": "pill-critical",
    "insufficient_baseline": "pill-neutral",
}


def level_label(level: str) -> str:
    return level.replace("_", " ")


def pill(level: str) -> str:
    return PILLS.get(level, "pill-neutral")
