"""Golden-signature comparison: each flow of a raw export against its trigger type's signature.

Per flow, one status (docs/evaluation.md, "## Golden signatures and reasoning_signature_check"):

1. ``skipped``: the corpus has no signature for the flow's trigger type;
2. ``sequence_drift``: its step kinds differ from the signature's ``step_kinds`` (an aborted
   flow's need only be a prefix of them: an agent that gives up stops early, as
   ``reasoning_replay`` reads it). This wins when the outcome differs too: a flow that took
   another path is reported once, for its path;
3. ``outcome_drift``: its outcome (``aborted`` for an aborted flow, else its outcome type) is
   not in ``allowed_outcomes``;
4. ``matched`` otherwise.

The share of drifting flows is drifting / (flows - skipped), and 0 when every flow was skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reasoning.evaluation.rows import FlowRow
from reasoning.evaluation.signatures import ABORTED, Corpus, Signature


class Status(StrEnum):
    MATCHED = "matched"
    SEQUENCE_DRIFT = "sequence_drift"
    OUTCOME_DRIFT = "outcome_drift"
    SKIPPED = "skipped"


DRIFTS = frozenset({Status.SEQUENCE_DRIFT, Status.OUTCOME_DRIFT})


@dataclass(frozen=True)
class Result:
    flow_id: str
    trigger_type: str
    status: Status
    kinds: tuple[str, ...]
    outcome: str
    signature: Signature | None  # None when skipped

    @property
    def outcome_allowed(self) -> bool:
        return self.signature is not None and self.outcome in self.signature.allowed_outcomes

    def text(self) -> str:
        """One line; every value in it is a uuid or a label."""
        line = f"{self.status:<14}  flow {self.flow_id}  {self.trigger_type}"
        if self.signature is None:
            return f"{line}  (no signature for this trigger type)"
        allowed = ", ".join(sorted(self.signature.allowed_outcomes))
        if self.status == Status.SEQUENCE_DRIFT:
            line += f"  expected {_path(self.signature.step_kinds)}, got {_path(self.kinds)}"
            if not self.outcome_allowed:
                line += f"; outcome {self.outcome or '(none)'} also not in [{allowed}]"
        elif self.status == Status.OUTCOME_DRIFT:
            line += f"  outcome {self.outcome or '(none)'} not in [{allowed}]"
        return line

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"flow_id": self.flow_id, "trigger_type": self.trigger_type, "status": str(self.status)}
        if self.signature is not None:
            data |= {
                "kinds": list(self.kinds),
                "expected_kinds": list(self.signature.step_kinds),
                "outcome": self.outcome,
                "allowed_outcomes": sorted(self.signature.allowed_outcomes),
            }
        return data


def _path(kinds: tuple[str, ...]) -> str:
    return " → ".join(kinds) if kinds else "(no steps)"


def _path_matches(flow: FlowRow, signature: Signature) -> bool:
    if flow.outcome == ABORTED:
        return flow.kinds == signature.step_kinds[: len(flow.kinds)]
    return flow.kinds == signature.step_kinds


def compare_flow(flow: FlowRow, corpus: Corpus) -> Result:
    signature = corpus.get(flow.trigger_type)
    if signature is None:
        status = Status.SKIPPED
    elif not _path_matches(flow, signature):
        status = Status.SEQUENCE_DRIFT
    elif flow.outcome not in signature.allowed_outcomes:
        status = Status.OUTCOME_DRIFT
    else:
        status = Status.MATCHED
    return Result(flow.flow_id, flow.trigger_type, status, flow.kinds, flow.outcome, signature)


@dataclass(frozen=True)
class DriftReport:
    results: tuple[Result, ...]
    threshold: float

    def count(self, *statuses: Status) -> int:
        return sum(result.status in statuses for result in self.results)

    @property
    def checked(self) -> int:
        return len(self.results) - self.count(Status.SKIPPED)

    @property
    def drifting(self) -> int:
        return self.count(*DRIFTS)

    @property
    def share(self) -> float:
        return self.drifting / self.checked if self.checked else 0.0

    @property
    def passed(self) -> bool:
        return self.share <= self.threshold

    def by_trigger_type(self) -> dict[str, dict[str, int]]:
        """``{trigger_type: {"total", "drifting", "skipped"}}``, the trigger types sorted."""
        counts: dict[str, dict[str, int]] = {}
        for result in sorted(self.results, key=lambda r: r.trigger_type):
            entry = counts.setdefault(result.trigger_type, {"total": 0, "drifting": 0, "skipped": 0})
            entry["total"] += 1
            entry["drifting"] += result.status in DRIFTS
            entry["skipped"] += result.status == Status.SKIPPED
        return counts

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict}: {self.drifting} of {self.checked} checked flow(s) drifting"
            f" (share {self.share:.3f}, threshold {self.threshold:.3f});"
            f" {self.count(Status.MATCHED)} matched, {self.count(Status.SEQUENCE_DRIFT)} sequence_drift,"
            f" {self.count(Status.OUTCOME_DRIFT)} outcome_drift, {self.count(Status.SKIPPED)} skipped"
        )

    def text(self) -> str:
        return "\n".join([*(result.text() for result in self.results), self.summary()])

    def json(self) -> str:
        return json.dumps(
            {
                "verdict": "PASS" if self.passed else "FAIL",
                "flows": len(self.results),
                "checked": self.checked,
                "drifting": self.drifting,
                "skipped": self.count(Status.SKIPPED),
                "share": self.share,
                "threshold": self.threshold,
                "by_trigger_type": self.by_trigger_type(),
                "results": [result.as_dict() for result in self.results],
            }
        )


def compare(flows: Iterable[FlowRow], corpus: Corpus, threshold: float = 0.0) -> DriftReport:
    return DriftReport(tuple(compare_flow(flow, corpus) for flow in flows), threshold)
