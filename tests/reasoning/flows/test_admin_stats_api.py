"""``GET /admin/v1/reasoning/stats``: counts for operators, typed in OpenAPI, never text."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from tests.schema_check import assert_matches_schema

URL = "/admin/v1/reasoning/stats"
SECRET_THOUGHT = "thinking about the dose change in private"


def test_stats_count_flows_steps_and_reasoning_characters(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    for content in (SECRET_THOUGHT, None):
        body: dict[str, Any] = {"kind": "llm_prompt", "agent": "researcher", "summary_text": "Asked the model"}
        if content:
            body["reasoning_content"] = content
        assert agent.post(f"/api/reasoning/flows/{flow['id']}/steps", body, format="json").status_code == 201

    response = operator.get(URL)

    assert response.status_code == 200
    assert response.json() == {
        "flows": {"active": 1, "completed": 0, "aborted": 0},
        "steps": 2,
        "reasoning_content": {
            "steps_with_reasoning": 1,
            "purged": 0,
            "chars_sum": len(SECRET_THOUGHT),
            "chars_p50": len(SECRET_THOUGHT),
            "chars_p95": len(SECRET_THOUGHT),
        },
        "tokens": {"input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0, "by_agent": []},
    }
    assert SECRET_THOUGHT not in response.content.decode()


def test_stats_sum_model_usage_by_agent_heaviest_first(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    usage = [("researcher", 800, 90, 40), ("researcher", 200, 10, None), ("critic", 50, 5, None)]
    for name, used_in, used_out, thinking in usage:
        body = {
            "kind": "llm_prompt",
            "agent": name,
            "summary_text": "Asked the model",
            "model": "gpt-4o",
            "input_tokens": used_in,
            "output_tokens": used_out,
            "reasoning_tokens": thinking,
        }
        assert agent.post(f"/api/reasoning/flows/{flow['id']}/steps", body, format="json").status_code == 201
    plain = {"kind": "retrieval", "agent": "librarian", "summary_text": "Looked it up"}
    assert agent.post(f"/api/reasoning/flows/{flow['id']}/steps", plain, format="json").status_code == 201

    tokens = operator.get(URL).json()["tokens"]

    assert tokens == {
        "input_tokens": 1050,
        "output_tokens": 105,
        "reasoning_tokens": 40,
        "by_agent": [
            {"agent": "researcher", "steps": 2, "input_tokens": 1000, "output_tokens": 100, "reasoning_tokens": 40},
            {"agent": "critic", "steps": 1, "input_tokens": 50, "output_tokens": 5, "reasoning_tokens": 0},
        ],
    }


def test_stats_body_is_exactly_what_openapi_documents(operator: APIClient, flow: dict[str, Any]) -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    documented = schema["paths"][URL]["get"]["responses"]["200"]["content"]["application/json"]["schema"]

    assert "$ref" in documented  # a typed component, not a bare object
    assert_matches_schema(schema, documented, operator.get(URL).json())


def test_stats_without_a_token_is_401(anonymous: APIClient) -> None:
    assert anonymous.get(URL).status_code == 401


def test_stats_with_a_write_token_is_403(agent: APIClient) -> None:
    assert agent.get(URL).status_code == 403
