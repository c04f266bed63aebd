# /// script
# dependencies = [
#   "openai",
#   "httpx",
#   "logfire",
#   "opentelemetry-exporter-otlp-proto-http",
#   "pydantic-ai-slim[openai]",
# ]
# ///
"""Pydantic Logfire (``logfire.instrument_openai``), plus a Pydantic AI agent (``logfire.instrument_pydantic_ai``).

``logfire.configure(send_to_logfire=False, ...)`` with an extra BatchSpanProcessor + OTLP/HTTP (protobuf) exporter
pointed at the collector; the OpenAI client instance is instrumented with ``logfire.instrument_openai(client)``.
Scenarios: chat, tool-call, stream, error, embeddings (each a bare client call with no parent span), and agent: a
Pydantic AI ``Agent`` (OpenAI chat-completions model on the fake server) with one tool, instrumented through Logfire.
"""

from __future__ import annotations

import os

# Logfire adds its own OTLP exporter when this is set: drop it so each span is exported once, by ours.
os.environ.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)

import capture_client
import logfire
import markers
import openai
import openai_scenarios
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

logfire.configure(
    send_to_logfire=False,
    service_name="interop-logfire-openai",
    console=False,
    metrics=False,
    additional_span_processors=[BatchSpanProcessor(OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT))],
)
client = openai.OpenAI(base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0)
logfire.instrument_openai(client)
logfire.instrument_pydantic_ai()

agent = Agent(
    OpenAIChatModel(
        markers.MODEL, provider=OpenAIProvider(base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake")
    ),
    name="triage-agent",
    instructions=markers.SYSTEM,
)


@agent.tool_plain
def lookup_guideline(query: str) -> str:
    """Look up a guideline."""
    return f"{markers.TOOL_RESULT}: guideline for {query}"


openai_scenarios.run(client, logfire.force_flush)
logfire.force_flush()
capture_client.scenario("agent")
agent.run_sync(markers.PROMPT)
logfire.force_flush()
logfire.shutdown()
