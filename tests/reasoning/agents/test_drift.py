"""Drift per agent (reasoning.drift): pure functions, no database.

Property tests (hypothesis) hold levels monotone in the deviation and in each signal's value,
the Jensen-Shannon distance symmetric, bounded and zero for the same mix, and an insufficient
baseline to raising no level at all; example tables pin the documented thresholds.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning.agents.drift import (
    ALERT,
    DEFAULT_THRESHOLDS,
    INSUFFICIENT_BASELINE,
    INVESTIGATE,
    LEVELS,
    NORMAL,
    SIGNALS,
    WATCH,
    SessionStats,
    deviation,
    js_distance,
    judge,
    judge_agent,
    level_for,
    worst,
)
from reasoning.models import DriftReport

FAST = settings(max_examples=200, deadline=None)
T0 = datetime(2026, 3, 1, tzinfo=UTC)

RANK = {level: rank for rank, level in enumerate(LEVELS)}
DEVIATIONS = st.floats(min_value=-10, max_value=10, allow_nan=False)
THRESHOLDS = st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), min_size=3, max_size=3).map(sorted)
MIXES = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(min_value=0, max_value=50))
NON_EMPTY_MIXES = MIXES.filter(lambda mix: sum(mix.values()) > 0)
CONFIDENCES = st.floats(min_value=0, max_value=1, allow_nan=False)


def stats(n: int = 0, **fields: object) -> SessionStats:
    """A session of 20 decisions of one trigger type, 0.8 confident, 2 escalations, 9 of 10 right."""
    values: dict[str, object] = {
        "session_id": f"s-{n}",
        "ended_at": T0 + timedelta(hours=n),
        "decisions": 20,
        "mean_confidence": 0.8,
        "escalations": 2,
        "correct": 9,
        "incorrect": 1,
        "trigger_counts": {"user_question": 20},
        **fields,
    }
    return SessionStats(**values)  # type: ignore[arg-type]


BASELINE = [stats(n) for n in range(20)]


def judged(**fields: object) -> dict[str, str]:
    judgement = judge(stats(99, **fields), BASELINE)
    return {name: signal.level for name, signal in judgement.signals.items()}


# --- Levels -------------------------------------------------------------------------------


@FAST
@given(DEVIATIONS, DEVIATIONS, THRESHOLDS)
def test_level_never_falls_as_the_deviation_grows(a: float, b: float, thresholds: list[float]) -> None:
    low, high = sorted((a, b))

    assert RANK[level_for(low, thresholds)] <= RANK[level_for(high, thresholds)]


@FAST
@given(THRESHOLDS)
def test_each_threshold_is_reached_exactly_at_its_value(thresholds: list[float]) -> None:
    watch, alert, investigate = thresholds
    # Equal thresholds collapse levels: the most severe of them wins.
    assert level_for(investigate, thresholds) == INVESTIGATE
    assert level_for(alert, thresholds) in ({ALERT} if alert < investigate else {INVESTIGATE})
    expected_watch = WATCH if watch < alert else (ALERT if alert < investigate else INVESTIGATE)
    assert level_for(watch, thresholds) == expected_watch
    if watch > 0:
        assert level_for(math.nextafter(watch, -math.inf), thresholds) == NORMAL


@pytest.mark.parametrize(
    ("value", "level"),
    [
        (0.0, NORMAL),
        (0.0999, NORMAL),
        (0.1, WATCH),
        (0.2, ALERT),
        (0.3499, ALERT),
        (0.35, INVESTIGATE),
        (3, INVESTIGATE),
    ],
)
def test_confidence_thresholds_table(value: float, level: str) -> None:
    assert level_for(value, DEFAULT_THRESHOLDS["confidence"]) == level


def test_no_deviation_is_normal() -> None:
    assert level_for(None, (0.1, 0.2, 0.3)) == NORMAL


def test_worst_level_outranks_the_others_and_insufficient_baseline_ranks_lowest() -> None:
    assert worst([NORMAL, INVESTIGATE, WATCH]) == INVESTIGATE
    assert worst([INSUFFICIENT_BASELINE, NORMAL]) == NORMAL
    assert worst([INSUFFICIENT_BASELINE]) == INSUFFICIENT_BASELINE


# --- The seed's examples and the documented table -----------------------------------------


def test_confidence_a_tenth_lower_than_usual_is_watch() -> None:
    # 0.8 -> 0.72 is a relative drop of 0.1 up to float error; deviations are rounded to reach it.
    assert judged(mean_confidence=0.72)["confidence"] == WATCH
    assert judged(mean_confidence=0.73)["confidence"] == NORMAL
    assert judged(mean_confidence=0.64)["confidence"] == ALERT
    assert judged(mean_confidence=0.52)["confidence"] == INVESTIGATE


def test_decision_count_half_of_normal_is_alert_and_double_is_investigate() -> None:
    assert judged(decisions=10, escalations=1)["decisions"] == ALERT
    assert judged(decisions=15, escalations=1)["decisions"] == WATCH
    assert judged(decisions=40, escalations=4)["decisions"] == INVESTIGATE
    assert judged(decisions=19, escalations=2)["decisions"] == NORMAL


def test_escalation_rate_doubled_is_investigate() -> None:
    assert judged(escalations=4)["escalation_rate"] == INVESTIGATE
    assert judged(escalations=3)["escalation_rate"] == WATCH
    # Fewer escalations than usual is not drift.
    assert judged(escalations=0)["escalation_rate"] == NORMAL


def test_first_escalations_after_a_baseline_of_none_are_measured_against_the_floor() -> None:
    baseline = [stats(n, escalations=0) for n in range(20)]

    judgement = judge(stats(99, escalations=1), baseline)

    # 1/20 = 0.05 over a floor of 0.05: a relative rise of 1.0.
    assert judgement.signals["escalation_rate"].baseline == 0.0
    assert judgement.signals["escalation_rate"].level == INVESTIGATE


def test_accuracy_drop_levels_and_no_judged_outcomes_means_no_value() -> None:
    assert judged(correct=8, incorrect=2)["accuracy"] == WATCH  # 0.9 -> 0.8: a drop of 0.111
    assert judged(correct=7, incorrect=3)["accuracy"] == ALERT  # 0.9 -> 0.7: a drop of 0.222
    judgement = judge(stats(99, correct=0, incorrect=0), BASELINE)
    assert judgement.signals["accuracy"].value is None
    assert judgement.signals["accuracy"].level == NORMAL


def test_a_new_decision_type_moves_the_mix() -> None:
    judgement = judge(stats(99, trigger_counts={"user_question": 10, "refill_request": 10}), BASELINE)

    mix = judgement.signals["decision_mix"]
    assert mix.baseline == 0.0
    assert mix.value is not None and 0.5 < mix.value < 0.6
    assert mix.level == INVESTIGATE
    assert judgement.level == INVESTIGATE


def test_a_session_like_its_baseline_is_normal_everywhere() -> None:
    judgement = judge(stats(99), BASELINE)

    assert {name: s.level for name, s in judgement.signals.items()} == dict.fromkeys(SIGNALS, NORMAL)
    assert judgement.level == NORMAL
    assert judgement.baseline_sessions == 20
    assert judgement.signals["confidence"].baseline == pytest.approx(0.8)


# --- Monotone in each signal's value ------------------------------------------------------


@FAST
@given(CONFIDENCES, CONFIDENCES, CONFIDENCES)
def test_lower_confidence_never_lowers_the_level(base: float, a: float, b: float) -> None:
    baseline = [stats(n, mean_confidence=base) for n in range(10)]
    low, high = sorted((a, b))

    at_low = judge(stats(99, mean_confidence=low), baseline).signals["confidence"].level
    at_high = judge(stats(99, mean_confidence=high), baseline).signals["confidence"].level

    assert RANK[at_low] >= RANK[at_high]


@FAST
@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20))
def test_more_escalations_never_lower_the_level(base: int, a: int, b: int) -> None:
    baseline = [stats(n, escalations=base) for n in range(10)]
    low, high = sorted((a, b))

    at_low = judge(stats(99, escalations=low), baseline).signals["escalation_rate"].level
    at_high = judge(stats(99, escalations=high), baseline).signals["escalation_rate"].level

    assert RANK[at_low] <= RANK[at_high]


@FAST
@given(st.integers(1, 200), st.integers(1, 200), st.integers(1, 200))
def test_decision_count_level_never_falls_further_from_the_baseline(base: int, a: int, b: int) -> None:
    near, far = sorted((a, b), key=lambda n: abs(n - base))
    if abs(near - base) == abs(far - base):
        return

    near_dev = deviation("decisions", near, base)
    far_dev = deviation("decisions", far, base)

    assert near_dev is not None and far_dev is not None
    assert (
        RANK[level_for(near_dev, DEFAULT_THRESHOLDS["decisions"])]
        <= RANK[level_for(far_dev, DEFAULT_THRESHOLDS["decisions"])]
    )


# --- Jensen-Shannon distance ---------------------------------------------------------------


@FAST
@given(MIXES, MIXES)
def test_js_distance_is_symmetric_and_between_0_and_1(p: dict[str, int], q: dict[str, int]) -> None:
    distance = js_distance(p, q)

    assert distance == js_distance(q, p)
    assert 0.0 <= distance <= 1.0


@FAST
@given(MIXES, st.integers(1, 7))
def test_js_distance_is_zero_for_the_same_mix_at_any_scale(p: dict[str, int], scale: int) -> None:
    assert js_distance(p, p) == 0.0
    assert js_distance(p, {key: count * scale for key, count in p.items()}) == pytest.approx(0.0, abs=1e-7)


def test_js_distance_is_one_for_disjoint_mixes_and_known_for_a_half_overlap() -> None:
    assert js_distance({"a": 3}, {"b": 5}) == 1.0
    # P = (1, 0), Q = (1/2, 1/2): JSD = 1 - (3/4) log2(4/3) ... = 0.3112781, distance its root.
    assert js_distance({"a": 2}, {"a": 1, "b": 1}) == pytest.approx(math.sqrt(0.31127812445913283))
    assert js_distance({}, {}) == 0.0
    assert js_distance({}, {"a": 1}) == 1.0


# --- Insufficient baseline ------------------------------------------------------------------


@FAST
@given(
    st.integers(0, 4),
    st.integers(1, 100),
    st.one_of(st.none(), CONFIDENCES),
    st.integers(0, 100),
    NON_EMPTY_MIXES,
)
def test_fewer_than_five_baseline_sessions_never_raise_a_level(
    sessions: int, decisions: int, confidence: float | None, escalations: int, mix: dict[str, int]
) -> None:
    baseline = [stats(n) for n in range(sessions)]
    session = stats(99, decisions=decisions, mean_confidence=confidence, escalations=escalations, trigger_counts=mix)

    judgement = judge(session, baseline)

    assert judgement.level == INSUFFICIENT_BASELINE
    assert {s.level for s in judgement.signals.values()} == {INSUFFICIENT_BASELINE}
    assert judgement.baseline_sessions == sessions


def test_the_minimum_baseline_is_configurable() -> None:
    baseline = [stats(n) for n in range(3)]

    assert judge(stats(99), baseline, min_baseline=3).level == NORMAL
    assert judge(stats(99), baseline, min_baseline=4).level == INSUFFICIENT_BASELINE


# --- An agent's sessions ----------------------------------------------------------------------


def test_each_session_is_judged_against_the_window_of_sessions_that_ended_before_it() -> None:
    sessions = [stats(n) for n in range(30)]

    judgements = judge_agent(list(reversed(sessions)), window=20)

    assert [j.session.session_id for j in judgements] == [s.session_id for s in sessions]
    assert [j.baseline_sessions for j in judgements] == [min(n, 20) for n in range(30)]
    assert [j.level for j in judgements[:5]] == [INSUFFICIENT_BASELINE] * 5
    assert judgements[5].level == NORMAL


def test_only_the_asked_sessions_are_judged_with_their_full_baseline() -> None:
    sessions = [stats(n) for n in range(10)]

    judgements = judge_agent(sessions, only={"s-9"}, window=4)

    assert [(j.session.session_id, j.baseline_sessions) for j in judgements] == [("s-9", 4)]


# --- Configuration agrees with the code ----------------------------------------------------------


def test_settings_defaults_are_the_documented_thresholds() -> None:
    assert django_settings.DRIFT_THRESHOLDS == DEFAULT_THRESHOLDS
    assert set(DEFAULT_THRESHOLDS) == set(SIGNALS)
    assert django_settings.DRIFT_BASELINE_SESSIONS == 20
    assert django_settings.DRIFT_MIN_BASELINE_SESSIONS == 5


def test_model_levels_are_the_drift_levels() -> None:
    assert set(DriftReport.Level.values) == set(LEVELS)
