"""Replay: run each replay case through an agent and compare the flow it records with the corpus.

A case is one JSON file in ``reasoning/fixtures/replay-cases/`` (the schema is in
docs/evaluation.md, "Replay")::

    {"version": 1, "id": "<the file's name>", "description": "<optional text>",
     "trigger_type": "<a trigger type of the corpus>", "trigger_ref": "<label>",
     "agent": "<the signature's agent>", "input": "<the question or claim: synthetic text>",
     "expect": {"outcome": "<an allowed outcome of the signature>", "verdict": "<optional label>"}}

The expected step kinds are always the corpus signature's: a case cannot pin another sequence.
``load_cases`` validates every file against the corpus and raises ``InputError`` naming the file
and the key. A case never carries chain-of-thought: a ``reasoning_content`` key anywhere in it is
refused (judges and replays see answers, not reasoning).

Comparison (``compare``), in order:

1. The step kinds: a completed flow's must equal the signature's; an aborted flow's must be a
   prefix of them (an agent that gives up stops early). Otherwise ``sequence_drift``.
2. The outcome (``outcome_type``, or ``aborted``) must be the case's, and the verdict too when
   the case names one. Otherwise ``outcome_drift``.

An invoker that cannot produce an outcome raises ``InvokerError``: the case is ``error``, and it
counts as drifting (a gate that passes while the agent is unreachable checks nothing).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from reasoning.evaluation import FIXTURES, InputError
from reasoning.evaluation.signatures import ABORTED, LABEL, Corpus, Signature
from reasoning.summary_guard import MAX_SUMMARY_CHARS, check_summary

DEFAULT_CASES = FIXTURES / "replay-cases"
CASE_VERSION = 1
MAX_INPUT_CHARS = MAX_SUMMARY_CHARS  # the summary guard's calibrated length
MAX_LABEL_CHARS = 200
FORBIDDEN_KEY = "reasoning_content"
CASE_KEYS = frozenset({"version", "id", "description", "trigger_type", "trigger_ref", "agent", "input", "expect"})
EXPECT_KEYS = frozenset({"outcome", "verdict"})


class Status(StrEnum):
    MATCHED = "matched"
    SEQUENCE_DRIFT = "sequence_drift"
    OUTCOME_DRIFT = "outcome_drift"
    ERROR = "error"  # the invoker failed: nothing was compared


class InvokerError(Exception):
    """The invoker could not produce an outcome. The message says which call failed and how; it
    never quotes the case's input or anything the agent wrote."""


@dataclass(frozen=True)
class Expectation:
    step_kinds: tuple[str, ...]  # the corpus signature's
    outcome: str  # an outcome type, or ABORTED
    verdict: str | None = None  # checked only when given

    def as_json(self) -> dict[str, Any]:
        return {"step_kinds": list(self.step_kinds), "outcome": self.outcome, "verdict": self.verdict}


@dataclass(frozen=True)
class ReplayCase:
    id: str
    path: Path
    trigger_type: str
    trigger_ref: str
    agent: str
    input: str
    expect: Expectation
    description: str = ""

    def request(self, trace_id: str) -> dict[str, str]:
        """What an agent is given to replay the case: the trigger, the input and the trace id to
        record under; nothing else (no expectation, no reasoning)."""
        return {
            "case_id": self.id,
            "trigger_type": self.trigger_type,
            "trigger_ref": self.trigger_ref,
            "agent": self.agent,
            "input": self.input,
            "trace_id": trace_id,
        }


@dataclass(frozen=True)
class ReplayOutcome:
    """What the replayed flow shows: its step kinds in order, its outcome and verdict, its ids."""

    step_kinds: tuple[str, ...]
    outcome: str  # the outcome type, or ABORTED
    verdict: str | None = None  # the flow's outcome_metrics["verdict"], when it has one
    flow_id: str = ""
    trace_id: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "step_kinds": list(self.step_kinds),
            "outcome": self.outcome,
            "verdict": self.verdict,
            "flow_id": self.flow_id,
            "trace_id": self.trace_id,
        }


@dataclass(frozen=True)
class ReplayResult:
    case_id: str
    trigger_type: str
    status: Status
    expected: Expectation
    actual: ReplayOutcome | None = None  # None when the invoker failed
    error: str = ""  # the InvokerError's message

    @property
    def drifting(self) -> bool:
        return self.status is not Status.MATCHED

    def as_json(self) -> dict[str, Any]:
        return {
            "case_id": self.case_id,
            "trigger_type": self.trigger_type,
            "status": self.status.value,
            "expected": self.expected.as_json(),
            "actual": self.actual.as_json() if self.actual is not None else None,
            "error": self.error,
        }


