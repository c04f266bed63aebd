"""What real instrumentation libraries send, replayed through ``POST /v1/traces``.

``tests/fixtures/otlp/<library>/`` holds the OTLP requests each library sent in
``make interop`` (``scripts/interop/``): the OpenAI client instrumented by OpenTelemetry,
OpenLLMetry, OpenInference and Logfire, agent frameworks instrumented by OpenInference and
Traceloop, Langfuse, MLflow (both modes) and the Vercel AI SDK, against a fake model server
that answers with usage, a tool call, ``reasoning_content``, a streamed answer and a 500.
Every prompt, system prompt, answer, tool argument, tool result and reasoning carries a
marker string (``scripts/interop/markers.py``).

For each library the stored flows and steps (kinds, models, tokens, tools, errors, agents,
sessions) must match ``expected.json`` beside the requests, which a person has read; and for
all of them: no planted marker in any table's plaintext or any log line, reasoning only in
the steps' ``reasoning_content``, and no flow without steps where the trace held a call.
``RFT_INTEROP_UPDATE=1`` writes ``expected.json`` from what is stored (``make interop-accept``).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.recording.otlp import decode_request

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "otlp"
LIBRARIES = sorted(path.name for path in FIXTURES.iterdir() if (path / "capture.json").exists())
UPDATE = os.environ.get("RFT_INTEROP_UPDATE") == "1"


def _markers() -> Any:
    spec = importlib.util.spec_from_file_location("interop_markers", ROOT / "scripts" / "interop" / "markers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


markers = _markers()
# The end user the capture scripts name (user.id, langfuse's, traceloop's, the Vercel AI SDK's metadata).
USER_ID = "interop-user-1"
SESSION_ID = "interop-session-1"


def replay(client: APIClient, library: str) -> dict[str, set[str]]:
    """Send every captured request in order; returns the trace ids of each scenario."""
    manifest = json.loads((FIXTURES / library / "capture.json").read_text())
    traces: dict[str, set[str]] = defaultdict(set)
    for entry in manifest["requests"]:
        body = (FIXTURES / library / entry["file"]).read_bytes()
        content_type = entry["content_type"]
        response = client.post("/v1/traces", body, content_type=content_type)
        assert response.status_code == 200, (entry["file"], response.content)
        answer = ExportTraceServiceResponse()
        if content_type == "application/json":
            from google.protobuf import json_format

            json_format.Parse(response.content, answer)
        else:
            answer.ParseFromString(response.content)
        assert answer.partial_success.rejected_spans == 0, (entry["file"], answer.partial_success.error_message)
        for resource_spans in decode_request(body, content_type).resource_spans:
            for scope_spans in resource_spans.scope_spans:
                traces[entry["scenario"]].update(span.trace_id.hex() for span in scope_spans.spans)
    return traces


def digest(traces: dict[str, set[str]]) -> dict[str, list[dict[str, Any]]]:
    """What a person checks, per scenario: each flow and its steps, in time order."""
    result: dict[str, list[dict[str, Any]]] = {}
    for scenario, trace_ids in sorted(traces.items()):
        flows = ReasoningFlow.objects.filter(trace_id__in=trace_ids).order_by("created_at", "root_span_id")
        result[scenario] = [
            {
                "trigger_type": flow.trigger_type,
                "agent": flow.agent,
                "state": flow.flow_state,
                "abort_reason": flow.abort_reason,
                # The scenarios' own session id, or that the library made one up per run (Pydantic
                # AI's conversation id): a fresh one on every capture is no change of mapping.
                "session_id": flow.session_id if flow.session_id in ("", SESSION_ID) else "(generated)",
                "user": bool(flow.user_ref),
                "nested": bool(flow.parent_span_id),
                "steps": [
                    {
                        "kind": step.kind,
                        "agent": step.agent,
                        "model": step.model,
                        "tokens": [step.input_tokens, step.output_tokens, step.reasoning_tokens, step.cached_tokens],
                        "tool": step.tool,
                        "outcome": step.outcome,
                        "error_type": step.error_type,
                        "reasoning": bool(step.reasoning_content),
                    }
                    for step in ReasoningStep.objects.filter(flow=flow).order_by("started_at", "position")
                ],
            }
            for flow in flows
        ]
    return result


def plaintext_hits(needles: tuple[str, ...]) -> dict[str, int]:
    """Rows of every table in this database whose text form holds one of ``needles``."""
    hits = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(
                f"SELECT count(*) FROM {connection.ops.quote_name(table)} AS t WHERE t::text LIKE ANY(%s)",
                [[f"%{needle}%" for needle in needles]],
            )
            (count,) = cursor.fetchone()
            if count:
                hits[table] = count
    return hits


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_librarys_spans_become_the_expected_flows_with_nothing_in_clear(
    library: str, agent: APIClient, all_logs: pytest.LogCaptureFixture
) -> None:
    traces = replay(agent, library)
    stored = digest(traces)

    expected_path = FIXTURES / library / "expected.json"
    if UPDATE:
        expected_path.write_text(json.dumps(stored, indent=1) + "\n")
    assert expected_path.exists(), f"no expected.json for {library}: run make interop-accept and read it"
    assert stored == json.loads(expected_path.read_text())

    # Every scenario held a call: no flow of it is without steps.
    for scenario, flows in stored.items():
        assert flows and all(flow["steps"] for flow in flows), f"{scenario}: a flow without steps"

    # Nothing planted is in any table's plaintext, nor in any log line; nor the end user's id
    # (the scenarios' user.id and its equivalents), which is kept only as a keyed pseudonym.
    planted = (*markers.ALL, USER_ID)
    assert plaintext_hits(planted) == {}
    assert not [marker for marker in planted if marker in all_logs.text]

    # The content is kept, encrypted; reasoning only where reasoning belongs.
    steps = list(ReasoningStep.objects.all())
    decrypted = " ".join(f"{step.inputs_pii or ''} {step.outputs_pii or ''}" for step in steps)
    assert markers.REASONING not in decrypted
    reasoning = " ".join(step.reasoning_content or "" for step in steps)
    sent = b"".join(path.read_bytes() for path in (FIXTURES / library).iterdir() if path.suffix in (".pb", ".json"))
    if markers.REASONING.encode() in sent:
        assert markers.REASONING in reasoning, "the model's reasoning was sent but not kept as reasoning_content"
    if markers.PROMPT.encode() in sent:
        assert markers.PROMPT in decrypted, "the prompt was sent but not kept (encrypted)"
