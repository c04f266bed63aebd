# /// script
# dependencies = [
#   "traceloop-sdk",
#   "opentelemetry-instrumentation-openai-agents",  # via traceloop-sdk; listed so capture.json has its version
#   "opentelemetry-instrumentation-openai",  # via traceloop-sdk; listed so capture.json has its version
#   "openai-agents",
#   "openai",
#   "httpx",  # traceloop-sdk imports httpx without declaring it (the other venvs get it through langchain)
#   # traceloop-sdk needs every OTel contrib instrumentation it lists (threading, urllib3, logging, …) from one
#   # release; threading and urllib3 stop at 0.66b1 while the others have 0.66b2, and pip backtracks for hours
#   # over that. These pins name the newest set that resolves (bump them together).
#   "opentelemetry-instrumentation==0.66b1",
#   "opentelemetry-sdk==1.45.1",
#   "opentelemetry-exporter-otlp-proto-http==1.45.1",
#   "opentelemetry-exporter-otlp-proto-grpc==1.45.1",
# ]
# ///
"""The OpenAI Agents SDK (``openai-agents``) instrumented by Traceloop's SDK (OpenLLMetry).

``Traceloop.init`` (content tracing on, telemetry off, no API key, our OTLP/HTTP exporter, no batching) turns on
``opentelemetry-instrumentation-openai-agents`` (a trace processor of the Agents SDK) and the OpenAI
instrumentation. The SDK's own trace upload to OpenAI is removed first (``set_trace_processors([])``). The agent
``triage-agent`` has one function tool ``lookup_guideline`` and uses the chat-completions API; each run is wrapped
in ``@workflow(name="triage_workflow")`` and carries session/user association properties.
Scenarios: agent, tool-error (the tool raises; the SDK reports the error to the model), model-error (500).
"""

from __future__ import annotations

import asyncio
import os

import capture_client
import markers

os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
os.environ["TRACELOOP_TELEMETRY"] = "false"
os.environ["TRACELOOP_METRICS_ENABLED"] = "false"
os.environ["TRACELOOP_LOGGING_ENABLED"] = "false"
os.environ.pop("TRACELOOP_API_KEY", None)
# Anything that would still default to Traceloop's cloud (image upload, metrics) points at the loopback receiver.
os.environ["TRACELOOP_BASE_URL"] = capture_client.COLLECTOR

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_trace_processors,
)
from openai import AsyncOpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import workflow

# No upload to OpenAI's trace backend: drop the SDK's default processor; Traceloop adds its own next to what is left.
set_trace_processors([])
Traceloop.init(
    app_name="interop-traceloop-openai-agents",
    api_endpoint=capture_client.COLLECTOR,
    exporter=OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT),
    disable_batch=True,
    telemetry_enabled=False,
)

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


@workflow(name="triage_workflow")
async def triage(prompt: str, tool: object) -> str:
    Traceloop.set_association_properties({"session_id": "interop-session-1", "user_id": "interop-user-1"})
    agent = Agent(name="triage-agent", instructions=markers.SYSTEM, model=markers.MODEL, tools=[tool])
    result = await Runner.run(agent, prompt)
    return str(result.final_output)


async def run(prompt: str, tool: object) -> None:
    try:
        await triage(prompt, tool)
    except Exception as exc:
        print(f"caught {type(exc).__name__}: {exc}")


def flush() -> None:
    # Traceloop.init set the global SDK TracerProvider; with disable_batch its processor exports each span at once.
    trace.get_tracer_provider().force_flush()


def flushed(name: str) -> None:
    flush()
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
flush()
