# /// script
# dependencies = [
#   "openai",
#   "httpx",
#   "opentelemetry-sdk",
#   "opentelemetry-exporter-otlp-proto-http",
#   "openinference-instrumentation-openai",
# ]
# ///
"""Arize's OpenInference OpenAI instrumentation (openinference-instrumentation-openai).

OpenAIInstrumentor from ``openinference.instrumentation.openai`` with a plain OpenTelemetry SDK TracerProvider and
the OTLP/HTTP (protobuf) exporter; content is captured by default (no hiding in TraceConfig). Scenarios: chat,
tool-call, stream, error, embeddings (each a bare client call with no parent span).
"""

from __future__ import annotations

import os

os.environ.setdefault("OTEL_SERVICE_NAME", "interop-openinference-openai")

import capture_client
import openai
import openai_scenarios
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=capture_client.TRACES_ENDPOINT)))
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)
client = openai.OpenAI(base_url=capture_client.OPENAI_URL, api_key="sk-interop-fake", max_retries=0)


openai_scenarios.run(client, provider.force_flush)
provider.force_flush()
provider.shutdown()
