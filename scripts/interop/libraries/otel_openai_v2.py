# /// script
# dependencies = [
#   "openai",
#   "httpx",
#   "opentelemetry-sdk",
#   "opentelemetry-exporter-otlp-proto-http",
#   "opentelemetry-instrumentation-openai-v2",
#   # instrumentation-openai-v2 2.4b0 imports opentelemetry.util.genai.instruments, which util-genai 1.2b0
#   # renamed to _instruments (ModuleNotFoundError); 1.1b0 is the last release that has it.
#   "opentelemetry-util-genai>=1.0b0,<1.2b0",
# ]
# ///
"""OpenTelemetry's own OpenAI instrumentation (opentelemetry-instrumentation-openai-v2), content capture on.

A plain OpenTelemetry SDK TracerProvider with the OTLP/HTTP (protobuf) exporter. Scenarios: chat, tool-call,
stream, error, embeddings (each a bare client call with no parent span).
"""

from __future__ import annotations

import contextlib
import os

# util-genai >= 1.0 reads a mode here ("true" is not one and means NO_CONTENT); SPAN_ONLY puts the messages on the
# spans as gen_ai.input.messages / gen_ai.output.messages (the log events are not exported here).
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
os.environ.setdefault("OTEL_SERVICE_NAME", "interop-otel-openai-v2")

import capture_client
import markers
import openai
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT)))
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument()
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
