# /// script
# dependencies = [
#   "openai",
#   "httpx",
#   "opentelemetry-sdk",
#   "opentelemetry-exporter-otlp-proto-http",
#   "opentelemetry-instrumentation-openai",
# ]
# ///
"""Traceloop's OpenLLMetry OpenAI instrumentation (opentelemetry-instrumentation-openai), content capture on.

OpenAIInstrumentor from ``opentelemetry.instrumentation.openai`` with a plain OpenTelemetry SDK TracerProvider and
the OTLP/HTTP (protobuf) exporter (not traceloop-sdk), ``TRACELOOP_TRACE_CONTENT=true``. Scenarios: chat, tool-call,
stream, error, embeddings (each a bare client call with no parent span).
"""

from __future__ import annotations

import contextlib
import os

os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
os.environ.setdefault("OTEL_SERVICE_NAME", "interop-openllmetry-openai")

import capture_client
import markers
import openai
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT)))
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)
client = openai.OpenAI(base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0)
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
    provider.force_flush()
    capture_client.scenario(name)


flushed("chat")
client.chat.completions.create(
    model=markers.MODEL,
    messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.PROMPT}],
)
flushed("tool-call")
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
flushed("stream")
for _ in client.chat.completions.create(
    model=markers.MODEL,
    messages=[{"role": "user", "content": markers.PROMPT}],
    stream=True,
    stream_options={"include_usage": True},
):
    pass
flushed("error")
with contextlib.suppress(openai.InternalServerError):
    client.chat.completions.create(model=markers.MODEL, messages=[{"role": "user", "content": markers.FAIL}])
flushed("embeddings")
client.embeddings.create(model="text-embedding-3-small", input=[markers.EMBEDDED])
provider.force_flush()
provider.shutdown()
