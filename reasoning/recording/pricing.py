"""What a model call cost, in US dollars: computed when a step is written and stored with it
(``ReasoningStep.cost_usd``), so a later change of prices never rewrites history.

Prices come from the maintained table of the ``genai-prices`` package (the prices in force on the
day of the call), or from ``REASONING_MODEL_PRICES`` for a model it does not know or that a
deployment pays otherwise (config/env.py ``env_prices``). A model no table knows has no cost:
``None``, shown as "—", never 0.

Token semantics are OpenTelemetry's (``gen_ai.usage.*``): ``cached_tokens`` are part of
``input_tokens`` (read from the provider's prompt cache, billed at the cache-read price), and
``reasoning_tokens`` are part of ``output_tokens`` (billed as output).

The usual price, one rate per million tokens for input, cached input and output, is computed here
in a few operations; any other shape (prices by tier of prompt length) goes through the package's
own calculation (about 25 µs a call; the flat rates take about 2 µs). ``tests/reasoning/recording/test_cost.py``
checks that both agree on every model of the table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils import timezone

if TYPE_CHECKING:
    from genai_prices.types import ModelPrice

logger = logging.getLogger(__name__)

MILLION = Decimal(1_000_000)
# Stored with ten decimal places (a token of the cheapest models costs ~1e-8 USD).
QUANTUM = Decimal("1e-10")


@dataclass(frozen=True)
class Rates:
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_read: Decimal

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> Decimal:
        uncached = input_tokens - cached_tokens
        return (uncached * self.input + cached_tokens * self.cache_read + output_tokens * self.output) / MILLION


def step_cost(
    model: str,
    input_tokens: int | None,
    output_tokens: int | None,
    cached_tokens: int | None = None,
    *,
    at: datetime | None = None,
) -> Decimal | None:
    """The cost of one model call, or None when the model is unknown or no tokens were reported."""
    if not model or (input_tokens is None and output_tokens is None):
        return None
    inputs = input_tokens or 0
    cached = min(cached_tokens or 0, inputs)
    outputs = output_tokens or 0
    price = price_of(model, (at or timezone.now()).date())
    if price is None:
        return None
    if isinstance(price, Rates):
        cost = price.cost(inputs, outputs, cached)
    else:
        try:
            from genai_prices import Usage  # loaded with the table (price_of)

            usage = Usage(input_tokens=inputs, output_tokens=outputs, cache_read_tokens=cached)
            cost = price.calc_price(usage)["total_price"]
        except Exception:  # a price the package cannot apply is no price, never a failed write
            logger.warning("no cost for model %r: its price could not be applied", model, exc_info=True)
            return None
    return cost.quantize(QUANTUM)


@lru_cache(maxsize=4096)
def price_of(model: str, day: date) -> Rates | ModelPrice | None:
    """The model's prices on ``day``: the settings' override, else the package's table."""
    name = model.strip().lower()
    override = settings.REASONING_MODEL_PRICES.get(name)
    if override is not None:
        return Rates(
            override["input_mtok"],
            override["output_mtok"],
            override.get("cache_read_mtok", override["input_mtok"]),
        )
    # Imported on the first price looked up, not with the write path: the package and its table
    # are ~25 MB and ~40,000 objects per process (more for the garbage collector to walk), which a
    # worker that never sees a model call should not carry.
    from genai_prices import data_snapshot

    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(name, None, None, None)
    except LookupError:
        return None
    moment = datetime(day.year, day.month, day.day, 12, tzinfo=timezone.get_current_timezone())
    prices = info.get_prices(moment)
    return rates_of(prices) or prices


def rates_of(prices: ModelPrice) -> Rates | None:
    """The three flat rates, when they are all a call of ours is billed: input and output (and
    cache reads) priced flat, not by tier. Prices of what steps never report (cache writes, audio,
    web searches) cost nothing here; a price per request does, so it goes to the package."""
    values = {key: value for key, value in vars(prices).items() if value is not None and not key.startswith("_")}
    if any(not key.endswith(("_mtok", "searches_kcount")) for key in values):
        return None  # per request, per image, …: the package's calculation knows them
    flat = {key: values.get(key) for key in ("input_mtok", "output_mtok", "cache_read_mtok")}
    if not all(value is None or isinstance(value, Decimal) for value in flat.values()):
        return None  # tiered by prompt length
    if flat["input_mtok"] is None or flat["output_mtok"] is None:
        return None
    return Rates(flat["input_mtok"], flat["output_mtok"], flat["cache_read_mtok"] or flat["input_mtok"])
