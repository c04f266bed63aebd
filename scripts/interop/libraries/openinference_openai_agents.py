# /// script
# dependencies = [
#   "openai-agents",
#   "openai",
#   "openinference-instrumentation-openai-agents",
#   "openinference-instrumentation",
#   "opentelemetry-sdk",
#   "opentelemetry-exporter-otlp-proto-http",
# ]
# ///
"""The OpenAI Agents SDK (``openai-agents``) instrumented by OpenInference (``OpenAIAgentsInstrumentor``).

The agent ``triage-agent`` has one function tool ``lookup_guideline`` and talks to the fake server over the
chat-completions API. Only OpenInference's trace processor is registered (the SDK's own upload to OpenAI is
replaced), and session/user ids are set with OpenInference's ``using_attributes``.
Scenarios: agent, tool-error (the tool raises; the SDK reports the error to the model), model-error (500).
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("OTEL_SERVICE_NAME", "interop-openinference-openai-agents")

import capture_client
import markers
from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_trace_processors,
)
from openai import AsyncOpenAI
from openinference.instrumentation import using_attributes
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "interop-openinference-openai-agents"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT)))
# No upload to OpenAI's trace backend: drop the SDK's default processor (the instrumentor, exclusive by default,
# replaces the list too).
set_trace_processors([])
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)

set_default_openai_client(AsyncOpenAI(base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0))
set_default_openai_api("chat_completions")


@function_tool
def lookup_guideline(query: str) -> str:
    """Look up the triage guideline for a query."""
    return f"{markers.TOOL_RESULT}: guideline for {query}"


@function_tool(name_override="lookup_guideline")
def broken_lookup_guideline(query: str) -> str:
    """Look up the triage guideline for a query."""
    raise RuntimeError(f"{markers.TOOL_ERROR}: guideline store unavailable for {query}")


def agent(tool: object) -> Agent:
    return Agent(name="triage-agent", instructions=markers.SYSTEM, model=markers.MODEL, tools=[tool])


async def run(prompt: str, tool: object) -> None:
    with using_attributes(session_id="interop-session-1", user_id="interop-user-1"):
        try:
            await Runner.run(agent(tool), prompt)
        except Exception as exc:
            print(f"caught {type(exc).__name__}: {exc}")


def flushed(name: str) -> None:
    provider.force_flush()
    capture_client.scenario(name)


async def main() -> None:
    # One event loop for every scenario: the shared AsyncOpenAI client's connections belong to it.
    flushed("agent")
    await run(markers.PROMPT, lookup_guideline)
    flushed("tool-error")
    await run(markers.PROMPT, broken_lookup_guideline)
    flushed("model-error")
    await run(f"{markers.PROMPT} {markers.FAIL}", lookup_guideline)


asyncio.run(main())
provider.force_flush()
provider.shutdown()
