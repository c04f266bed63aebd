"""Counts for operators. Raw chain-of-thought appears only as character counts."""

from __future__ import annotations

from typing import TypedDict

from django.db.models import Count

from core.replica import reading_connection
from reasoning.models import ReasoningFlow


class ReasoningContentStats(TypedDict):
    steps_with_reasoning: int
    purged: int
    chars_sum: int
    chars_p50: int | None
    chars_p95: int | None


class AgentTokens(TypedDict):
    agent: str
    steps: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int


class TokenStats(TypedDict):
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    by_agent: list[AgentTokens]  # the agents that used the most tokens, most first


class ReasoningStats(TypedDict):
    flows: dict[str, int]  # every flow state, zero included
    steps: int
    reasoning_content: ReasoningContentStats
    tokens: TokenStats


TOP_AGENTS = 20


def reasoning_stats() -> ReasoningStats:
    by_state = dict(ReasoningFlow.objects.values_list("flow_state").annotate(n=Count("id")).order_by())
    # One pass over steps: totals, and percentiles of raw reasoning length (never the text).
    with reading_connection().cursor() as cursor:
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
        # Model usage by agent (steps that report it), the heaviest first.
        cursor.execute(
            """
            SELECT agent, count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                   coalesce(sum(reasoning_tokens), 0)
            FROM reasoning_step
            WHERE input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR reasoning_tokens IS NOT NULL
            GROUP BY agent
            ORDER BY coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0) DESC, agent
            """
        )
        by_agent: list[AgentTokens] = [
            {"agent": agent, "steps": n, "input_tokens": i, "output_tokens": o, "reasoning_tokens": r}
            for agent, n, i, o, r in cursor.fetchall()
        ]
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
        "tokens": {
            "input_tokens": sum(row["input_tokens"] for row in by_agent),
            "output_tokens": sum(row["output_tokens"] for row in by_agent),
            "reasoning_tokens": sum(row["reasoning_tokens"] for row in by_agent),
            "by_agent": by_agent[:TOP_AGENTS],
        },
    }
