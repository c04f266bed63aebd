"""Raw chain-of-thought (reasoning_content): encrypted, hidden from every reader but one, purged, counted."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from audit.services import record as audit_record
from patients.models import Patient
from reasoning.jobs import purge_reasoning_content
from reasoning.models import ReasoningStep
from tests.conftest import events
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

FLOWS = "/api/reasoning/flows"
ADMIN_FLOWS = "/admin/v1/reasoning/flows"
STATS = "/admin/v1/reasoning/stats"
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
MARKER = "ZEBRA-COT-7731"
# Non-ASCII on purpose: the count is of characters, not bytes.
REASONING = f"{MARKER} — the patient\u2019s question first; then weigh the two guideline options…"
STARTED = "memory.job.reasoning_content_retention.started"
COMPLETED = "memory.job.reasoning_content_retention.completed"
PURGED = "reasoning.step.reasoning_content_purged"


@pytest.fixture
def cot_reader(make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]) -> APIClient:
    """An operator tool allowed to read raw chain-of-thought."""
    return client_for(make_token("reasoning.admin", "reasoning.cot.read", name="cot-reader"))


@pytest.fixture
def clock_start() -> datetime:
    return NOW


def step_body(summary: str = "Weighed the evidence", **fields: Any) -> dict[str, Any]:
    return {"kind": "llm_prompt", "agent": "researcher", "summary_text": summary, **fields}


def close(agent: APIClient, flow_id: str) -> None:
    response = agent.patch(
        f"{FLOWS}/{flow_id}",
        {"flow_state": "completed", "outcome_type": "answered", "outcome_summary": "Suggested a visit"},
        format="json",
    )
    assert response.status_code == 200, response.content


def raw_step_text(step_id: str) -> str:
    """The stored step row with every column cast to text, read with raw SQL."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM reasoning_step LIMIT 0")
        columns = [column.name for column in cursor.description]
        cursor.execute(
            f"SELECT {', '.join(f'{c}::text' for c in columns)} FROM reasoning_step WHERE id = %s", [step_id]
        )
        row = cursor.fetchone()
    assert row is not None
    return "\n".join(cell for cell in row if cell is not None)


def audit_text() -> str:
    parts = []
    for payload, canonical in AuditEvent.objects.values_list("payload", "canonical"):
        parts.append(json.dumps(payload, ensure_ascii=False))
        parts.append(json.dumps(payload))  # escaped form too
        parts.append(bytes(canonical).decode())
    return "\n".join(parts)


# --- Stored encrypted, with its count ---------------------------------------------------------


def test_reasoning_content_is_stored_encrypted_with_its_character_count(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]

    step_id = add_step(agent, flow_id, reasoning_content=REASONING)["id"]

    stored = raw_step_text(step_id)
    assert MARKER not in stored
    assert "weigh the two guideline options" not in stored
    step = ReasoningStep.objects.get(pk=step_id)
    assert step.reasoning_content == REASONING
    assert step.reasoning_content_chars == len(REASONING)
    assert len(REASONING) < len(REASONING.encode())  # counted in characters
    assert step.reasoning_content_purged_at is None


def test_step_without_reasoning_content_has_no_count(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]

    step_id = add_step(agent, flow_id)["id"]

    step = ReasoningStep.objects.get(pk=step_id)
    assert step.reasoning_content is None
    assert step.reasoning_content_chars is None


