"""Migration reasoning.0023 on a database that already holds steps with model usage: each stored
step is priced as of the day it was written and each flow gets its totals, as a deployment's
``manage.py migrate`` would leave them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg

from tests.test_partition_conversion import insert, manage, scratch

__all__ = ["scratch"]  # the fixture: a scratch database on the test server

WRITTEN = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def test_stored_steps_are_priced_and_their_flows_totalled(scratch: tuple[str, dict[str, Any], dict[str, str]]) -> None:
    _, conninfo, env = scratch
    manage(env, "migrate", "--no-input")
    manage(env, "migrate", "reasoning", "0022", "--no-input")  # back to before it
    priced, unpriced, plain = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        for flow_id in (priced, unpriced, plain):
            insert(
                conn,
                "reasoning_flow",
                {"id": flow_id, "created_at": WRITTEN, "trigger_type": "t", "flow_state": "completed"},
            )
        steps = [
            (priced, 1, "gpt-4o-2024-08-06", 100_000, 10_000),  # $0.25 + $0.10
            (priced, 2, "gpt-4o-mini", 1_000_000, 0),  # $0.15
            (priced, 3, "", None, None),
            (unpriced, 1, "clinic-llm-7b", 500, 50),
            (plain, 1, "", None, None),
        ]
        for flow_id, position, model, inputs, outputs in steps:
            insert(
                conn,
                "reasoning_step",
                {
                    "id": uuid.uuid4(),
                    "flow_id": flow_id,
                    "flow_created_at": WRITTEN,
                    "created_at": WRITTEN,
                    "position": position,
                    "kind": "llm_prompt",
                    "model": model,
                    "input_tokens": inputs,
                    "output_tokens": outputs,
                },
            )

    manage(env, "migrate", "reasoning", "0023", "--no-input")

    with psycopg.connect(**conninfo) as conn:
        costs = conn.execute(
            "SELECT flow_id, position, cost_usd FROM reasoning_step ORDER BY flow_id, position"
        ).fetchall()
        flows = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT id, input_tokens, output_tokens, cost_usd, model_names FROM reasoning_flow"
            ).fetchall()
        }
    by_step = {(flow_id, position): cost for flow_id, position, cost in costs}
    assert by_step[(priced, 1)] == Decimal("0.35")
    assert by_step[(priced, 2)] == Decimal("0.15")
    assert by_step[(priced, 3)] is None and by_step[(unpriced, 1)] is None and by_step[(plain, 1)] is None
    assert flows[priced] == (1_100_000, 10_000, Decimal("0.5"), ["gpt-4o-2024-08-06", "gpt-4o-mini"])
    assert flows[unpriced] == (500, 50, None, ["clinic-llm-7b"])  # no known price: no cost, not 0
    assert flows[plain] == (None, None, None, [])
