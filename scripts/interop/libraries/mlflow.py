# /// script
# dependencies = [
#   "mlflow",
#   "openai",
#   "httpx",
#   "opentelemetry-exporter-otlp-proto-http",
# ]
# ///
"""MLflow tracing in its default (native ``mlflow.*`` attribute) mode, exported over OTLP/HTTP protobuf.

MLflow replaces its own trace export with an OTLP exporter when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
so no tracking server is involved (the tracking URI is a throw-away sqlite file under /tmp all the same).
``mlflow.openai.autolog()`` traces the model calls; ``@mlflow.trace`` makes the agent (span type AGENT) and
the tool (span type TOOL) spans; session and user are set with ``mlflow.update_current_trace``.
Scenarios: agent, chat, stream, tool-error, model-error. ``mlflow_genai_semconv.py`` runs this same file with
MLFLOW_ENABLE_OTEL_GENAI_SEMCONV=true.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

# This file is named like the package: keep its folder off sys.path so ``import mlflow`` finds MLflow.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

import capture_client  # noqa: E402
import markers  # noqa: E402

os.environ.setdefault("OTEL_SERVICE_NAME", "interop-mlflow")
os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = capture_client.TRACES_ENDPOINT
os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
# No usage telemetry to MLflow's servers: only loopback here.
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "true"
# Never used while OTLP export is on (no file gets created), but never the default ./mlflow.db either.
os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(tempfile.gettempdir()) / 'rft-interop-mlflow.db'}"

import mlflow  # noqa: E402
import openai  # noqa: E402
from mlflow.tracing.provider import provider  # noqa: E402

mlflow.openai.autolog()
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


def flush() -> None:
    tracer_provider = provider.get()  # None until the first span
    if tracer_provider is not None:
        tracer_provider.force_flush()


def flushed(name: str) -> None:
    flush()
    capture_client.scenario(name)


@mlflow.trace(name="lookup_guideline", span_type="TOOL")
def lookup_guideline(query: str) -> str:
    return f"{markers.TOOL_RESULT}: guideline for {query}"


@mlflow.trace(name="lookup_guideline", span_type="TOOL")
def broken_lookup_guideline(query: str) -> str:
    raise RuntimeError(f"{markers.TOOL_ERROR}: guideline store unavailable for {query}")


@mlflow.trace(name="triage-agent", span_type="AGENT")
def triage_agent(prompt: str, tool_fails: bool = False) -> str | None:
    mlflow.update_current_trace(session_id="interop-session-1", user="interop-user-1")
    messages: list[dict[str, object]] = [
        {"role": "system", "content": markers.SYSTEM},
        {"role": "user", "content": prompt},
    ]
    first = client.chat.completions.create(model=markers.MODEL, messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    tool = broken_lookup_guideline if tool_fails else lookup_guideline
    result = tool(**json.loads(call.function.arguments))
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
    second = client.chat.completions.create(model=markers.MODEL, messages=messages, tools=TOOLS)
    return second.choices[0].message.content


flushed("agent")
triage_agent(markers.PROMPT)

flushed("chat")
client.chat.completions.create(
    model=markers.MODEL,
    messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.PROMPT}],
)

flushed("stream")
for _ in client.chat.completions.create(
    model=markers.MODEL,
    messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.PROMPT}],
    stream=True,
    stream_options={"include_usage": True},
):
    pass

flushed("tool-error")
with contextlib.suppress(RuntimeError):
    triage_agent(markers.PROMPT, tool_fails=True)

flushed("model-error")
with contextlib.suppress(openai.InternalServerError):
    client.chat.completions.create(
        model=markers.MODEL,
        messages=[{"role": "system", "content": markers.SYSTEM}, {"role": "user", "content": markers.FAIL}],
    )

flush()
provider.get().shutdown()
