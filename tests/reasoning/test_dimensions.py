"""Decision Dimensions formulas (reasoning.dimensions): pure, no database.

Property tests (hypothesis) hold every axis to 0..7 with the right bucket for any input,
and to the monotonicity the module docstring promises; example tables pin the documented
anchor values; compare() is checked for ranking, the pick and its reason.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning.dimensions import (
    AXES,
    LABELS,
    MAX_SCORE,
    DimensionInputs,
    bucket,
    compare,
    confidence_score,
    consensus_score,
    coverage_score,
    is_radar,
    maturity_score,
    radar,
    recency_score,
    risk_score,
)

FAST = settings(max_examples=150, deadline=None)

# --- Strategies ----------------------------------------------------------------------------

ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
COUNTS = st.integers(min_value=-(10**30), max_value=10**30)
FAMILIES = st.one_of(st.sampled_from(["sparse", "growing", "mature"]), st.text(max_size=12))
VERDICT_LABELS = st.one_of(st.sampled_from(["promote", "reject", "hold"]), st.text(max_size=6))
VERDICTS = st.dictionaries(st.text(max_size=8), VERDICT_LABELS, max_size=8)

ANY_INPUTS = st.builds(
    DimensionInputs,
    step_confidences=st.lists(st.one_of(st.none(), ANY_FLOAT), max_size=12),
    evidence_hits=st.one_of(st.none(), COUNTS),
    distinct_step_kinds=COUNTS,
    hit_count=COUNTS,
    family_maturity=FAMILIES,
    age_days=st.one_of(st.none(), ANY_FLOAT),
    verdicts=VERDICTS,
    aborted_siblings=COUNTS,
    demoted=st.booleans(),
    low_confidence_steps=COUNTS,
    guard_failed=st.booleans(),
)


def expected_bucket(score: int) -> str:
    return "low" if score <= 2 else "medium" if score <= 4 else "high"


def scores(inputs: DimensionInputs) -> dict[str, int]:
    return {axis: value["score"] for axis, value in radar(inputs).items()}


# --- Range and buckets ------------------------------------------------------------------------


@FAST
@given(ANY_INPUTS)
def test_every_axis_is_an_int_from_0_to_7_with_its_bucket_for_any_input(inputs: DimensionInputs) -> None:
    result = radar(inputs)

    assert list(result) == list(AXES)
    for axis, value in result.items():
        assert set(value) == {"score", "bucket"}, axis
        score = value["score"]
        assert type(score) is int, (axis, score)
        assert 0 <= score <= MAX_SCORE, (axis, score)
        assert value["bucket"] == expected_bucket(score), (axis, value)
    assert is_radar(result)


@pytest.mark.parametrize(
    ("score", "expected"),
    [(0, "low"), (1, "low"), (2, "low"), (3, "medium"), (4, "medium"), (5, "high"), (6, "high"), (7, "high")],
)
def test_bucket_thresholds(score: int, expected: str) -> None:
    assert bucket(score) == expected


def test_no_inputs_scores_zero_on_every_axis() -> None:
    assert scores(DimensionInputs()) == dict.fromkeys(AXES, 0)


# --- Monotonicity -------------------------------------------------------------------------------


@FAST
@given(st.data(), st.lists(FINITE, min_size=1, max_size=8), st.lists(st.one_of(st.none(), ANY_FLOAT), max_size=3))
def test_confidence_never_falls_when_one_confidence_rises(
    data: st.DataObject, finite: list[float], ignored: list[float | None]
) -> None:
    # Finite values (in or out of 0..1) plus values the formula ignores (None, NaN, inf).
    before: list[Any] = [*finite, *ignored]
    index = data.draw(st.integers(min_value=0, max_value=len(finite) - 1), label="index")
    risen = data.draw(st.floats(min_value=finite[index], allow_nan=False, allow_infinity=False), label="risen")
    after = list(before)
    after[index] = risen

    assert confidence_score(after) >= confidence_score(before)


@FAST
@given(st.one_of(st.none(), COUNTS), COUNTS, st.integers(min_value=0, max_value=10**6), st.integers(0, 50))
def test_coverage_never_falls_as_hits_or_kinds_grow(hits: int | None, kinds: int, more_hits: int, more: int) -> None:
    grown_hits = (hits or 0) + more_hits
    base = coverage_score(hits, kinds)

    assert coverage_score(grown_hits, kinds) >= base
    assert coverage_score(hits, kinds + more) >= base
    assert coverage_score(grown_hits, kinds + more) >= base


@FAST
@given(COUNTS, st.integers(min_value=0, max_value=10**6), FAMILIES)
def test_maturity_never_falls_as_hits_grow(hits: int, more: int, family: str) -> None:
    assert maturity_score(hits + more, family) >= maturity_score(hits, family)


@FAST
@given(COUNTS)
def test_maturity_never_falls_as_the_family_goes_sparse_growing_mature(hits: int) -> None:
    sparse, growing, mature = (maturity_score(hits, family) for family in ("sparse", "growing", "mature"))

    assert sparse <= growing <= mature
    assert growing - sparse == 2
    assert mature - growing == 2


@FAST
@given(st.floats(min_value=-1e300, allow_nan=False), st.floats(min_value=-1e300, allow_nan=False))
def test_recency_never_rises_as_age_grows(first: float, second: float) -> None:
    younger, older = sorted((first, second))

    assert recency_score(older) <= recency_score(younger)


@FAST
@given(VERDICTS, st.text(max_size=8), st.data())
def test_consensus_never_falls_when_another_agent_joins_the_majority(
    verdicts: dict[str, str], newcomer: str, data: st.DataObject
) -> None:
    if newcomer in verdicts:
        newcomer = f"{newcomer}-new-{len(verdicts)}"
    counts = Counter(verdicts.values())
    if counts:
        top = max(counts.values())
        # Any of the (possibly tied) most common verdicts is "the majority".
        label = data.draw(st.sampled_from(sorted(v for v, n in counts.items() if n == top)), label="majority")
    else:
        label = data.draw(VERDICT_LABELS, label="first verdict")

    assert consensus_score({**verdicts, newcomer: label}) >= consensus_score(verdicts)


@FAST
@given(
    st.booleans(),
    st.booleans(),
    COUNTS,
    COUNTS,
    st.sampled_from(["demoted", "guard_failed", "low_confidence_steps", "aborted_siblings"]),
    st.integers(min_value=0, max_value=10**6),
)
def test_risk_never_falls_as_any_caution_input_grows(
    demoted: bool, guard_failed: bool, low: int, aborted: int, grows: str, by: int
) -> None:
    before: dict[str, Any] = {
        "demoted": demoted,
        "guard_failed": guard_failed,
        "low_confidence_steps": low,
        "aborted_siblings": aborted,
    }
    after = dict(before)
    after[grows] = True if isinstance(before[grows], bool) else before[grows] + by

    assert risk_score(**after) >= risk_score(**before)


@FAST
@given(ANY_INPUTS, ANY_INPUTS)
def test_each_axis_reads_only_its_own_inputs(first: DimensionInputs, second: DimensionInputs) -> None:
    # Swapping in the other inputs of one axis changes that axis alone.
    own = {
        "confidence": ("step_confidences",),
        "coverage": ("evidence_hits", "distinct_step_kinds"),
        "maturity": ("hit_count", "family_maturity"),
        "recency": ("age_days",),
        "consensus": ("verdicts",),
        "risk": ("aborted_siblings", "demoted", "low_confidence_steps", "guard_failed"),
    }
    base = scores(first)
    for axis, fields in own.items():
        mixed = scores(replace(first, **{name: getattr(second, name) for name in fields}))
        assert {a: s for a, s in mixed.items() if a != axis} == {a: s for a, s in base.items() if a != axis}, axis


# --- Documented anchor values ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("age_days", "expected"),
    [
        (0, 7),
        (0.99, 7),
        (1, 6),
        (2, 6),
        (3, 5),
        (6.99, 5),
        (7, 4),
        (15, 3),
        (31, 2),
        (63, 1),
        (126, 1),
        (127, 0),
        (10_000, 0),
        (-5, 7),  # a clock skew "in the future" counts as today
        (None, 0),  # unknown age
        (math.nan, 0),
        (math.inf, 0),
    ],
)
def test_recency_anchor_values(age_days: float | None, expected: int) -> None:
    assert recency_score(age_days) == expected


@pytest.mark.parametrize(
    ("hits", "expected"),
    [(None, 0), (0, 0), (-3, 0), (1, 1), (2, 2), (3, 2), (4, 3), (7, 3), (8, 4), (1000, 4), (10**40, 4)],
)
def test_coverage_evidence_points(hits: int | None, expected: int) -> None:
    # One step kind adds no breadth: the score is the evidence points alone.
    assert coverage_score(hits, 1) == expected


@pytest.mark.parametrize(("kinds", "expected"), [(-2, 0), (0, 0), (1, 0), (2, 1), (3, 2), (4, 3), (9, 3)])
def test_coverage_breadth_points(kinds: int, expected: int) -> None:
    assert coverage_score(None, kinds) == expected


def test_coverage_tops_out_at_7_with_8_hits_and_4_kinds() -> None:
    assert coverage_score(8, 4) == 7
    assert coverage_score(10**6, 100) == 7
    assert coverage_score(4, 3) == 5


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        pytest.param({}, 0, id="no_verdicts"),
        pytest.param({"critic": "promote"}, 2, id="one_unopposed_agent"),
        pytest.param({"critic": "promote", "researcher": "promote"}, 5, id="two_agreeing"),
        pytest.param({"a": "promote", "b": "promote", "c": "promote"}, 7, id="three_agreeing"),
        pytest.param({"critic": "promote", "researcher": "reject"}, 2, id="two_disagreeing"),
        pytest.param({"a": "promote", "b": "promote", "c": "reject"}, 5, id="two_against_one"),
        pytest.param({"a": "x", "b": "y", "c": "z"}, 2, id="three_all_different"),
        pytest.param({f"agent{i}": "promote" for i in range(6)}, 7, id="six_agreeing"),
    ],
)
def test_consensus_anchor_values(verdicts: dict[str, str], expected: int) -> None:
    assert consensus_score(verdicts) == expected


@pytest.mark.parametrize(
    ("family", "expected"), [("sparse", 0), ("growing", 2), ("mature", 4), ("unheard-of", 0), ("", 0)]
)
def test_maturity_family_points(family: str, expected: int) -> None:
    assert maturity_score(0, family) == expected


@pytest.mark.parametrize(
    ("hit_count", "expected"), [(-4, 0), (0, 0), (1, 1), (2, 1), (3, 2), (6, 2), (7, 3), (500, 3), (10**40, 3)]
)
def test_maturity_reuse_points(hit_count: int, expected: int) -> None:
    assert maturity_score(hit_count, "sparse") == expected


def test_maturity_tops_out_at_7() -> None:
    assert maturity_score(7, "mature") == 7


@pytest.mark.parametrize(
    ("confidences", "expected"),
    [
        pytest.param([], 0, id="none"),
        pytest.param([None, math.nan], 0, id="only_unknown"),
        pytest.param([1.0], 7, id="certain"),
        pytest.param([0.0], 0, id="zero"),
        pytest.param([0.5], 4, id="half"),  # round(3.5) = 4
        pytest.param([0.9, 0.9], 6, id="steady_0_9"),  # round(6.3)
        pytest.param([1.0, 0.0], 2, id="weakest_link_pulls_down"),  # round(7 * (0 + 0.5) / 2) = round(1.75)
        pytest.param([1.0, 1.0, 0.4], 4, id="one_weak_step"),  # round(7 * (0.4 + 0.8) / 2) = round(4.2)
        pytest.param([1.5, 2.0], 7, id="above_range_is_clamped"),
        pytest.param([-0.5], 0, id="below_range_is_clamped"),
    ],
)
def test_confidence_anchor_values(confidences: list[Any], expected: int) -> None:
    assert confidence_score(confidences) == expected


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        pytest.param({}, 0, id="nothing"),
        pytest.param({"demoted": True}, 3, id="demoted"),
        pytest.param({"guard_failed": True}, 2, id="guard_failed"),
        pytest.param({"low_confidence_steps": 1}, 1, id="one_low_step"),
        pytest.param({"low_confidence_steps": 9}, 2, id="low_steps_capped_at_2"),
        pytest.param({"aborted_siblings": 1}, 1, id="one_aborted_sibling"),
        pytest.param({"aborted_siblings": 40}, 2, id="aborted_capped_at_2"),
        pytest.param({"low_confidence_steps": -3, "aborted_siblings": -3}, 0, id="negative_counts"),
        pytest.param(
            {"demoted": True, "guard_failed": True, "low_confidence_steps": 2, "aborted_siblings": 2},
            7,
            id="everything_clipped_to_7",
        ),
    ],
)
def test_risk_anchor_values(inputs: dict[str, Any], expected: int) -> None:
    args = {"demoted": False, "guard_failed": False, "low_confidence_steps": 0, "aborted_siblings": 0, **inputs}
    assert risk_score(**args) == expected


def test_radar_wires_each_input_to_its_axis() -> None:
    inputs = DimensionInputs(
        step_confidences=[0.9, 0.9],
        evidence_hits=4,
        distinct_step_kinds=3,
        hit_count=3,
        family_maturity="growing",
        age_days=7,
        verdicts={"critic": "promote", "researcher": "promote"},
        aborted_siblings=1,
        demoted=False,
        low_confidence_steps=0,
        guard_failed=True,
    )

    assert radar(inputs) == {
        "confidence": {"score": 6, "bucket": "high"},
        "coverage": {"score": 5, "bucket": "high"},
        "maturity": {"score": 4, "bucket": "medium"},
        "recency": {"score": 4, "bucket": "medium"},
        "consensus": {"score": 5, "bucket": "high"},
        "risk": {"score": 3, "bucket": "medium"},
    }


# --- Infinities and huge values -------------------------------------------------------------


def test_confidence_does_not_fall_when_a_confidence_rises_to_or_from_infinity() -> None:
    assert confidence_score([0.0, math.inf]) >= confidence_score([0.0, 1.0])
    assert confidence_score([1.0, 0.0]) >= confidence_score([1.0, -math.inf])


def test_recency_does_not_rise_as_age_grows_from_minus_infinity() -> None:
    assert recency_score(0.0) <= recency_score(-math.inf)


def test_recency_of_a_huge_integer_age_is_0() -> None:
    assert recency_score(10**400) == 0


# --- is_radar ------------------------------------------------------------------------------------


def full_radar(**overrides: int) -> dict[str, dict[str, Any]]:
    values = {axis: overrides.get(axis, 3) for axis in AXES}
    return {axis: {"score": score, "bucket": bucket(score)} for axis, score in values.items()}


def test_is_radar_accepts_a_computed_radar() -> None:
    assert is_radar(radar(DimensionInputs()))
    assert is_radar(full_radar())


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="none"),
        pytest.param({}, id="empty"),
        pytest.param([], id="list"),
        pytest.param("radar", id="string"),
        pytest.param({axis: {"score": 3} for axis in AXES[:-1]}, id="missing_risk"),
        pytest.param({**full_radar(), "risk": {"bucket": "low"}}, id="axis_without_score"),
        pytest.param({**full_radar(), "risk": {"score": "3"}}, id="string_score"),
        pytest.param({**full_radar(), "risk": {"score": 3.0}}, id="float_score"),
        pytest.param({**full_radar(), "risk": 3}, id="axis_not_a_dict"),
        pytest.param([{"axis": a, "score": 3, "bucket": "medium"} for a in AXES], id="narrative_axes_list"),
    ],
)
def test_is_radar_rejects_anything_else(value: Any) -> None:
    assert not is_radar(value)


# --- compare() ----------------------------------------------------------------------------------

SCORE = st.integers(min_value=0, max_value=MAX_SCORE)
RADARS = st.builds(lambda values: full_radar(**dict(zip(AXES, values, strict=True))), st.tuples(*[SCORE] * 6))


def net_advantage(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> int:
    positive = sum(a[axis]["score"] - b[axis]["score"] for axis in AXES if axis != "risk")
    return int(positive - (a["risk"]["score"] - b["risk"]["score"]))


@FAST
@given(RADARS, RADARS)
def test_compare_ranks_deltas_by_size_ties_in_axis_order(a: dict[str, Any], b: dict[str, Any]) -> None:
    deltas = compare(a, b).deltas

    assert sorted(item["axis"] for item in deltas) == sorted(AXES)
    for item in deltas:
        assert item["a"] == a[item["axis"]]["score"]
        assert item["b"] == b[item["axis"]]["score"]
        assert item["delta"] == item["a"] - item["b"]
        assert item["label"] == LABELS["operator"][item["axis"]]
    for first, second in itertools.pairwise(deltas):
        assert abs(first["delta"]) >= abs(second["delta"])
        if abs(first["delta"]) == abs(second["delta"]):
            assert AXES.index(first["axis"]) < AXES.index(second["axis"])


@FAST
@given(RADARS, RADARS)
def test_compare_picks_the_larger_advantage_then_lower_risk_then_a(a: dict[str, Any], b: dict[str, Any]) -> None:
    net = net_advantage(a, b)
    risk_a, risk_b = a["risk"]["score"], b["risk"]["score"]
    expected = "a" if net > 0 else "b" if net < 0 else "b" if risk_b < risk_a else "a"

    result = compare(a, b)

    assert result.winner == expected
    assert result.reason.endswith(".")
    if net:
        assert result.reason.startswith(f"Stronger overall by {abs(net)} point")
    elif risk_a != risk_b:
        assert result.reason == "Even overall; lower Risk breaks the tie."
    else:
        assert result.reason == "Even on every count; the higher-ranked candidate is kept."


@FAST
@given(RADARS, RADARS)
def test_compare_is_symmetric_except_for_a_full_tie(a: dict[str, Any], b: dict[str, Any]) -> None:
    forward, backward = compare(a, b), compare(b, a)
    full_tie = net_advantage(a, b) == 0 and a["risk"]["score"] == b["risk"]["score"]

    if full_tie:
        assert forward.winner == backward.winner == "a"
    else:
        assert {forward.winner, backward.winner} == {"a", "b"}
        assert forward.reason == backward.reason


def test_compare_reason_names_up_to_three_leading_axes_biggest_first() -> None:
    a = full_radar(coverage=6, confidence=5, consensus=5, maturity=4, recency=2)
    b = full_radar()  # all 3

    result = compare(a, b)

    assert [item["axis"] for item in result.deltas] == [
        "coverage",
        "confidence",
        "consensus",
        "maturity",
        "recency",
        "risk",
    ]
    assert [item["delta"] for item in result.deltas] == [3, 2, 2, 1, -1, 0]
    assert result.winner == "a"
    # 3 + 2 + 2 + 1 - 1 = 7; Maturity also leads but only three are named.
    assert result.reason == "Stronger overall by 7 points; ahead on Coverage, Confidence, Consensus."


def test_compare_counts_risk_against_the_riskier_candidate() -> None:
    # a is 2 points ahead on Confidence but carries 3 more points of Risk.
    a = full_radar(confidence=5, risk=6)
    b = full_radar()

    result = compare(a, b)

    assert result.winner == "b"
    assert result.reason == "Stronger overall by 1 point; ahead on Risk."
    assert [item["axis"] for item in result.deltas[:2]] == ["risk", "confidence"]
    assert result.deltas[0]["delta"] == 3


def test_compare_tie_goes_to_the_lower_risk() -> None:
    # Net advantage 0: a +2 Confidence and +2 Risk.
    a = full_radar(confidence=5, risk=5)
    b = full_radar()

    assert compare(a, b).winner == "b"
    assert compare(b, a).winner == "a"
    assert compare(a, b).reason == "Even overall; lower Risk breaks the tie."


def test_compare_full_tie_keeps_a() -> None:
    a = full_radar(confidence=5, coverage=1)  # +2 and -2: net 0, same Risk
    b = full_radar()

    assert compare(a, b).winner == "a"
    assert compare(b, a).winner == "a"
    assert compare(b, b).winner == "a"
    assert compare(b, b).reason == "Even on every count; the higher-ranked candidate is kept."


def test_compare_speaks_the_audience_labels() -> None:
    patient = LABELS["patient"]
    a = full_radar(coverage=6)
    b = full_radar()

    result = compare(a, b, labels=patient)

    assert result.reason == "Stronger overall by 3 points; ahead on Evidence breadth."
    assert result.deltas[0]["label"] == "Evidence breadth"
    assert compare(full_radar(risk=4, recency=4), b, labels=patient).reason == (
        "Even overall; lower Caution flags breaks the tie."
    )
