from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient


def test_step_written_to_flow_shows_in_admin_read(agent: APIClient, operator: APIClient, flow: dict[str, Any]) -> None:
    step = agent.post(
        f"/api/reasoning/flows/{flow['id']}/steps",
        {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved guidelines", "confidence": 0.9},
        format="json",
    )
    assert step.status_code == 201, step.content
    read = operator.get(f"/admin/v1/reasoning/flows/{flow['id']}")
    assert read.status_code == 200
    assert [s["id"] for s in read.json()["steps"]] == [step.json()["id"]]