def test_reasoning_content_is_kept_verbatim_including_surrounding_whitespace(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    text = f"  {REASONING}\n\n"

    step_id = add_step(agent, flow_id, reasoning_content=text)["id"]

    step = ReasoningStep.objects.get(pk=step_id)
    assert step.reasoning_content == text
    assert step.reasoning_content_chars == len(text)


# --- Never in responses, the narrative, audit payloads ------------------------------------------


def test_step_responses_do_not_echo_reasoning_content(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]

    single = agent.post(f"{FLOWS}/{flow_id}/steps", step_body(reasoning_content=REASONING), format="json")
    batch = agent.post(
        f"{FLOWS}/{flow_id}/steps/batch", {"steps": [step_body(reasoning_content=REASONING)]}, format="json"
    )

    assert (single.status_code, batch.status_code) == (201, 201), (single.content, batch.content)
    assert "reasoning_content" not in single.json()
    assert "reasoning_content" not in batch.json()["steps"][0]
    for response in (single, batch):
        assert MARKER not in response.content.decode()


def test_narrative_never_shows_reasoning_content(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    flow_id = open_flow(agent, patient_id=str(consenting_patient.pk), trigger_summary="Asked about options")["id"]
    add_step(agent, flow_id, reasoning_content=REASONING)
    close(agent, flow_id)

    response = patient_app.get(f"{FLOWS}/{flow_id}")

    assert response.status_code == 200, response.content
    assert MARKER not in response.content.decode()
    assert "reasoning_content" not in response.content.decode()


def test_admin_read_without_include_reasoning_shows_the_count_only(agent: APIClient, cot_reader: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, reasoning_content=REASONING)

    response = cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}")

    assert response.status_code == 200, response.content
    (step,) = response.json()["steps"]
    assert "reasoning_content" not in step
    assert step["reasoning_content_chars"] == len(REASONING)
    assert MARKER not in response.content.decode()
    assert events("admin.reasoning.flow.reasoning_content_read") == []


@pytest.mark.parametrize("flag", ["false", "0", ""])
def test_admin_read_with_include_reasoning_off_shows_the_count_only(
    agent: APIClient, cot_reader: APIClient, flag: str
) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, reasoning_content=REASONING)

    response = cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": flag})

    assert response.status_code == 200, response.content
    assert "reasoning_content" not in response.json()["steps"][0]
    assert MARKER not in response.content.decode()


def test_include_reasoning_without_the_cot_scope_is_403(agent: APIClient, operator: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, reasoning_content=REASONING)

    response = operator.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": "true"})

    assert response.status_code == 403, response.content
    assert "reasoning.cot.read" in response.json()["detail"]
    assert MARKER not in response.content.decode()
    assert events("admin.reasoning.flow.reasoning_content_read") == []


def test_cot_scope_without_admin_scope_is_403(
    agent: APIClient, make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, reasoning_content=REASONING)
    cot_only = client_for(make_token("reasoning.cot.read", name="cot-only"))

    response = cot_only.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": "true"})

    assert response.status_code == 403, response.content
    assert MARKER not in response.content.decode()


@pytest.mark.parametrize("flag", ["true", "1"])
def test_include_reasoning_with_the_cot_scope_returns_it_and_audits_the_read(
    agent: APIClient, cot_reader: APIClient, flag: str
) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, reasoning_content=REASONING)
    add_step(agent, flow_id)

    response = cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": flag})

    assert response.status_code == 200, response.content
    with_cot, without_cot = response.json()["steps"]
    assert with_cot["reasoning_content"] == REASONING
    assert with_cot["reasoning_content_chars"] == len(REASONING)
    assert without_cot["reasoning_content"] is None
    (read,) = events("admin.reasoning.flow.read")
    (cot_read,) = events("admin.reasoning.flow.reasoning_content_read")
    assert cot_read.actor == "token:cot-reader"
    assert (cot_read.target_type, cot_read.target_id) == ("reasoning.reasoningflow", flow_id)
    assert cot_read.payload == {"steps_with_reasoning": 1}
    assert read.payload == {"step_count": 2}


def test_include_reasoning_with_a_non_boolean_value_is_400(agent: APIClient, cot_reader: APIClient) -> None:
    flow_id = open_flow(agent)["id"]

    response = cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": "maybe"})

    assert response.status_code == 400, response.content
    assert "include_reasoning" in response.json()
    assert events("admin.reasoning.flow.read") == []


