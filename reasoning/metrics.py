"""OpenTelemetry instruments, named and attributed as in the source system.

Instruments are created against the global meter provider; until one is configured
(``config.telemetry`` from ``OTEL_*``, or a test's in-memory reader) they are no-ops.
"""

from __future__ import annotations

from opentelemetry import metrics

_meter = metrics.get_meter("reasoning")

flows_started = _meter.create_counter("reasoning.flow.started", description="Flows opened")
flows_completed = _meter.create_counter("reasoning.flow.completed", description="Flows closed as completed")
flows_aborted = _meter.create_counter("reasoning.flow.aborted", description="Flows closed as aborted")
step_writes = _meter.create_counter("reasoning.step.writes", description="Steps written")
flow_latency_ms = _meter.create_histogram(
    "reasoning.flow.latency_ms", unit="ms", description="Time from flow open to close"
)


def step_count_bucket(count: int) -> str:
    if count == 0:
        return "0"
    if count <= 3:
        return "1-3"
    if count <= 7:
        return "4-7"
    if count <= 15:
        return "8-15"
    return "16+"


def record_flow_started(trigger_type: str) -> None:
    flows_started.add(1, {"trigger_type": trigger_type})


def record_step_written(kind: str, agent: str, count: int = 1) -> None:
    step_writes.add(count, {"step_kind": kind, "agent": agent})


def record_flow_closed(
    *,
    state: str,
    trigger_type: str,
    outcome_type: str,
    patient_safe_summary: bool | None,
    step_count: int,
    latency_ms: float,
) -> None:
    attributes = {
        "outcome_type": outcome_type,
        "trigger_type": trigger_type,
        "patient_safe_summary": str(patient_safe_summary).lower(),
    }
    counter = flows_completed if state == "completed" else flows_aborted
    counter.add(1, attributes)
    flow_latency_ms.record(
        latency_ms,
        {
            "outcome_type": outcome_type,
            "trigger_type": trigger_type,
            "step_count_bucket": step_count_bucket(step_count),
        },
    )