class AgentInvoker(Protocol):
    """Runs one case through an agent and reports what the recorded flow shows."""

    name: str

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        """The replayed flow's outcome; raises ``InvokerError`` when there is none to compare."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ReplayReport:
    invoker: str
    threshold: float
    results: Sequence[ReplayResult] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def drifting(self) -> int:
        return sum(result.drifting for result in self.results)

    @property
    def drift_share(self) -> float:
        return self.drifting / self.total if self.total else 0.0

    @property
    def passed(self) -> bool:
        return self.drift_share <= self.threshold

    def as_json(self) -> dict[str, Any]:
        return {
            "invoker": self.invoker,
            "total": self.total,
            "drifting": self.drifting,
            "drift_share": round(self.drift_share, 4),
            "threshold": self.threshold,
            "passed": self.passed,
            "results": [result.as_json() for result in self.results],
        }


# --- comparison ---------------------------------------------------------------------------------
def compare(expected: Expectation, actual: ReplayOutcome) -> Status:
    kinds, wanted = actual.step_kinds, expected.step_kinds
    in_sequence = kinds == wanted[: len(kinds)] if actual.outcome == ABORTED else kinds == wanted
    if not in_sequence:
        return Status.SEQUENCE_DRIFT
    if actual.outcome != expected.outcome:
        return Status.OUTCOME_DRIFT
    if expected.verdict is not None and actual.verdict != expected.verdict:
        return Status.OUTCOME_DRIFT
    return Status.MATCHED


def replay_case(case: ReplayCase, invoker: AgentInvoker) -> ReplayResult:
    try:
        actual = invoker.invoke(case)
    except InvokerError as exc:
        return ReplayResult(case.id, case.trigger_type, Status.ERROR, case.expect, error=str(exc))
    return ReplayResult(case.id, case.trigger_type, compare(case.expect, actual), case.expect, actual)


def run_replay(cases: Iterable[ReplayCase], invoker: AgentInvoker, *, threshold: float = 0.0) -> ReplayReport:
    """Replay the cases one after another (an invoker records one flow at a time)."""
    return ReplayReport(invoker.name, threshold, tuple(replay_case(case, invoker) for case in cases))


# --- loading ------------------------------------------------------------------------------------
def load_cases(directory: str | Path | None, corpus: Corpus) -> list[ReplayCase]:
    """Every ``*.json`` file of ``directory`` (the fixture corpus by default), by file name."""
    where = Path(directory) if directory is not None else DEFAULT_CASES
    if not where.is_dir():
        raise InputError(f"{where}: not a directory of replay cases")
    paths = sorted(where.glob("*.json"))
    if not paths:
        raise InputError(f"{where}: no replay cases (*.json files)")
    return [load_case(path, corpus) for path in paths]


def load_case(path: Path, corpus: Corpus) -> ReplayCase:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the case: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: the case is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a case must be a JSON object")
    reasoning_at = _forbidden_key(data)
    if reasoning_at is not None:
        raise InputError(
            f"{path}: {reasoning_at}: a replay case never carries reasoning_content "
            "(replays see answers, not chain-of-thought)"
        )
    unknown = set(data) - CASE_KEYS
    if unknown:
        raise InputError(f"{path}: unknown key {sorted(unknown)[0]!r}")
    if data.get("version") != CASE_VERSION:
        raise InputError(f"{path}: version: expected {CASE_VERSION}, got {data.get('version')!r}")

    case_id = _label(path, data, "id")
    if case_id != path.stem:
        raise InputError(f"{path}: id: {case_id!r} is not the file's name ({path.stem!r})")
    trigger_type = _label(path, data, "trigger_type")
    signature = corpus.get(trigger_type)
    if signature is None:
        raise InputError(f"{path}: trigger_type: {trigger_type!r} has no signature in {corpus.path}")
    trigger_ref = _label(path, data, "trigger_ref")
    agent = _label(path, data, "agent")
    if agent != signature.agent:
        raise InputError(f"{path}: agent: {agent!r}, but the corpus's {trigger_type} agent is {signature.agent!r}")
    text = _input(path, data.get("input"))
    description = data.get("description", "")
    if not isinstance(description, str):
        raise InputError(f"{path}: description: expected a string")
    expect = _expectation(path, data.get("expect"), signature)
    return ReplayCase(case_id, path, trigger_type, trigger_ref, agent, text, expect, description)


def _forbidden_key(value: Any, at: str = "") -> str | None:
    """Where ``reasoning_content`` is a key, at any depth (``expect.reasoning_content``), else None."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{at}.{key}" if at else str(key)
            if key == FORBIDDEN_KEY:
                return where
            found = _forbidden_key(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _forbidden_key(item, f"{at}[{index}]")
            if found is not None:
                return found
    return None


def _label(path: Path, data: Mapping[str, Any], key: str, at: str = "") -> str:
    value = data.get(key)
    if not isinstance(value, str) or not LABEL.fullmatch(value) or len(value) > MAX_LABEL_CHARS:
        raise InputError(
            f"{path}: {at}{key}: expected a label (letters, digits and _.:/- only, "
            f"at most {MAX_LABEL_CHARS} characters)"
        )
    return value


def _input(path: Path, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{path}: input: expected the question or claim as a non-empty string")
    if len(value) > MAX_INPUT_CHARS:
        raise InputError(f"{path}: input: at most {MAX_INPUT_CHARS} characters")
    # Cases live in the repository: they are synthetic. The guard names its rule, never the text.
    guard = check_summary(value)
    if not guard.ok:
        raise InputError(
            f"{path}: input: looks like it holds PHI (summary guard rule {guard.rule}); use synthetic text"
        )
    return value


def _expectation(path: Path, value: Any, signature: Signature) -> Expectation:
    if not isinstance(value, dict):
        raise InputError(f"{path}: expect: expected an object with an outcome")
    unknown = set(value) - EXPECT_KEYS
    if unknown:
        name = sorted(unknown)[0]
        hint = " (the step kinds are the corpus's)" if name == "step_kinds" else ""
        raise InputError(f"{path}: expect: unknown key {name!r}{hint}")
    outcome = _label(path, value, "outcome", "expect.")
    if outcome not in signature.allowed_outcomes:
        allowed = ", ".join(sorted(signature.allowed_outcomes))
        raise InputError(
            f"{path}: expect.outcome: {outcome!r} is not an allowed outcome of {signature.trigger_type} ({allowed})"
        )
    verdict = _label(path, value, "verdict", "expect.") if "verdict" in value else None
    return Expectation(signature.step_kinds, outcome, verdict)
