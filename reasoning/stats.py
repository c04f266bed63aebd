"""Counts for operators. Raw chain-of-thought appears only as character counts."""

from __future__ import annotations

from typing import TypedDict

from django.db import connection
from django.db.models import Count

from reasoning.models import ReasoningFlow


class ReasoningContentStats(TypedDict):
    steps_with_reasoning: int
    purged: int
    chars_sum: int
    chars_p50: int | None
    chars_p95: int | None


class ReasoningStats(TypedDict):
    flows: dict[str, int]  # every flow state, zero included
    steps: int
    reasoning_content: ReasoningContentStats


def reasoning_stats() -> ReasoningStats:
    by_state = dict(ReasoningFlow.objects.values_list("flow_state").annotate(n=Count("id")).order_by())
    # One pass over steps: totals, and percentiles of raw reasoning length (never the text).
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*),
                   count(reasoning_content_chars),
                   count(reasoning_content_purged_at),
                   coalesce(sum(reasoning_content_chars), 0),
                   percentile_disc(0.5) WITHIN GROUP (ORDER BY reasoning_content_chars),
                   percentile_disc(0.95) WITHIN GROUP (ORDER BY reasoning_content_chars)
            FROM reasoning_step
            """
        )
        steps, with_reasoning, purged, chars_sum, p50, p95 = cursor.fetchone() or (0, 0, 0, 0, None, None)
    return {
        "flows": {state: by_state.get(state, 0) for state in ReasoningFlow.State.values},
        "steps": steps,
        "reasoning_content": {
            "steps_with_reasoning": with_reasoning,
            "purged": purged,
            "chars_sum": chars_sum,
            "chars_p50": p50,
            "chars_p95": p95,
        },
    }
