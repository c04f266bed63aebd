"""Decision Dimensions: a six-axis radar of how much to trust a decision or a pathway.

Pure functions, no I/O: callers gather ``DimensionInputs`` (see ``reasoning.radar``)
and ``radar()`` turns them into six integers from 0 to 7. Five axes are good when high;
**Risk** is the caution axis (high = be careful). Buckets: 0-2 low, 3-4 medium, 5-7 high.

Formulas (``clip`` keeps a value in 0..7; ``log2`` is the base-2 logarithm):

Confidence
    ``round(7 * (min + mean) / 2)`` over the step confidences (0 with none). The
    weakest step weighs as much as the average one: a chain is as strong as its
    weakest link. Never falls when any confidence rises.
Coverage
    evidence points + breadth points. Evidence: 0 for no (or unknown) evidence hits,
    else ``min(4, floor(log2(hits)) + 1)`` (1 hit: 1, 2-3: 2, 4-7: 3, 8+: 4).
    Breadth: ``min(3, distinct step kinds - 1)``. Never falls as either grows.
Maturity
    family points + reuse points. Family (the trigger type's library maturity):
    sparse 0, growing 2, mature 4. Reuse: ``min(3, floor(log2(hit_count + 1)))``
    (0 hits: 0, 1-2: 1, 3-6: 2, 7+: 3). Never falls as hits grow or the family matures.
Recency
    ``7 - min(7, floor(log2(1 + age_days)))`` where age is the time since the last
    reuse, else since creation (today: 7, 1 day: 6, 3: 5, 7: 4, 15: 3, 31: 2, 63: 1,
    127+: 0). Never rises as age grows. Unknown age: 0.
Consensus
    The agents' verdicts (last verdict per agent): ``round(7 * agreement * support)``
    where agreement = share of agents agreeing with the most common verdict and
    support = ``min(1, agents / 3)``: one unopposed agent scores 2, two agreeing 5,
    three agreeing 7, two disagreeing 2. No verdicts: 0. Never falls when another
    agent joins the majority.
Risk (caution)
    ``clip(3 * demoted + 2 * guard_failed + min(2, low-confidence steps)
    + min(2, aborted siblings))``. Demoted: the pathway was retired by decay.
    Guard failed: a summary did not pass the patient-safety guard. Low-confidence
    steps: confidence below 0.5. Aborted siblings: aborted flows with the same
    trigger type and reference. Never falls as any of them grows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

AXES = ("confidence", "coverage", "maturity", "recency", "consensus", "risk")
MAX_SCORE = 7
LOW_CONFIDENCE = 0.5
FAMILY_POINTS = {"sparse": 0, "growing": 2, "mature": 4}

# What each audience reads on the chart. Risk is always the caution axis.
LABELS: dict[str, dict[str, str]] = {
    "operator": {
        "confidence": "Confidence",
        "coverage": "Coverage",
        "maturity": "Maturity",
        "recency": "Recency",
        "consensus": "Consensus",
        "risk": "Risk",
    },
    "patient": {
        "confidence": "How sure",
        "coverage": "Evidence breadth",
        "maturity": "Proven approach",
        "recency": "Up to date",
        "consensus": "Care team agreement",
        "risk": "Caution flags",
    },
}


@dataclass(frozen=True)
class DimensionInputs:
    step_confidences: Sequence[float | None] = ()  # None: a step without one
    evidence_hits: int | None = None
    distinct_step_kinds: int = 0
    hit_count: int = 0
    family_maturity: str = "sparse"
    age_days: float | None = None
    verdicts: Mapping[str, str] = field(default_factory=dict)  # agent -> verdict label
    aborted_siblings: int = 0
    demoted: bool = False
    low_confidence_steps: int = 0
    guard_failed: bool = False


def clip(value: float) -> int:
    return max(0, min(MAX_SCORE, int(value)))


def bucket(score: int) -> str:
    if score <= 2:
        return "low"
    if score <= 4:
        return "medium"
    return "high"


def confidence_score(confidences: Sequence[float | None]) -> int:
    # Out-of-range values (the API never stores them) are clamped to 0..1; NaN is no value.
    values = [min(1.0, max(0.0, float(c))) for c in confidences if c is not None and not math.isnan(c)]
    if not values:
        return 0
    return clip(round(MAX_SCORE * (min(values) + sum(values) / len(values)) / 2))


def coverage_score(evidence_hits: int | None, distinct_step_kinds: int) -> int:
    hits = max(0, evidence_hits or 0)
    evidence = 0 if hits == 0 else min(4, int(math.log2(hits)) + 1)
    breadth = min(3, max(0, distinct_step_kinds - 1))
    return clip(evidence + breadth)


def maturity_score(hit_count: int, family_maturity: str) -> int:
    reuse = min(3, int(math.log2(max(0, hit_count) + 1)))
    return clip(FAMILY_POINTS.get(family_maturity, 0) + reuse)


# float | int: compiled, a float parameter refuses an int (a huge one cannot become a float).
def recency_score(age_days: float | int | None) -> int:
    if age_days is None:
        return 0
    try:
        age = float(age_days)
    except OverflowError:
        return 0
    if math.isnan(age) or age == math.inf:
        return 0
    age = max(0.0, age)  # a future timestamp (clock skew) counts as now
    return clip(MAX_SCORE - min(MAX_SCORE, int(math.log2(1 + age))))


def consensus_score(verdicts: Mapping[str, str]) -> int:
    if not verdicts:
        return 0
    agents = len(verdicts)
    majority = Counter(verdicts.values()).most_common(1)[0][1]
    return clip(round(MAX_SCORE * (majority / agents) * min(1.0, agents / 3)))


def risk_score(*, demoted: bool, guard_failed: bool, low_confidence_steps: int, aborted_siblings: int) -> int:
    return clip(
        3 * demoted + 2 * guard_failed + min(2, max(0, low_confidence_steps)) + min(2, max(0, aborted_siblings))
    )


def radar(inputs: DimensionInputs) -> dict[str, dict[str, Any]]:
    """``{axis: {"score": 0..7, "bucket": "low|medium|high"}}`` for the six axes, in order."""
    scores = {
        "confidence": confidence_score(inputs.step_confidences),
        "coverage": coverage_score(inputs.evidence_hits, inputs.distinct_step_kinds),
        "maturity": maturity_score(inputs.hit_count, inputs.family_maturity),
        "recency": recency_score(inputs.age_days),
        "consensus": consensus_score(inputs.verdicts),
        "risk": risk_score(
            demoted=inputs.demoted,
            guard_failed=inputs.guard_failed,
            low_confidence_steps=inputs.low_confidence_steps,
            aborted_siblings=inputs.aborted_siblings,
        ),
    }
    return {axis: {"score": scores[axis], "bucket": bucket(scores[axis])} for axis in AXES}


def is_radar(value: Any) -> TypeGuard[dict[str, dict[str, Any]]]:
    """A stored snapshot has the six axes with integer scores (older rows may have none)."""
    return isinstance(value, dict) and all(
        isinstance(value.get(axis), dict)
        and isinstance(value[axis].get("score"), int)
        and not isinstance(value[axis]["score"], bool)
        for axis in AXES
    )


@dataclass(frozen=True)
class Comparison:
    """Two radars side by side: axes ranked by the size of their difference, and a pick."""

    deltas: list[dict[str, Any]]  # [{"axis", "a", "b", "delta"}] biggest |delta| first
    winner: str  # "a" or "b"
    reason: str


def _better_side(item: Mapping[str, Any]) -> str | None:
    """Which candidate an axis difference favours (lower is better on Risk)."""
    delta = -item["delta"] if item["axis"] == "risk" else item["delta"]
    return None if delta == 0 else "a" if delta > 0 else "b"


def advantage(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> int:
    """Positive when ``a`` is better: sum of positive-axis differences minus the risk difference."""
    total = 0
    for axis in AXES:
        diff = int(a[axis]["score"]) - int(b[axis]["score"])
        total += -diff if axis == "risk" else diff
    return total


def compare(
    a: Mapping[str, Mapping[str, Any]],
    b: Mapping[str, Mapping[str, Any]],
    *,
    labels: Mapping[str, str] = LABELS["operator"],
) -> Comparison:
    """Rank the axes by |a - b| and declare the dominant pick.

    The pick has the larger ``advantage`` (positive axes add, Risk subtracts). A tie
    goes to the lower Risk; if Risk ties too, to ``a`` (the higher-ranked candidate).
    """
    deltas = [{"axis": axis, "label": labels[axis], "a": a[axis]["score"], "b": b[axis]["score"]} for axis in AXES]
    for item in deltas:
        item["delta"] = item["a"] - item["b"]
    deltas.sort(key=lambda item: (-abs(item["delta"]), AXES.index(item["axis"])))
    net = advantage(a, b)
    risk_a, risk_b = a["risk"]["score"], b["risk"]["score"]
    if net != 0:
        winner = "a" if net > 0 else "b"
        leads = [labels[item["axis"]] for item in deltas if _better_side(item) == winner]
        reason = f"Stronger overall by {abs(net)} point{'s' if abs(net) != 1 else ''}"
        if leads:
            reason += f"; ahead on {', '.join(leads[:3])}"
        return Comparison(deltas, winner, reason + ".")
    if risk_a != risk_b:
        winner = "a" if risk_a < risk_b else "b"
        return Comparison(deltas, winner, f"Even overall; lower {labels['risk']} breaks the tie.")
    return Comparison(deltas, "a", "Even on every count; the higher-ranked candidate is kept.")