def test_reasoning_content_never_reaches_an_audit_payload(
    agent: APIClient, cot_reader: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    flow_id = open_flow(agent, patient_id=str(consenting_patient.pk))["id"]
    step_id = add_step(agent, flow_id, reasoning_content=REASONING)["id"]
    agent.post(f"{FLOWS}/{flow_id}/steps/batch", {"steps": [step_body(reasoning_content=REASONING)]}, format="json")
    close(agent, flow_id)
    patient_app.get(f"{FLOWS}/{flow_id}")
    assert cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": "true"}).status_code == 200

    audited = audit_text()

    assert MARKER not in audited
    assert "guideline options" not in audited
    created = AuditEvent.objects.get(action="reasoning.step.created", target_id=step_id)
    assert created.payload["reasoning_content_chars"] == len(REASONING)


def test_reasoning_content_never_reaches_a_log_record(
    agent: APIClient,
    cot_reader: APIClient,
    consenting_patient: Patient,
    patient_app: APIClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django")
    connection.force_debug_cursor = True  # SQL statements and their parameters are logged too
    try:
        flow_id = open_flow(agent, patient_id=str(consenting_patient.pk))["id"]
        add_step(agent, flow_id, reasoning_content=REASONING)
        agent.post(f"{FLOWS}/{flow_id}/steps/batch", {"steps": [step_body(reasoning_content=REASONING)]}, format="json")
        close(agent, flow_id)
        # A rejected write (closed flow: 409) and a refused read (no cot scope: 403) log warnings.
        late = agent.post(f"{FLOWS}/{flow_id}/steps", step_body(reasoning_content=REASONING), format="json")
        assert late.status_code == 409
        patient_app.get(f"{FLOWS}/{flow_id}")
        cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": "true"})
        with time_machine.travel(datetime.now(UTC) + timedelta(days=31)):
            assert purge_reasoning_content() == 2
    finally:
        connection.force_debug_cursor = False

    assert any("reasoning_step" in record.getMessage() for record in caplog.records), "SQL was not captured"
    for record in caplog.records:
        message = record.getMessage()
        assert MARKER not in message, f"{record.name} logged the raw reasoning"
        assert "guideline options" not in message
        assert MARKER not in repr(record.__dict__)


# --- Retention ----------------------------------------------------------------------------------


def write_step_at(agent: APIClient, clock: time_machine.Coordinates, flow_id: str, age: timedelta) -> str:
    """Write a step with reasoning ``age`` before NOW, leaving the clock at NOW."""
    clock.move_to(NOW - age)
    step_id: str = add_step(agent, flow_id, reasoning_content=REASONING)["id"]
    clock.move_to(NOW)
    return step_id


@pytest.fixture
def aged_steps(agent: APIClient, clock: time_machine.Coordinates) -> tuple[str, str]:
    """One step written 31 days ago, one 29 days ago, both with raw reasoning."""
    clock.move_to(NOW - timedelta(days=32))
    flow_id = open_flow(agent)["id"]
    old = write_step_at(agent, clock, flow_id, timedelta(days=31))
    recent = write_step_at(agent, clock, flow_id, timedelta(days=29))
    return old, recent


def test_retention_purges_content_older_than_30_days_and_keeps_the_count(aged_steps: tuple[str, str]) -> None:
    old_id, recent_id = aged_steps

    purged = purge_reasoning_content()

    assert purged == 1
    old = ReasoningStep.objects.get(pk=old_id)
    assert old.reasoning_content is None
    assert old.reasoning_content_chars == len(REASONING)
    assert old.reasoning_content_purged_at == NOW
    with connection.cursor() as cursor:
        cursor.execute("SELECT reasoning_content FROM reasoning_step WHERE id = %s", [old_id])
        assert cursor.fetchone() == (None,)
    recent = ReasoningStep.objects.get(pk=recent_id)
    assert recent.reasoning_content == REASONING
    assert recent.reasoning_content_purged_at is None


def test_retention_audits_its_lifecycle_with_counts(aged_steps: tuple[str, str]) -> None:
    purge_reasoning_content()

    (started,) = events(STARTED)
    (completed,) = events(COMPLETED)
    assert started.id < completed.id
    assert started.payload == {"retention_days": 30}
    assert completed.payload == {"purged": 1}
    assert completed.actor == "system:reasoning_content_retention"


def test_retention_second_run_purges_nothing(aged_steps: tuple[str, str]) -> None:
    old_id, _ = aged_steps
    purge_reasoning_content()
    first_purge = ReasoningStep.objects.get(pk=old_id).reasoning_content_purged_at

    again = purge_reasoning_content()

    assert again == 0
    assert [event.payload for event in events(COMPLETED)] == [{"purged": 1}, {"purged": 0}]
    assert ReasoningStep.objects.get(pk=old_id).reasoning_content_purged_at == first_purge


def test_retention_catches_up_once_the_recent_step_ages(
    aged_steps: tuple[str, str], clock: time_machine.Coordinates
) -> None:
    _, recent_id = aged_steps
    purge_reasoning_content()

    clock.move_to(NOW + timedelta(days=2))
    purged = purge_reasoning_content()

    assert purged == 1
    assert ReasoningStep.objects.get(pk=recent_id).reasoning_content is None


def test_retention_works_in_batches(agent: APIClient, clock: time_machine.Coordinates) -> None:
    clock.move_to(NOW - timedelta(days=40))
    flow_id = open_flow(agent)["id"]
    for _ in range(5):
        add_step(agent, flow_id, reasoning_content=REASONING)
    clock.move_to(NOW)

    purged = purge_reasoning_content(batch_size=2)

    assert purged == 5
    assert not ReasoningStep.objects.filter(reasoning_content__isnull=False).exists()
    assert ReasoningStep.objects.filter(reasoning_content_chars=len(REASONING)).count() == 5


def test_retention_audits_each_batch_with_its_counts_between_start_and_completion(
    agent: APIClient, clock: time_machine.Coordinates
) -> None:
    clock.move_to(NOW - timedelta(days=40))
    flow_id = open_flow(agent)["id"]
    for _ in range(5):
        add_step(agent, flow_id, reasoning_content=REASONING)
    clock.move_to(NOW)

    purge_reasoning_content(batch_size=2)

    batches = events(PURGED)
    assert [event.payload for event in batches] == [
        {"picked": 2, "purged": 2, "retention_days": 30},
        {"picked": 2, "purged": 2, "retention_days": 30},
        {"picked": 1, "purged": 1, "retention_days": 30},
    ]
    assert {event.actor for event in batches} == {"system:reasoning_content_retention"}
    (started,) = events(STARTED)
    (completed,) = events(COMPLETED)
    assert started.id < batches[0].id and batches[-1].id < completed.id
    assert completed.payload == {"purged": 5}


def test_retention_with_nothing_to_purge_writes_no_batch_event(aged_steps: tuple[str, str]) -> None:
    purge_reasoning_content()
    purge_reasoning_content()

    assert [event.payload["purged"] for event in events(PURGED)] == [1]


def test_a_failed_batch_rolls_back_its_purge_with_its_audit_event(
    aged_steps: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    old_id, _ = aged_steps

    def failing_record(*args: Any, **kwargs: Any) -> int:
        audit_record(*args, **kwargs)
        raise RuntimeError("audit write failed")

    monkeypatch.setattr("reasoning.flows.services.record", failing_record)

    with pytest.raises(RuntimeError):
        purge_reasoning_content()

    assert ReasoningStep.objects.get(pk=old_id).reasoning_content == REASONING
    assert events(PURGED) == []
    assert [event.payload for event in events("memory.job.reasoning_content_retention.error")] == [
        {"purged": 0, "error_type": "RuntimeError"}
    ]


def test_purge_reasoning_content_command_runs_the_job(aged_steps: tuple[str, str]) -> None:
    old_id, recent_id = aged_steps
    out = StringIO()

    call_command("purge_reasoning_content", stdout=out)

    assert "1 step(s)" in out.getvalue()
    assert ReasoningStep.objects.get(pk=old_id).reasoning_content is None
    assert ReasoningStep.objects.get(pk=recent_id).reasoning_content == REASONING
    assert len(events(COMPLETED)) == 1


def test_retention_days_come_from_settings(
    agent: APIClient, clock: time_machine.Coordinates, settings: Settings
) -> None:
    settings.REASONING_CONTENT_RETENTION_DAYS = 7
    clock.move_to(NOW - timedelta(days=9))
    flow_id = open_flow(agent)["id"]
    eight_days = write_step_at(agent, clock, flow_id, timedelta(days=8))
    six_days = write_step_at(agent, clock, flow_id, timedelta(days=6))

    purged = purge_reasoning_content()

    assert purged == 1
    assert ReasoningStep.objects.get(pk=eight_days).reasoning_content is None
    assert ReasoningStep.objects.get(pk=six_days).reasoning_content == REASONING
    assert events(STARTED)[0].payload == {"retention_days": 7}


def test_purged_content_reads_as_null_for_a_cot_reader_with_the_count_kept(
    aged_steps: tuple[str, str], cot_reader: APIClient
) -> None:
    old_id, _ = aged_steps
    purge_reasoning_content()
    flow_id = str(ReasoningStep.objects.get(pk=old_id).flow_id)

    response = cot_reader.get(f"{ADMIN_FLOWS}/{flow_id}", {"include_reasoning": "true"})

    assert response.status_code == 200, response.content
    old, recent = response.json()["steps"]
    assert old["reasoning_content"] is None
    assert old["reasoning_content_chars"] == len(REASONING)
    assert recent["reasoning_content"] == REASONING
    assert events("admin.reasoning.flow.reasoning_content_read")[0].payload == {"steps_with_reasoning": 1}


# --- Stats --------------------------------------------------------------------------------------


def texts_of_lengths(*lengths: int) -> list[str]:
    return [(f"{MARKER}-{n}-" + "x" * n)[:n] if n >= 30 else "y" * n for n in lengths]


def test_stats_report_character_sum_and_percentiles_never_the_text(agent: APIClient, operator: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    texts = texts_of_lengths(10, 20, 30, 40, 1000)
    body = {"steps": [step_body(reasoning_content=text) for text in texts] + [step_body()]}
    assert agent.post(f"{FLOWS}/{flow_id}/steps/batch", body, format="json").status_code == 201

    response = operator.get(STATS)

    assert response.status_code == 200, response.content
    stats = response.json()
    assert stats["steps"] == 6
    assert stats["flows"]["active"] == 1
    assert stats["reasoning_content"] == {
        "steps_with_reasoning": 5,
        "purged": 0,
        "chars_sum": 1100,
        "chars_p50": 30,
        "chars_p95": 1000,
    }
    content = response.content.decode()
    assert MARKER not in content
    assert "x" * 10 not in content
    assert "y" * 10 not in content


def test_stats_keep_counting_purged_content(
    agent: APIClient, operator: APIClient, clock: time_machine.Coordinates
) -> None:
    clock.move_to(NOW - timedelta(days=40))
    flow_id = open_flow(agent)["id"]
    body = {"steps": [step_body(reasoning_content=text) for text in texts_of_lengths(10, 20, 30, 40, 1000)]}
    assert agent.post(f"{FLOWS}/{flow_id}/steps/batch", body, format="json").status_code == 201
    clock.move_to(NOW)
    assert purge_reasoning_content() == 5

    stats = operator.get(STATS).json()["reasoning_content"]

    assert stats == {"steps_with_reasoning": 5, "purged": 5, "chars_sum": 1100, "chars_p50": 30, "chars_p95": 1000}


def test_stats_with_no_reasoning_content_are_zero_and_null(operator: APIClient) -> None:
    stats = operator.get(STATS).json()

    assert stats["steps"] == 0
    assert stats["reasoning_content"] == {
        "steps_with_reasoning": 0,
        "purged": 0,
        "chars_sum": 0,
        "chars_p50": None,
        "chars_p95": None,
    }


def test_stats_need_the_admin_scope(agent: APIClient, reader: APIClient) -> None:
    assert agent.get(STATS).status_code == 403
    assert reader.get(STATS).status_code == 403
