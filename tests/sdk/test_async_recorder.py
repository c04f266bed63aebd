"""The asyncio recorder against a real server: many concurrent flows, each complete and in order."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from reasoning_flow_sdk import AsyncReasoningFlowRecorder, turn

from reasoning.models import ReasoningFlow, ReasoningStep
from tests.sdk.support import run_async

Recorder = Callable[..., AsyncReasoningFlowRecorder]


def test_a_hundred_concurrent_flows_arrive_complete_and_in_order(async_recorder_for: Recorder) -> None:
    recorder = async_recorder_for()

    async def agent(n: int) -> tuple[str, list[str]]:
        with turn(f"turn-{n:04d}"):
            async with recorder.flow("user_question", f"sdk/async/{n}", agent="researcher") as flow:
                ids = []
                for m in range(5):
                    ids.append(flow.step("retrieval", f"Reviewed source {m}", confidence=0.9).id)
                    await asyncio.sleep(0)  # the other 99 agents run between two steps
                flow.set_outcome("recommendation_delivered", outcome_metrics={"composite_k": 0.8})
            return flow.id, ids

    async def main() -> tuple[list[tuple[str, list[str]]], bool, dict[str, int]]:
        results = await asyncio.gather(*(agent(n) for n in range(100)))
        delivered = await recorder.flush(timeout=30)
        stats = recorder.stats()
        await recorder.close()
        return results, delivered, stats

    results, delivered, stats = run_async(main)

    assert delivered
    assert stats["sent"] == 500 and stats["sent_flows"] == 100
    for n, (flow_id, ids) in enumerate(results):
        flow = ReasoningFlow.objects.get(pk=flow_id)
        assert (flow.flow_state, flow.outcome_type, flow.trace_id) == (
            "completed",
            "recommendation_delivered",
            f"turn-{n:04d}",
        )
        order = ReasoningStep.objects.filter(flow_id=uuid.UUID(flow_id)).order_by("started_at", "position")
        assert [str(pk) for pk in order.values_list("pk", flat=True)] == ids


def test_an_exception_in_an_async_flow_aborts_it(async_recorder_for: Recorder) -> None:
    recorder = async_recorder_for()

    async def main() -> str:
        flow_id = ""
        with pytest.raises(TimeoutError):
            async with recorder.flow("user_question", "sdk/async/boom", agent="researcher") as flow:
                flow_id = flow.id
                raise TimeoutError
        await recorder.close(timeout=10)
        return flow_id

    flow_id = run_async(main)

    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert (flow.flow_state, flow.abort_reason) == ("aborted", "TimeoutError")
