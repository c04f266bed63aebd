"""The OpenAI client scenarios every client-level capture runs (imported by the capture scripts in
their throw-away virtualenvs, which hold ``openai``): chat, tool-call, stream, error, embeddings,
each a bare client call with no parent span, each announced to the receiver after ``flush``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import capture_client
import markers

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


def run(client: Any, flush: Callable[[], object]) -> None:
    """Every scenario through ``client`` (an ``openai.OpenAI``); ``flush`` exports what is buffered."""
    import openai

    def scenario(name: str) -> None:
        flush()
        capture_client.scenario(name)

    scenario("chat")
    client.chat.completions.create(
        model=markers.MODEL,
        messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.PROMPT}],
    )
    scenario("tool-call")
    first = client.chat.completions.create(
        model=markers.MODEL, messages=[{"role": "user", "content": markers.PROMPT}], tools=TOOLS
    )
    call = first.choices[0].message.tool_calls[0]
    client.chat.completions.create(
        model=markers.MODEL,
        messages=[
            {"role": "user", "content": markers.PROMPT},
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": markers.TOOL_RESULT},
        ],
        tools=TOOLS,
    )
    scenario("stream")
    for _ in client.chat.completions.create(
        model=markers.MODEL,
        messages=[{"role": "user", "content": markers.PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
    ):
        pass
    scenario("error")
    with contextlib.suppress(openai.InternalServerError):
        client.chat.completions.create(model=markers.MODEL, messages=[{"role": "user", "content": markers.FAIL}])
    scenario("embeddings")
    client.embeddings.create(model="text-embedding-3-small", input=[markers.EMBEDDED])
