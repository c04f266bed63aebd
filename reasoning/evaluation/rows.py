"""Raw export rows (docs/evaluation.md, "The raw export row") as the lint and drift checks read them.

``parse_row`` is the one place a row's shape is checked: it keeps the keys the checks read and
rejects a row without them with an ``InputError`` naming the file, the line and the key. The
message never repeats the offending value (it may be free text). Every string kept is a uuid or
a label, so a report can print it; summaries are never kept.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from core.labels import LABEL_PATTERN
from reasoning.evaluation import InputError
from reasoning.evaluation.jsonl import read_objects, source_name
from reasoning.evaluation.signatures import ABORTED
from reasoning.models import ReasoningFlow

RAW_FORMAT = "raw"
LABEL = re.compile(LABEL_PATTERN)
NOT_A_LABEL = "expected a label (letters, digits and _ . : / - only)"


@dataclass(frozen=True)
class StepRow:
    index: int  # 0-based, as the row's ``index``
    kind: str
    has_llm_call_log_ref: bool
    summary_hidden: bool


@dataclass(frozen=True)
class FlowRow:
    line: int
    flow_id: str
    trigger_type: str
    agent_set: tuple[str, ...]  # without empty names
    flow_state: str
    outcome_type: str
    aggregate_confidence: float | None
    steps: tuple[StepRow, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(step.kind for step in self.steps)

    @property
    def outcome(self) -> str:
        """What a signature's ``allowed_outcomes`` names: ``aborted`` or the outcome type."""
        return ABORTED if self.flow_state == ReasoningFlow.State.ABORTED else self.outcome_type


def read_rows(path: str | Path | None, *, stdin: IO[str] | None = None) -> Iterator[FlowRow]:
    """The rows of a raw export file (stdin when ``path`` is None or ``-``), in file order."""
    name = source_name(path)
    for line, obj in read_objects(path, stdin=stdin):
        yield parse_row(line, obj, name)


def parse_row(line: int, obj: dict[str, Any], name: str) -> FlowRow:
    at = f"{name}:{line}"
    if obj.get("format") != RAW_FORMAT:
        raise InputError(f'{at}: format: expected "raw" (a row of reasoning_export --format raw)')
    steps = _require(obj, "steps", list, "a list of steps", at)
    return FlowRow(
        line=line,
        flow_id=_uuid(obj, "flow_id", at),
        trigger_type=_label(obj, "trigger_type", at),
        agent_set=_agents(obj, at),
        flow_state=_label(obj, "flow_state", at),
        outcome_type=_label(obj, "outcome_type", at, empty_ok=True),
        aggregate_confidence=_confidence(obj, at),
        steps=tuple(_step(position, step, at) for position, step in enumerate(steps)),
    )


def _step(position: int, step: Any, at: str) -> StepRow:
    prefix = f"steps[{position}]."
    if not isinstance(step, dict):
        raise InputError(f"{at}: steps[{position}]: expected an object")
    index = step.get("index", position)
    if isinstance(index, bool) or index != position:
        raise InputError(f"{at}: {prefix}index: expected {position} (steps are listed in order)")
    hidden = step.get("summary_hidden", False)
    if not isinstance(hidden, bool):
        raise InputError(f"{at}: {prefix}summary_hidden: expected true or absent")
    return StepRow(
        index=position,
        kind=_label(step, "kind", at, prefix=prefix),
        has_llm_call_log_ref=_require(step, "has_llm_call_log_ref", bool, "true or false", at, prefix=prefix),
        summary_hidden=hidden,
    )


def _require(obj: dict[str, Any], key: str, kind: type, expected: str, at: str, *, prefix: str = "") -> Any:
    """``obj[key]`` when it is a ``kind`` (a bool is not a number here)."""
    if key not in obj:
        raise InputError(f"{at}: {prefix}{key}: missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise InputError(f"{at}: {prefix}{key}: expected {expected}")
    return value


def _label(obj: dict[str, Any], key: str, at: str, *, empty_ok: bool = False, prefix: str = "") -> str:
    value: str = _require(obj, key, str, "a string", at, prefix=prefix)
    if not LABEL.fullmatch(value) and not (empty_ok and value == ""):
        raise InputError(f"{at}: {prefix}{key}: {NOT_A_LABEL}")
    return value


def _uuid(obj: dict[str, Any], key: str, at: str) -> str:
    value: str = _require(obj, key, str, "a uuid", at)
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InputError(f"{at}: {key}: expected a uuid") from None


def _agents(obj: dict[str, Any], at: str) -> tuple[str, ...]:
    """The named agents: a step without an agent adds ``""`` to the export's set, kept out here."""
    agents: list[Any] = _require(obj, "agent_set", list, "a list of agents", at)
    if not all(isinstance(agent, str) and (agent == "" or LABEL.fullmatch(agent)) for agent in agents):
        raise InputError(f"{at}: agent_set: expected a list of labels")
    return tuple(agent for agent in agents if agent)


def _confidence(obj: dict[str, Any], at: str) -> float | None:
    if "aggregate_confidence" not in obj:
        raise InputError(f"{at}: aggregate_confidence: missing")
    value = obj["aggregate_confidence"]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{at}: aggregate_confidence: expected a number or null")
    return float(value)
