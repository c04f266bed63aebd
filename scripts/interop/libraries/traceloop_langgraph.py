# /// script
# dependencies = [
#   "traceloop-sdk",
#   "opentelemetry-instrumentation-langchain",  # via traceloop-sdk; listed so capture.json has its version
#   "opentelemetry-instrumentation-openai",  # via traceloop-sdk; listed so capture.json has its version
#   "langchain",
#   "langgraph",
#   "langchain-openai",
#   # traceloop-sdk needs every OTel contrib instrumentation it lists (threading, urllib3, logging, …) from one
#   # release; threading and urllib3 stop at 0.66b1 while the others have 0.66b2, and pip backtracks for hours
#   # over that. These pins name the newest set that resolves (bump them together).
#   "opentelemetry-instrumentation==0.66b1",
#   "opentelemetry-sdk==1.45.1",
#   "opentelemetry-exporter-otlp-proto-http==1.45.1",
#   "opentelemetry-exporter-otlp-proto-grpc==1.45.1",
# ]
# ///
"""A LangGraph ReAct agent over ``langchain-openai``'s ChatOpenAI, instrumented by Traceloop's SDK (OpenLLMetry).

``Traceloop.init`` (content tracing on, telemetry off, no API key, our OTLP/HTTP exporter, no batching) turns on
its LangChain and OpenAI instrumentations. The agent ``triage-agent`` is built with ``langchain.agents.create_agent``
(the successor of ``langgraph.prebuilt.create_react_agent``) with one tool ``lookup_guideline``; each run is wrapped
in ``@workflow(name="triage_workflow")`` and carries session/user association properties.
Scenarios: agent, tool-error (the tool raises; LangGraph's ToolNode re-raises it by default), model-error (500).
"""

from __future__ import annotations

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

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import workflow

Traceloop.init(
    app_name="interop-traceloop-langgraph",
    api_endpoint=capture_client.COLLECTOR,
    exporter=OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT),
    disable_batch=True,
    telemetry_enabled=False,
)

model = ChatOpenAI(model=markers.MODEL, base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0)


@tool
def lookup_guideline(query: str) -> str:
    """Look up the triage guideline for a query."""
    return f"{markers.TOOL_RESULT}: guideline for {query}"


@tool("lookup_guideline")
def broken_lookup_guideline(query: str) -> str:
    """Look up the triage guideline for a query."""
    raise RuntimeError(f"{markers.TOOL_ERROR}: guideline store unavailable for {query}")


@workflow(name="triage_workflow")
def triage(prompt: str, guideline_tool: object) -> object:
    Traceloop.set_association_properties({"session_id": "interop-session-1", "user_id": "interop-user-1"})
    agent = create_agent(model, tools=[guideline_tool], system_prompt=markers.SYSTEM, name="triage-agent")
    return agent.invoke({"messages": [{"role": "user", "content": prompt}]})


def run(prompt: str, guideline_tool: object) -> None:
    try:
        triage(prompt, guideline_tool)
    except Exception as exc:
        print(f"caught {type(exc).__name__}: {exc}")


def flush() -> None:
    # Traceloop.init set the global SDK TracerProvider; with disable_batch its processor exports each span at once.
    trace.get_tracer_provider().force_flush()


def flushed(name: str) -> None:
    flush()
    capture_client.scenario(name)


flushed("agent")
run(markers.PROMPT, lookup_guideline)
flushed("tool-error")
run(markers.PROMPT, broken_lookup_guideline)
flushed("model-error")
run(f"{markers.PROMPT} {markers.FAIL}", lookup_guideline)
flush()
