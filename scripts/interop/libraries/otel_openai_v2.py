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

import os

# util-genai >= 1.0 reads a mode here ("true" is not one and means NO_CONTENT); SPAN_ONLY puts the messages on the
# spans as gen_ai.input.messages / gen_ai.output.messages (the log events are not exported here).
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
os.environ.setdefault("OTEL_SERVICE_NAME", "interop-otel-openai-v2")

import capture_client
import openai
import openai_scenarios
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


openai_scenarios.run(client, provider.force_flush)
provider.force_flush()
provider.shutdown()
