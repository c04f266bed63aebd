"""A step's model usage, recorded through the SDK against the real server (issue 41, part 2):
the server prices it and sums it on the flow."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from reasoning_flow_sdk import ReasoningFlowRecorder

from reasoning.models import ReasoningFlow


def test_an_sdk_step_with_usage_is_priced(recorder_for: Callable[..., ReasoningFlowRecorder]) -> None:
    recorder = recorder_for()
    with recorder.flow("user_question", "sdk/cost/1", agent="triage-agent") as flow:
        flow.step("llm_prompt", "Asked the model", model="gpt-4o", input_tokens=2000, output_tokens=300)
    assert recorder.flush(timeout=30)

    stored = ReasoningFlow.objects.get(pk=flow.id)
    assert (stored.model_names, stored.input_tokens, stored.output_tokens) == (["gpt-4o"], 2000, 300)
    assert stored.cost_usd == Decimal("0.008")  # 2,000 x $2.5 + 300 x $10 per million
