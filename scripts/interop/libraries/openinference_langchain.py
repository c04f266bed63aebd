# /// script
# dependencies = [
#   "langchain",
#   "langgraph",
#   "langchain-openai",
#   "openinference-instrumentation-langchain",
#   "openinference-instrumentation",
#   "opentelemetry-sdk",
#   "opentelemetry-exporter-otlp-proto-http",
# ]
# ///
"""A LangGraph ReAct agent (ChatOpenAI from ``langchain-openai``) instrumented by OpenInference's LangChainInstrumentor.

The agent ``triage-agent`` is built with ``langchain.agents.create_agent`` (the successor of
``langgraph.prebuilt.create_react_agent``, a LangGraph graph) and has one tool ``lookup_guideline``. Session and
user ids are set with OpenInference's ``using_attributes``.
Scenarios: agent, tool-error (the tool raises; LangGraph's ToolNode re-raises it by default), model-error (500).
"""

from __future__ import annotations

import os

os.environ.setdefault("OTEL_SERVICE_NAME", "interop-openinference-langchain")

import capture_client
import markers
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation import using_attributes
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "interop-openinference-langchain"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT)))
LangChainInstrumentor().instrument(tracer_provider=provider)

model = ChatOpenAI(model=markers.MODEL, base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0)


@tool
def lookup_guideline(query: str) -> str:
    """Look up the triage guideline for a query."""
    return f"{markers.TOOL_RESULT}: guideline for {query}"


@tool("lookup_guideline")
def broken_lookup_guideline(query: str) -> str:
    """Look up the triage guideline for a query."""
    raise RuntimeError(f"{markers.TOOL_ERROR}: guideline store unavailable for {query}")


def run(prompt: str, guideline_tool: object) -> None:
    agent = create_agent(model, tools=[guideline_tool], system_prompt=markers.SYSTEM, name="triage-agent")
    with using_attributes(session_id="interop-session-1", user_id="interop-user-1"):
        try:
            agent.invoke({"messages": [{"role": "user", "content": prompt}]})
        except Exception as exc:
            print(f"caught {type(exc).__name__}: {exc}")


def flushed(name: str) -> None:
    provider.force_flush()
    capture_client.scenario(name)


flushed("agent")
run(markers.PROMPT, lookup_guideline)
flushed("tool-error")
run(markers.PROMPT, broken_lookup_guideline)
flushed("model-error")
run(f"{markers.PROMPT} {markers.FAIL}", lookup_guideline)
provider.force_flush()
provider.shutdown()
