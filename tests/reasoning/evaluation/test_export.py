"""manage.py reasoning_export --format raw: the documented row, the filters, PHI safety, audit, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from pathways.models import Pathway
from patients.models import Patient
from patients.services import create_patient
from reasoning.evaluation.rows import read_rows
from reasoning.models import ReasoningFlow
from reasoning.recording import services
from tests.factories import ACTOR, SAFE_STEPS, make_flow

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "evaluation.md"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

# Distinctive values planted where the export must never look; each is scanned for in the bytes.
MARKERS = {
    "inputs": "QZX-INPUT-VALUE-1001",
    "outputs": "QZX-OUTPUT-VALUE-1002",
    "pii_input": "QZX-PII-INPUT-1003",
    "pii_output": "QZX-PII-OUTPUT-1004",
    "rationale": "QZX-RATIONALE-1005",
    "reasoning_content": "QZX-CHAIN-OF-THOUGHT-1006",
    "llm_call_log_ref": "QZX-LLM-REF-1007",
    "experiment_trace_ref": "QZX-EXPERIMENT-REF-1008",
    "decision_graph_node_ref": "QZX-GRAPH-REF-1009",
    "memory_claim_ref": "QZX-CLAIM-REF-1010",
    "abort_reason": "QZX-ABORT-REASON-1011",
    "patient_name": "Zebulon Quixote",
    "patient_mrn": "MRN-99887766",
    # Summaries of a flow that fails the guard (the step's e-mail address is what fails).
    "unsafe_trigger": "QZX unsafe trigger summary",
    "unsafe_outcome": "QZX unsafe outcome summary",
    "unsafe_step": "zebulon.quixote@example.org",
    "unsafe_step_2": "QZX second unsafe step",
}


def export(*args: str) -> tuple[list[dict[str, Any]], str]:
    """Run the command (stdout output, no progress bar); return the parsed rows and stderr."""
    stdout, stderr = StringIO(), StringIO()
    call_command("reasoning_export", "--no-progress", *args, stdout=stdout, stderr=stderr)
    return [json.loads(line) for line in stdout.getvalue().splitlines()], stderr.getvalue()


def export_ids(*args: str) -> list[str]:
    return [row["flow_id"] for row in export(*args)[0]]


def usage_error(*args: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        export(*args)
    assert caught.value.returncode == 2
    return caught.value


def flow_at(when: datetime, **fields: Any) -> str:
    """A flow opened and closed at ``when`` (make_flow's arguments)."""
    with time_machine.travel(when, tick=False):
        return str(make_flow(**fields))


def seed_pathway(flow_id: str | uuid.UUID, *, hit_count: int = 0, demoted: bool = False) -> Pathway:
    """The pathway ``flow_id`` seeded, reused ``hit_count`` times (set up directly, as factories do)."""
    flow = ReasoningFlow.objects.get(pk=flow_id)
    return Pathway.objects.create(
        trigger_type=flow.trigger_type,
        trigger_ref=flow.trigger_ref,
        agents=["researcher"],
        step_kinds=["retrieval"],
        seed_flow=flow,
        confidence=0.9,
        hit_count=hit_count,
        demoted_at=NOW if demoted else None,
    )


def documented_keys(heading: str, until: str) -> list[str]:
    """The backticked keys of the first column of the tables between ``heading`` and ``until``."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(heading) : text.index(until, text.index(heading))]
    keys: list[str] = []
    for line in section.splitlines():
        if line.startswith("| `"):
            keys += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return keys


ROW_KEYS = documented_keys("## The raw export row", "Each step:")
STEP_KEYS = documented_keys("Each step:", "Never exported")


@pytest.fixture
def patient(db: None) -> Patient:
    return create_patient(
        username="zq.patient",
        password="x-unused-password",
        actor=ACTOR,
        name=MARKERS["patient_name"],
        mrn=MARKERS["patient_mrn"],
        consent=True,
    )


def marked_step(**fields: Any) -> dict[str, Any]:
    """A step carrying a marker in every field the export must leave out."""
    return {
        "kind": "llm_prompt",
        "agent": "critic",
        "summary_text": "Asked the model to weigh the guideline",
        "inputs": {"query": MARKERS["inputs"], "who": MARKERS["pii_input"]},
        "outputs": {"answer": MARKERS["outputs"], "contact": MARKERS["pii_output"]},
        "pii_fields": ["who", "contact"],
        "rationale": MARKERS["rationale"],
        "reasoning_content": MARKERS["reasoning_content"],
        "llm_call_log_ref": MARKERS["llm_call_log_ref"],
        "experiment_trace_ref": MARKERS["experiment_trace_ref"],
        "decision_graph_node_ref": MARKERS["decision_graph_node_ref"],
        "memory_claim_ref": MARKERS["memory_claim_ref"],
        **fields,
    }


def make_unsafe_flow(patient: Patient | None = None) -> str:
    """A completed flow whose summaries fail the guard (a step quotes an e-mail address)."""
    flow_id = make_flow(
        patient,
        [marked_step(), f"Wrote to {MARKERS['unsafe_step']}", MARKERS["unsafe_step_2"]],
        close=False,
        trigger_summary=MARKERS["unsafe_trigger"],
    )
    services.close_flow(
        flow_id, state="completed", actor=ACTOR, outcome_type="advice_given", outcome_summary=MARKERS["unsafe_outcome"]
    )
    assert ReasoningFlow.objects.get(pk=flow_id).patient_safe_summary is False
    return str(flow_id)


@pytest.fixture
def planted(patient: Patient) -> Iterator[dict[str, str]]:
    """A safe flow and an unsafe flow about the patient, both full of markers, plus an aborted one."""
    safe = str(make_flow(patient, [SAFE_STEPS[0], marked_step(), SAFE_STEPS[1]]))
    unsafe = make_unsafe_flow(patient)
    make_flow(patient, [marked_step()], abort_reason=MARKERS["abort_reason"])
    yield {"safe": safe, "unsafe": unsafe}


# --- The row ------------------------------------------------------------------------------


def test_documented_key_lists_were_found() -> None:
    # Guards the two tests below against a doc edit that would make them compare nothing.
    assert ROW_KEYS[:3] == ["format", "flow_id", "trace_id"] and ROW_KEYS[-1] == "steps"
    assert STEP_KEYS[:2] == ["index", "position"] and STEP_KEYS[-1] == "summary_hidden"


def test_row_of_a_safe_flow_has_the_documented_keys_in_order(planted: dict[str, str]) -> None:
    rows, _ = export("--patient-key")
    row = next(row for row in rows if row["flow_id"] == planted["safe"])

    assert list(row) == [key for key in ROW_KEYS if key != "summaries_hidden"]
    assert [list(step) for step in row["steps"]] == [[key for key in STEP_KEYS if key != "summary_hidden"]] * 3


def test_row_of_an_unsafe_flow_hides_every_summary(planted: dict[str, str]) -> None:
    rows, _ = export()
    row = next(row for row in rows if row["flow_id"] == planted["unsafe"])

    hidden = {"trigger_summary", "outcome_summary", "patient_key"}
    assert list(row) == [key for key in ROW_KEYS if key not in hidden]
    assert row["summary_safe"] is False and row["summaries_hidden"] is True
    assert [list(step) for step in row["steps"]] == [[key for key in STEP_KEYS if key != "summary_text"]] * 3
    assert all(step["summary_hidden"] is True for step in row["steps"])


def test_row_values(patient: Patient) -> None:
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    steps: list[dict[str, Any]] = [
        {
            "id": str(first),
            "kind": "retrieval",
            "agent": "researcher",
            "summary_text": SAFE_STEPS[0],
            "confidence": 0.9,
        },
        {
            "id": str(second),
            "kind": "llm_prompt",
            "agent": "critic",
            "summary_text": SAFE_STEPS[1],
            "parent_step_id": str(first),
            "confidence": 0.7,
            "latency_ms": 1200,
            "model": "gpt-4o-2024-08-06",
            "input_tokens": 900,
            "output_tokens": 120,
            "reasoning_tokens": 64,
            "reasoning_content": "12345",
            "llm_call_log_ref": "log-1",
        },
        {
            "id": str(third),
            "kind": "decision",
            "agent": "researcher",
            "summary_text": "Chose the follow-up",
            "parent_step_id": str(second),
            "extra_parent_ids": [str(first)],
        },
    ]
    with time_machine.travel(NOW, tick=False) as clock:
        flow_id = make_flow(patient, steps, close=False, trace_id="trace-1", session_id="session-1")
        clock.move_to(NOW + timedelta(seconds=2, milliseconds=500))
        services.close_flow(
            flow_id, state="completed", actor=ACTOR, outcome_type="advice_given", outcome_summary="Gave advice"
        )
    seed_pathway(flow_id, hit_count=3)

    (row,), _ = export()

    assert {key: row[key] for key in ROW_KEYS if key not in ("steps", "summaries_hidden", "patient_key")} == {
        "format": "raw",
        "flow_id": str(flow_id),
        "trace_id": "trace-1",
        "session_id": "session-1",
        "trigger_type": "lab_result",
        "trigger_ref": "labs/1",
        "agent": "researcher",
        "agent_set": ["critic", "researcher"],
        "flow_state": "completed",
        "outcome_type": "advice_given",
        "aggregate_confidence": 0.7,
        "created_at": "2026-03-02T12:00:00+00:00",
        "closed_at": "2026-03-02T12:00:02.500000+00:00",
        "duration_ms": 2500,
        "step_count": 3,
        "summary_safe": True,
        "trigger_summary": "A new lab result arrived",
        "outcome_summary": "Gave advice",
        "has_patient": True,
        "dispatched_from_backlog": False,
        "pathway": {"hit_count": 3, "demoted": False},
    }
    assert [(s["index"], s["position"], s["kind"], s["parent_positions"], s["summary_text"]) for s in row["steps"]] == [
        (0, 1, "retrieval", [], SAFE_STEPS[0]),
        (1, 2, "llm_prompt", [1], SAFE_STEPS[1]),
        (2, 3, "decision", [2, 1], "Chose the follow-up"),
    ]
    usage = row["steps"][1]
    expected = {
        "confidence": 0.7,
        "latency_ms": 1200,
        "started_at": None,
        "model": "gpt-4o-2024-08-06",
        "input_tokens": 900,
        "output_tokens": 120,
        "reasoning_tokens": 64,
        "reasoning_content_chars": 5,
        "has_llm_call_log_ref": True,
        "has_experiment_trace_ref": False,
        "has_decision_graph_node_ref": False,
        "has_memory_claim_ref": False,
    }
    assert {key: usage[key] for key in expected} == expected
    assert row["steps"][0]["reasoning_content_chars"] is None
    assert row["steps"][0]["has_llm_call_log_ref"] is False


def test_steps_are_in_the_order_they_began() -> None:
    # The second step to arrive began first (a span exported late).
    flow_id = make_flow(
        steps=[
            {"kind": "retrieval", "agent": "researcher", "summary_text": "Arrived first", "started_at": NOW},
            {
                "kind": "retrieval",
                "agent": "researcher",
                "summary_text": "Began first",
                "started_at": NOW - timedelta(seconds=5),
            },
        ]
    )

    (row,), _ = export()

    assert row["flow_id"] == str(flow_id)
    assert [(s["index"], s["position"], s["summary_text"]) for s in row["steps"]] == [
        (0, 2, "Began first"),
        (1, 1, "Arrived first"),
    ]
    assert row["steps"][0]["started_at"] == "2026-03-02T11:59:55+00:00"


def test_pathway_is_reported_when_reused_or_demoted() -> None:
    reused, demoted, unused, none = (str(make_flow()) for _ in range(4))
    seed_pathway(reused, hit_count=2)
    seed_pathway(demoted, hit_count=1, demoted=True)
    seed_pathway(unused)  # never reused, never demoted: null, like no pathway (docs/evaluation.md)

    pathways = {row["flow_id"]: row["pathway"] for row in export()[0]}

    assert pathways == {
        reused: {"hit_count": 2, "demoted": False},
        demoted: {"hit_count": 1, "demoted": True},
        unused: None,
        none: None,
    }


def test_only_completed_flows_are_exported() -> None:
    completed = str(make_flow())
    make_flow(close=False)
    make_flow(abort_reason="timeout")

    rows, _ = export()

    assert [row["flow_id"] for row in rows] == [completed]
    assert rows[0]["flow_state"] == "completed"


def test_rows_come_oldest_close_first() -> None:
    later = flow_at(NOW)
    earlier = flow_at(NOW - timedelta(hours=1))

    assert export_ids() == [earlier, later]


# --- PHI safety --------------------------------------------------------------------------------


def test_no_marker_reaches_the_output_bytes(planted: dict[str, str], patient: Patient, tmp_path: Path) -> None:
    out = tmp_path / "export.jsonl"
    call_command("reasoning_export", "--no-progress", "--patient-key", "--out", str(out), stderr=StringIO())
    data = out.read_bytes()

    # The scan can fail: the safe flow's summaries and the ids are there.
    assert SAFE_STEPS[0].encode() in data and planted["safe"].encode() in data
    assert len(data.splitlines()) == 2
    leaked = [name for name, marker in MARKERS.items() if marker.lower().encode() in data.lower()]
    assert leaked == []
    assert str(patient.pk).encode() not in data and patient.pk.hex.encode() not in data


def test_queries_never_name_the_columns_left_out(planted: dict[str, str]) -> None:
    # Not even the query results carry them; a hidden summary is turned into NULL by the query.
    with CaptureQueriesContext(connection) as queries:
        export()
    sql = " ".join(query["sql"] for query in queries.captured_queries)
    left_out = ("inputs", "outputs", "inputs_pii", "outputs_pii", "pii_fields", "rationale", "reasoning_content")
    assert [column for column in (*left_out, "abort_reason") if re.search(rf"\b{column}\b", sql)] == []
    assert 'CASE WHEN "reasoning_flow"."patient_safe_summary"' in sql  # the flow's summaries
    assert "CASE WHEN f.patient_safe_summary THEN s.summary_text END" in sql  # the steps' summaries


# --- --patient-key -------------------------------------------------------------------------------


def test_patient_key_groups_a_patients_rows_within_an_export_and_not_across(patient: Patient) -> None:
    other = create_patient(username="other.patient", password="x-unused-password", actor=ACTOR)
    ada_1, ada_2, other_1, nobody = (
        str(make_flow(patient)),
        str(make_flow(patient)),
        str(make_flow(other)),
        str(make_flow()),
    )

    first = {row["flow_id"]: row["patient_key"] for row in export("--patient-key")[0]}
    second = {row["flow_id"]: row["patient_key"] for row in export("--patient-key")[0]}

    assert first[ada_1] == first[ada_2]
    assert re.fullmatch(r"[0-9a-f]{64}", first[ada_1])
    assert first[other_1] != first[ada_1]
    assert first[nobody] is None
    assert second[ada_1] == second[ada_2] != first[ada_1]
    assert second[other_1] != first[other_1]


def test_without_the_flag_there_is_no_patient_key(patient: Patient) -> None:
    make_flow(patient)

    (row,), _ = export()

    assert "patient_key" not in row and row["has_patient"] is True


# --- Filters -----------------------------------------------------------------------------------


def test_since_and_until_select_a_half_open_window_of_closed_at() -> None:
    before = flow_at(datetime(2026, 2, 28, 23, 59, 59, tzinfo=UTC))
    first = flow_at(datetime(2026, 3, 1, 0, 0, tzinfo=UTC))
    during = flow_at(datetime(2026, 3, 1, 18, 0, tzinfo=UTC))
    next_day = flow_at(datetime(2026, 3, 2, 0, 0, tzinfo=UTC))

    assert export_ids("--since", "2026-03-01", "--until", "2026-03-02") == [first, during]
    assert export_ids("--since", "2026-03-01T12:00:00+00:00") == [during, next_day]
    assert export_ids("--until", "2026-03-01T00:00:00Z") == [before]
    # A naive datetime is in settings.TIME_ZONE (UTC).
    assert export_ids("--since", "2026-03-01T18:00") == [during, next_day]


def test_window_is_on_closed_at_not_created_at() -> None:
    with time_machine.travel(datetime(2026, 2, 1, tzinfo=UTC), tick=False) as clock:
        flow_id = make_flow(close=False)
        clock.move_to(datetime(2026, 3, 1, 6, 0, tzinfo=UTC))
        services.close_flow(flow_id, state="completed", actor=ACTOR, outcome_type="advice_given")

    assert export_ids("--since", "2026-03-01") == [str(flow_id)]
    assert export_ids("--until", "2026-03-01") == []


def test_outcome_is_repeatable() -> None:
    advice, referral = (str(make_flow(close=False)) for _ in range(2))
    services.close_flow(uuid.UUID(advice), state="completed", actor=ACTOR, outcome_type="advice_given")
    services.close_flow(uuid.UUID(referral), state="completed", actor=ACTOR, outcome_type="referral")
    make_flow()  # recommendation_delivered

    assert export_ids("--outcome", "advice_given") == [advice]
    assert sorted(export_ids("--outcome", "advice_given", "--outcome", "referral")) == sorted([advice, referral])


def test_min_confidence_keeps_flows_at_or_above_it() -> None:
    def flow(confidence: float | None) -> str:
        step = {"kind": "retrieval", "agent": "researcher", "summary_text": SAFE_STEPS[0], "confidence": confidence}
        return str(make_flow(steps=[step]))

    low, exact, high = flow(0.4), flow(0.8), flow(0.95)
    flow(None)  # no confidence: not at or above anything

    assert sorted(export_ids("--min-confidence", "0.8")) == sorted([exact, high])
    assert len(export_ids("--min-confidence", "0")) == 3
    assert low not in export_ids("--min-confidence", "0.5")


def test_limit_keeps_the_oldest_closes() -> None:
    flows = [flow_at(NOW + timedelta(minutes=n)) for n in range(4)]

    assert export_ids("--limit", "2") == flows[:2]
    assert export_ids("--limit", "0") == []


def test_trigger_type_and_agent_filters() -> None:
    lab = str(make_flow(trigger_type="lab_result", agent="researcher"))
    question = str(make_flow(trigger_type="user_question", agent="critic"))
    refill = str(make_flow(trigger_type="refill_request", agent="critic"))

    assert export_ids("--trigger-type", "user_question") == [question]
    assert export_ids("--trigger-type", "user_question", "--trigger-type", "lab_result") == [lab, question]
    assert export_ids("--agent", "critic") == [question, refill]
    assert export_ids("--agent", "critic", "--trigger-type", "refill_request") == [refill]


# --- Output, summary line, audit ---------------------------------------------------------------


def test_summary_line_on_stderr_counts_rows_and_bytes() -> None:
    make_flow()
    make_flow()
    stdout, stderr = StringIO(), StringIO()

    call_command("reasoning_export", "--no-progress", stdout=stdout, stderr=stderr)

    match = re.fullmatch(r"rows=(\d+) bytes=(\d+) seconds=(\d+\.\d\d)\n", stderr.getvalue())
    assert match, stderr.getvalue()
    assert int(match[1]) == 2
    assert int(match[2]) == len(stdout.getvalue().encode())


def test_progress_bar_goes_to_stderr_unless_no_progress() -> None:
    make_flow()
    stdout, stderr = StringIO(), StringIO()

    call_command("reasoning_export", stdout=stdout, stderr=stderr)

    assert "1/1" in stderr.getvalue() and "flow" in stderr.getvalue()
    assert len(stdout.getvalue().splitlines()) == 1
    assert export()[1].count("\n") == 1  # --no-progress: the summary line alone


def test_out_file_is_complete_and_nothing_else_is_left(tmp_path: Path) -> None:
    make_flow()
    out = tmp_path / "rows.jsonl"
    out.write_text("old export\n")

    call_command("reasoning_export", "--no-progress", "--out", str(out), stdout=StringIO(), stderr=StringIO())

    assert [json.loads(line)["format"] for line in out.read_text().splitlines()] == ["raw"]
    assert [path.name for path in tmp_path.iterdir()] == ["rows.jsonl"]
    # What reasoning_lint and the signature check read back.
    assert [row.kinds for row in read_rows(out)] == [("retrieval", "retrieval")]


def test_failed_export_leaves_the_out_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_flow()
    out = tmp_path / "rows.jsonl"
    out.write_text("old export\n")

    def broken(*args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {"format": "raw"}
        raise RuntimeError("database went away")

    monkeypatch.setattr("reasoning.management.commands.reasoning_export.raw_rows", broken)
    with pytest.raises(RuntimeError):
        call_command("reasoning_export", "--no-progress", "--out", str(out), stdout=StringIO(), stderr=StringIO())

    assert out.read_text() == "old export\n"
    assert [path.name for path in tmp_path.iterdir()] == ["rows.jsonl"]
    assert not AuditEvent.objects.filter(action="reasoning.export.completed").exists()


def test_export_is_audited_with_its_flags_and_counts(patient: Patient, tmp_path: Path) -> None:
    make_flow(patient)
    make_flow(patient, trigger_type="user_question")
    out = tmp_path / "rows.jsonl"

    call_command(
        "reasoning_export",
        "--no-progress",
        "--patient-key",
        "--trigger-type",
        "lab_result",
        "--since",
        "2020-01-01",
        "--outcome",
        "recommendation_delivered",
        "--limit",
        "5",
        "--out",
        str(out),
        stderr=StringIO(),
    )

    event = AuditEvent.objects.get(action="reasoning.export.completed")
    assert event.actor == "system:cli"
    payload = dict(event.payload)
    assert isinstance(payload.pop("seconds"), float | int)
    assert payload == {
        "flags": {
            "format": "raw",
            "since": "2020-01-01T00:00:00+00:00",
            "until": None,
            "outcomes": ["recommendation_delivered"],
            "min_confidence": None,
            "limit": 5,
            "trigger_types": ["lab_result"],
            "agents": [],
            "patient_key": True,
            "allow_reuse": False,
            "out": str(out),
        },
        "rows": 1,
        "bytes": out.stat().st_size,
    }


# --- Bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "last tuesday"], "--since: 'last tuesday' is not an ISO 8601 date or datetime"),
        (["--until", "2026-13-01"], "--until: '2026-13-01' is not an ISO 8601 date or datetime"),
        (["--since", "2026-03-02", "--until", "2026-03-01"], "--since must not be after --until"),
        (["--limit", "-1"], "--limit must not be negative"),
        (["--limit", "ten"], "--limit: 'ten' is not a whole number"),
        (["--min-confidence", "1.5"], "--min-confidence must be between 0 and 1"),
        (["--min-confidence", "-0.1"], "--min-confidence must be between 0 and 1"),
        (["--min-confidence", "nan"], "--min-confidence must be between 0 and 1"),
        (["--min-confidence", "high"], "--min-confidence: 'high' is not a number"),
        (["--agent", "Dr. Quixote"], "--agent: 'Dr. Quixote' is not a label"),
        (["--format", "dpo", "--patient-key"], "--patient-key applies to --format raw only"),
        (["--allow-reuse"], "--allow-reuse applies to --format dpo only"),
    ],
)
def test_bad_flag_is_a_usage_error_naming_it(args: list[str], message: str) -> None:
    error = usage_error(*args)

    assert str(error).startswith(message)
    assert not AuditEvent.objects.filter(action="reasoning.export.completed").exists()


def test_unwritable_out_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "rows.jsonl"

    error = usage_error("--out", str(missing))

    assert str(error).startswith(f"--out {missing}: cannot write")
    assert str(usage_error("--out", str(tmp_path))) == f"--out {tmp_path}: is a directory"
    assert not missing.parent.exists()


def test_usage_error_from_the_command_line_exits_2_with_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "reasoning_export", "--since", "yesterday"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )

    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "CommandError: --since: 'yesterday' is not an ISO 8601 date or datetime (e.g. 2026-03-01)"
    )
    assert result.stdout == ""
