"""Load a few demonstration flows (idempotent: fixed ids, safe to run on every start)."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand

from reasoning.models import ReasoningFlow
from reasoning.services import add_steps, close_flow, start_flow

ACTOR = "system:demo"
NAMESPACE = uuid.UUID("6f1d2c3e-8a4b-4c5d-9e6f-7a8b9c0d1e2f")


def demo_id(name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, name)


def _step(name: str, kind: str, agent: str, summary: str, confidence: float, **extra: Any) -> dict[str, Any]:
    return {
        "id": demo_id(name),
        "kind": kind,
        "agent": agent,
        "summary_text": summary,
        "confidence": confidence,
        "latency_ms": 40 + len(summary),
        **extra,
    }


DEMO_FLOWS: list[dict[str, Any]] = [
    {
        "flow": {
            "id": demo_id("researcher"),
            "trigger_type": "user_question",
            "trigger_ref": "demo/question/1",
            "trigger_summary": "Asked whether a change in blood pressure medication is needed",
            "agent": "researcher",
            "trace_id": "demo-trace-researcher",
        },
        "steps": [
            _step(
                "r1",
                "retrieval",
                "researcher",
                "Retrieved recent readings and current guidelines",
                0.96,
                llm_call_log_ref="demo-llm-1",
            ),
            _step(
                "r2",
                "llm_prompt",
                "researcher",
                "Compared the readings with guideline targets",
                0.93,
                parent_step_id=demo_id("r1"),
                llm_call_log_ref="demo-llm-2",
            ),
            _step(
                "r3",
                "verdict",
                "researcher",
                "Concluded a follow-up visit is the right next step",
                0.91,
                parent_step_id=demo_id("r2"),
                memory_claim_ref="demo-claim-1",
            ),
        ],
        "close": {
            "state": "completed",
            "outcome_type": "recommendation_delivered",
            "outcome_summary": "Recommended a follow-up visit with the care team",
        },
    },
    {
        "flow": {
            "id": demo_id("critic"),
            "trigger_type": "claim_review",
            "trigger_ref": "demo/claim/7",
            "trigger_summary": "Checked a drafted claim against the evidence graph",
            "agent": "critic",
            "trace_id": "demo-trace-critic",
        },
        "steps": [
            _step(
                "c1",
                "graph_walk",
                "critic",
                "Walked the evidence graph around the claim",
                0.88,
                decision_graph_node_ref="demo-node-3",
            ),
            _step(
                "c2",
                "llm_prompt",
                "critic",
                "Asked whether the evidence supports the claim",
                0.84,
                parent_step_id=demo_id("c1"),
                llm_call_log_ref="demo-llm-3",
            ),
            _step(
                "c3",
                "verdict",
                "critic",
                "Found the evidence too thin and rejected the claim",
                0.8,
                parent_step_id=demo_id("c2"),
            ),
        ],
        "close": {
            "state": "completed",
            "outcome_type": "claim_rejected",
            "outcome_summary": "Rejected the claim for lack of evidence",
        },
    },
    {
        "flow": {
            "id": demo_id("correlator"),
            "trigger_type": "correlation_scan",
            "trigger_ref": "demo/scan/2",
            "trigger_summary": "Looked for patterns across two independent evidence branches",
            "agent": "correlator",
            "trace_id": "demo-trace-correlator",
        },
        "steps": [
            _step("k1", "retrieval", "correlator", "Gathered lab trends", 0.9),
            _step("k2", "retrieval", "correlator", "Gathered activity trends", 0.87),
            _step(
                "k3",
                "aggregation",
                "correlator",
                "Merged both branches into one view",
                0.85,
                parent_step_id=demo_id("k1"),
                extra_parent_ids=[demo_id("k2")],
            ),
        ],
        "close": None,  # left active: shows an in-progress flow
    },
    {
        "flow": {
            "id": demo_id("aborted"),
            "trigger_type": "user_question",
            "trigger_ref": "demo/question/2",
            "trigger_summary": "Asked about a recent lab result",
            "agent": "researcher",
            "trace_id": "demo-trace-aborted",
        },
        "steps": [_step("a1", "tool_call", "researcher", "Called the lab results service, which timed out", 0.2)],
        "close": {"state": "aborted", "abort_reason": "tool_error"},
    },
]


class Command(BaseCommand):
    help = "Load demonstration flows through the normal services (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        created = 0
        for demo in DEMO_FLOWS:
            flow, was_created = start_flow(demo["flow"], actor=ACTOR)
            created += was_created
            add_steps(flow.pk, demo["steps"], actor=ACTOR)
            close = demo["close"]
            if close and ReasoningFlow.objects.filter(pk=flow.pk).active().exists():
                close_flow(flow.pk, actor=ACTOR, **close)
        self.stdout.write(f"demo data: {len(DEMO_FLOWS)} flows ({created} new)")
