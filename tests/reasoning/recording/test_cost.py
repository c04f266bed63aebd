"""Model, tokens and cost (issue 41, part 2): each step's cost is computed from the price table
(genai-prices) or the settings' override when it is written, stored with it, and summed on its
flow; an unknown model has no cost (never 0). Through the JSON routes and OTLP (the SDK's:
tests/sdk/test_usage.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from genai_prices import Usage, data_snapshot
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.recording.pricing import price_of, rates_of, step_cost
from tests import otlp
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

# gpt-4o's prices in the table: $2.5 in, $1.25 cached in, $10 out per million tokens.
GPT_4O = {"input": Decimal("2.5"), "cached": Decimal("1.25"), "output": Decimal("10")}


def gpt_4o_cost(inputs: int, outputs: int, cached: int = 0) -> Decimal:
    million = Decimal(1_000_000)
    return ((inputs - cached) * GPT_4O["input"] + cached * GPT_4O["cached"] + outputs * GPT_4O["output"]) / million


@pytest.fixture(autouse=True)
def fresh_prices() -> Iterator[None]:
    price_of.cache_clear()
    yield
    price_of.cache_clear()


def test_the_flat_rates_agree_with_the_packages_own_calculation_on_every_model_of_its_table() -> None:
    now = datetime.now(tz=UTC)
    compared = 0
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models:
            prices = model.get_prices(now)
            rates = rates_of(prices)
            if rates is None:
                continue
            for inputs, outputs, cached in ((1000, 200, 100), (123_456, 7_890, 0), (5, 0, 5), (0, 300, 0)):
                usage = Usage(input_tokens=inputs, output_tokens=outputs, cache_read_tokens=cached)
                expected = prices.calc_price(usage)["total_price"]
                assert abs(rates.cost(inputs, outputs, cached) - expected) < Decimal("1e-12"), (provider.id, model.id)
            compared += 1
    assert compared > 500  # most of the table is flat-priced


def test_a_tiered_price_goes_through_the_package() -> None:
    # gemini-1.5-pro doubles its prices past 128k input tokens.
    below = step_cost("gemini-1.5-pro", 100_000, 1_000)
    above = step_cost("gemini-1.5-pro", 200_000, 1_000)
    assert below == Decimal("0.13"), below
    assert above == Decimal("0.51"), above


def test_unknown_models_and_missing_tokens_have_no_cost() -> None:
    assert step_cost("clinic-llm-7b", 1000, 100) is None
    assert step_cost("gpt-4o", None, None) is None
    assert step_cost("", 1000, 100) is None
    assert step_cost("gpt-4o", 1000, None) == Decimal("0.0025")


def test_a_step_and_its_flow_carry_model_tokens_and_cost(agent: APIClient) -> None:
    flow = open_flow(agent)
    add_step(agent, flow["id"], kind="llm_prompt", model="gpt-4o", input_tokens=812, output_tokens=96, cached_tokens=12)
    add_step(agent, flow["id"], kind="llm_prompt", model="gpt-4o-mini", input_tokens=100, output_tokens=50)
    add_step(agent, flow["id"], kind="retrieval")  # no model: no cost, counts nothing

    first, second, third = ReasoningStep.objects.filter(flow_id=flow["id"]).order_by("position")
    assert first.cost_usd == gpt_4o_cost(812, 96, cached=12)
    assert second.cost_usd == Decimal("0.000045")  # 100 x $0.15 + 50 x $0.6 per million
    assert third.cost_usd is None
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert (stored.input_tokens, stored.output_tokens) == (912, 146)
    assert stored.cost_usd == first.cost_usd + second.cost_usd
    assert stored.model_names == ["gpt-4o", "gpt-4o-mini"]


def test_an_unknown_model_counts_its_tokens_but_no_cost(agent: APIClient) -> None:
    flow = open_flow(agent)
    add_step(agent, flow["id"], kind="llm_prompt", model="clinic-llm-7b", input_tokens=40, output_tokens=8)

    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert (stored.input_tokens, stored.output_tokens, stored.cost_usd) == (40, 8, None)
    assert stored.model_names == ["clinic-llm-7b"]
    assert ReasoningStep.objects.get(flow_id=flow["id"]).cost_usd is None


def test_a_replayed_batch_is_not_counted_twice(agent: APIClient) -> None:
    flow = open_flow(agent)
    body = {
        "steps": [
            {
                "id": "6a3a2c1e-0b1f-4c55-9a43-0f2f63c3b9a1",
                "kind": "llm_prompt",
                "agent": "researcher",
                "summary_text": "Asked the model",
                "model": "gpt-4o",
                "input_tokens": 1000,
                "output_tokens": 100,
            }
        ]
    }
    for _ in range(2):
        response = agent.post(f"/api/reasoning/flows/{flow['id']}/steps/batch", body, format="json")
        assert response.status_code in (200, 201), response.content

    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert (stored.input_tokens, stored.output_tokens, stored.cost_usd) == (1000, 100, gpt_4o_cost(1000, 100))


def test_a_private_models_price_comes_from_the_settings_and_a_later_change_rewrites_nothing(
    agent: APIClient, settings: Settings
) -> None:
    settings.REASONING_MODEL_PRICES = {"clinic-llm-7b": {"input_mtok": Decimal("0.2"), "output_mtok": Decimal("0.6")}}
    flow = open_flow(agent)
    add_step(agent, flow["id"], kind="llm_prompt", model="Clinic-LLM-7B", input_tokens=1_000_000, output_tokens=500_000)
    assert ReasoningFlow.objects.get(pk=flow["id"]).cost_usd == Decimal("0.5")

    settings.REASONING_MODEL_PRICES = {"clinic-llm-7b": {"input_mtok": Decimal("9"), "output_mtok": Decimal("9")}}
    price_of.cache_clear()
    add_step(agent, flow["id"], kind="llm_prompt", model="clinic-llm-7b", input_tokens=1_000_000, output_tokens=0)

    first, second = ReasoningStep.objects.filter(flow_id=flow["id"]).order_by("position")
    assert (first.cost_usd, second.cost_usd) == (Decimal("0.5"), Decimal("9"))  # the first keeps its price
    assert ReasoningFlow.objects.get(pk=flow["id"]).cost_usd == Decimal("9.5")


def test_an_otlp_model_call_is_priced_by_its_dated_model_name(agent: APIClient) -> None:
    root = otlp.span(
        "invoke_agent triage", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage"}
    )
    call = otlp.child(
        "chat gpt-4o",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 96,
        },
    )
    response = agent.post(
        "/v1/traces", otlp.protobuf_body(otlp.request(root, call)), content_type="application/x-protobuf"
    )
    assert response.status_code == 200, response.content

    flow = ReasoningFlow.objects.get()
    assert (flow.model_names, flow.input_tokens, flow.output_tokens) == (["gpt-4o-2024-08-06"], 812, 96)
    assert flow.cost_usd == gpt_4o_cost(812, 96)
