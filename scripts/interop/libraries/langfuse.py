# /// script
# dependencies = [
#   "langfuse",
#   "openai",
#   "httpx",
# ]
# ///
"""The Langfuse Python SDK (OpenTelemetry based, OTLP/HTTP to ``<host>/api/public/otel/v1/traces``).

``@observe`` makes the agent (``as_type="agent"``) and tool (``as_type="tool"``) observations; the SDK's
OpenAI drop-in (``langfuse.openai.OpenAI``) makes the "generation" observations. Session and user ids are
set with ``propagate_attributes``. Scenarios: agent, chat, stream, tool-error, model-error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

# This file is named like the package: keep its folder off sys.path so ``import langfuse`` finds the SDK.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

import capture_client  # noqa: E402
import markers  # noqa: E402

os.environ["LANGFUSE_PUBLIC_KEY"] = "pk-lf-interop-fake"
os.environ["LANGFUSE_SECRET_KEY"] = "sk-lf-interop-fake"  # noqa: S105 (a fake key for the loopback collector)
os.environ["LANGFUSE_BASE_URL"] = capture_client.COLLECTOR
os.environ["LANGFUSE_HOST"] = capture_client.COLLECTOR
os.environ["LANGFUSE_TRACING_ENABLED"] = "true"
os.environ["LANGFUSE_MEDIA_UPLOAD_ENABLED"] = "false"
os.environ.setdefault("OTEL_SERVICE_NAME", "interop-langfuse")

from langfuse import get_client, observe, propagate_attributes  # noqa: E402
from langfuse.openai import OpenAI, openai  # noqa: E402

langfuse = get_client()
client = OpenAI(base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_guideline",
            "description": "Look up a guideline",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]


def flushed(name: str) -> None:
    langfuse.flush()
    capture_client.scenario(name)


@observe(name="lookup_guideline", as_type="tool")
def lookup_guideline(query: str) -> str:
    return f"{markers.TOOL_RESULT}: guideline for {query}"


@observe(name="lookup_guideline", as_type="tool")
def broken_lookup_guideline(query: str) -> str:
    raise RuntimeError(f"{markers.TOOL_ERROR}: guideline store unavailable for {query}")


@observe(name="triage-agent", as_type="agent")
def triage_agent(prompt: str, *, tool_fails: bool = False) -> str | None:
    with propagate_attributes(session_id="interop-session-1", user_id="interop-user-1"):
        messages: list[dict[str, object]] = [
            {"role": "system", "content": markers.SYSTEM},
            {"role": "user", "content": prompt},
        ]
        first = client.chat.completions.create(model=markers.MODEL, messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        tool = broken_lookup_guideline if tool_fails else lookup_guideline
        result = tool(**json.loads(call.function.arguments))
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": result},
        ]
        second = client.chat.completions.create(model=markers.MODEL, messages=messages, tools=TOOLS)
        return second.choices[0].message.content


flushed("agent")
triage_agent(markers.PROMPT)

flushed("chat")
client.chat.completions.create(
    model=markers.MODEL,
    messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.PROMPT}],
)

flushed("stream")
for _ in client.chat.completions.create(
    model=markers.MODEL,
    messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.PROMPT}],
    stream=True,
    stream_options={"include_usage": True},
):
    pass

flushed("tool-error")
with contextlib.suppress(RuntimeError):
    triage_agent(markers.PROMPT, tool_fails=True)

flushed("model-error")
with contextlib.suppress(openai.InternalServerError):
    client.chat.completions.create(
        model=markers.MODEL,
        messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.FAIL}],
    )

langfuse.flush()
langfuse.shutdown()
