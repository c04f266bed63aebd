"""Pydantic Logfire (its OpenAI instrumentation and Pydantic AI): where it differs from the GenAI names.

Logfire sends the GenAI names for models and tokens; its own attributes carry the request
and response payloads (``request_data``, ``response_data``), the formatted message
(``logfire.msg``, which may quote content) and Pydantic AI's agent and tool names
(``agent_name``, ``gen_ai.tool.name``). Content: payloads, messages, results, arguments.
"""

from __future__ import annotations

from reasoning.recording.conventions.base import Convention

CONVENTION = Convention(
    name="Pydantic Logfire",
    agent=("agent_name", "logfire.agent_name"),
    tool=("tool_name",),
    clear=frozenset(
        {
            "logfire.span_type",
            "logfire.msg_template",
            "logfire.level_num",
            "agent_name",
            "tool_name",
            "model_name",
            "async",
            "code.function",
            "code.lineno",
            "code.filepath",
            "code.namespace",
        }
    ),
    inputs=(
        "request_data",
        "all_messages_events",
        "tool_arguments",
        "prompt",
        "logfire.msg",
        "logfire.json_schema",
        "model_request_parameters",
        "pydantic_ai.all_messages",
        "gen_ai.tool.call.arguments",
    ),
    outputs=("response_data", "final_result", "tool_response", "result"),
)
