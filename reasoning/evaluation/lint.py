"""Quality lint of a raw export: per flow, the rules of docs/evaluation.md ("## reasoning_lint").

A finding names its rule, the flow and (for a step rule) the step index; it never quotes a
summary. A flow with no steps gets ``empty_steps`` only: the step rules need steps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from reasoning.evaluation.rows import FlowRow

RETRIEVAL = "retrieval"
VERDICT = "verdict"


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"


class Verdict(StrEnum):
    PASS = "PASS"  # noqa: S105  # verdicts, not passwords
    PASS_WITH_NOTES = "PASS-WITH-NOTES"  # noqa: S105
    FAIL = "FAIL"


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    flow_id: str
    step_index: int | None = None


@dataclass(frozen=True)
class Rule:
    name: str
    severity: Severity
    check: Callable[[FlowRow], Iterator[int | None]]  # yields a step index, or None for the flow


def _empty_steps(flow: FlowRow) -> Iterator[int | None]:
    if not flow.steps:
        yield None


def _verdict_before_retrieval(flow: FlowRow) -> Iterator[int | None]:
    # The first verdict comes before the first retrieval. A flow without retrieval steps (the
    # Critic's graph_walk → llm_prompt → verdict, the Correlator's aggregation → …) is not flagged.
    kinds = flow.kinds
    if VERDICT in kinds and RETRIEVAL in kinds and kinds.index(VERDICT) < kinds.index(RETRIEVAL):
        yield kinds.index(VERDICT)


def _no_llm_ref(flow: FlowRow) -> Iterator[int | None]:
    if not any(step.has_llm_call_log_ref for step in flow.steps):
        yield None


def _empty_agent_set(flow: FlowRow) -> Iterator[int | None]:
    if not flow.agent_set:
        yield None


def _confidence_exactly_one(flow: FlowRow) -> Iterator[int | None]:
    if flow.aggregate_confidence == 1.0:
        yield None


def _duplicate_consecutive_kind(flow: FlowRow) -> Iterator[int | None]:
    # One finding per repeat, at the second step of the pair.
    for previous, step in zip(flow.steps, flow.steps[1:], strict=False):
        if step.kind == previous.kind:
            yield step.index


def _summaries_mostly_hidden(flow: FlowRow) -> Iterator[int | None]:
    if sum(step.summary_hidden for step in flow.steps) * 2 > len(flow.steps):
        yield None


# In report order. Every rule but empty_steps looks only at flows with steps.
RULES = (
    Rule("empty_steps", Severity.CRITICAL, _empty_steps),
    Rule("verdict_before_retrieval", Severity.CRITICAL, _verdict_before_retrieval),
    Rule("no_llm_ref", Severity.CRITICAL, _no_llm_ref),
    Rule("empty_agent_set", Severity.WARNING, _empty_agent_set),
    Rule("confidence_exactly_one", Severity.WARNING, _confidence_exactly_one),
    Rule("duplicate_consecutive_kind", Severity.WARNING, _duplicate_consecutive_kind),
    Rule("summaries_mostly_hidden", Severity.WARNING, _summaries_mostly_hidden),
)


def lint_flow(flow: FlowRow) -> list[Finding]:
    rules = RULES if flow.steps else RULES[:1]
    return [
        Finding(rule.name, rule.severity, flow.flow_id, step_index) for rule in rules for step_index in rule.check(flow)
    ]


@dataclass(frozen=True)
class LintReport:
    flows: int
    findings: tuple[Finding, ...]

    def count(self, severity: Severity) -> int:
        return sum(finding.severity == severity for finding in self.findings)

    @property
    def verdict(self) -> Verdict:
        if self.count(Severity.CRITICAL):
            return Verdict.FAIL
        return Verdict.PASS_WITH_NOTES if self.findings else Verdict.PASS

    def text(self) -> str:
        """One line per finding, then the verdict line with the counts."""
        lines = [
            f"{f.severity:<8}  {f.rule:<26}  flow {f.flow_id}"
            + ("" if f.step_index is None else f"  step {f.step_index}")
            for f in self.findings
        ]
        critical, warnings = self.count(Severity.CRITICAL), self.count(Severity.WARNING)
        lines.append(f"{self.verdict}: {self.flows} flow(s), {critical} critical finding(s), {warnings} warning(s)")
        return "\n".join(lines)

    def json(self) -> str:
        return json.dumps(
            {
                "verdict": str(self.verdict),
                "flows": self.flows,
                "findings": [
                    {"rule": f.rule, "severity": str(f.severity), "flow_id": f.flow_id, "step_index": f.step_index}
                    for f in self.findings
                ],
            }
        )


def lint(flows: Iterable[FlowRow]) -> LintReport:
    count, findings = 0, []
    for flow in flows:
        count += 1
        findings.extend(lint_flow(flow))
    return LintReport(count, tuple(findings))
