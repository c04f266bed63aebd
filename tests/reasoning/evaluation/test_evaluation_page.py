"""/dashboard/admin/reasoning/evaluation: the latest recorded gate runs, drift share over time,
and the download of a PHI-safe export of the last 24 hours."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AuditEvent
from reasoning.evaluation import FIXTURES
from reasoning.models import EvaluationRun
from tests.factories import make_flow
from tests.html import Element, doc

pytestmark = pytest.mark.django_db

PAGE = "/dashboard/admin/reasoning/evaluation"
EXPORT = "/dashboard/admin/reasoning/evaluation/export"
COT_MARKER = "COT-MARKER-5512"
INPUT_MARKER = "INPUT-MARKER-7781"


def record_signature_check(name: str = "sample-flows-drift.jsonl") -> None:
    with contextlib.suppress(CommandError):  # the drift fixture fails the gate; the run is recorded all the same
        call_command("reasoning_signature_check", "--input", str(FIXTURES / name), "--record", stdout=StringIO())


def section(page: Element, kind: str) -> Element:
    return page.one("section", data_kind=kind)


def test_operators_only(client: Client, patient_client: Client) -> None:
    assert patient_client.get(PAGE).status_code == 403
    assert patient_client.get(EXPORT).status_code == 403
    assert client.get(PAGE).status_code == 302
    assert client.get(EXPORT).status_code == 302
    assert not AuditEvent.objects.filter(action="admin.reasoning.export.downloaded").exists()


def test_without_runs_the_page_says_how_to_record_one(operator_client: Client) -> None:
    page = doc(operator_client.get(PAGE))

    assert "reasoning_replay --record" in section(page, "replay").one(data_empty="replay").text
    assert "--record" in section(page, "signature_check").one(data_empty="signature_check").text
    assert page.one("a", href=EXPORT)


def test_the_latest_runs_show_their_verdict_trigger_types_and_findings(operator_client: Client) -> None:
    record_signature_check("sample-flows-clean.jsonl")
    record_signature_check()  # the latest: fails
    call_command("reasoning_replay", "--record", stdout=StringIO())

    page = doc(operator_client.get(PAGE))

    check = section(page, "signature_check")
    assert check.one("span", "pill").text == "failed"
    assert "sample-flows-drift.jsonl" in check.one("p", "evaluation-latest").text
    rows = {
        row.attrs["data-trigger"]: [cell.text for cell in row.select("td")]
        for row in check.select("tr")
        if "data-trigger" in row.attrs
    }
    latest = EvaluationRun.objects.filter(kind="signature_check").latest("created_at")
    assert set(rows) == set(latest.by_trigger_type)
    assert sum(int(cells[1]) for cells in rows.values()) == latest.drifting == 3
    # Each flow that did not match links to its page; the statuses read as words.
    findings = [row for row in check.select("tr") if "data-finding" in row.attrs]
    assert len(findings) == 4
    first = findings[0]
    assert first.one("a").attrs["href"] == f"/dashboard/admin/reasoning/{first.attrs['data-finding']}"
    assert {row.select("td")[2].text for row in findings} == {"Sequence drift", "Outcome drift", "Skipped"}
    replay = section(page, "replay")
    assert replay.one("span", "pill").text == "passed"
    assert not [row for row in replay.select("tr") if "data-finding" in row.attrs]


def test_the_drift_chart_has_a_line_per_trigger_type_and_a_point_per_run(operator_client: Client) -> None:
    record_signature_check("sample-flows-clean.jsonl")
    record_signature_check()

    figure = doc(operator_client.get(PAGE)).one("figure", data_chart="drift-signature-check")

    # Each line's points are titled "<run> · <trigger type>: <share>".
    lines = {
        line.select("circle")[0].one("title").text.split(" · ")[1].rsplit(":", 1)[0]: [
            point.one("title").text for point in line.select("circle")
        ]
        for line in figure.select("g", cls="chart-line")
    }
    assert set(lines) >= {"user_question", "claim_review", "correlation_request"}
    assert lines["claim_review"][0].rsplit(": ", 1)[1] == "0 %"  # the clean run
    assert all(len(titles) == 2 for name, titles in lines.items() if name != "agent_run")
    legend = [item.text for item in figure.select("li", cls="chart-key")]
    assert "user_question" in legend
    assert figure.one("title", id="chart-drift-signature-check-svg-title").text.startswith("Golden-signature check")
    assert len(figure.one("table").one("tbody").select("tr")) == 2  # the table fallback: one row per run


def test_query_count_does_not_grow_with_the_runs(operator_client: Client) -> None:
    record_signature_check()
    with CaptureQueriesContext(connection) as few:
        operator_client.get(PAGE)
    for _ in range(5):
        record_signature_check()
        call_command("reasoning_replay", "--record", stdout=StringIO())
    with CaptureQueriesContext(connection) as many:
        operator_client.get(PAGE)

    assert len(many) == len(few)


def test_the_download_streams_the_last_day_phi_safe_and_is_audited(operator_client: Client, operator_user) -> None:  # type: ignore[no-untyped-def]
    with time_machine.travel(timezone.now() - timedelta(days=2)):
        old = make_flow()
    steps = [
        {
            "kind": "llm_prompt",
            "agent": "researcher",
            "summary_text": "Weighed the evidence",
            "inputs": {"question": INPUT_MARKER},
            "reasoning_content": COT_MARKER,
            "llm_call_log_ref": "call-1",
        }
    ]
    recent = make_flow(steps=steps)

    response = operator_client.get(EXPORT)

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert response["Content-Disposition"].startswith('attachment; filename="flows-')
    body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    rows = [json.loads(line) for line in body.splitlines()]
    assert [row["flow_id"] for row in rows] == [str(recent)]
    assert str(old) not in body.decode()
    assert COT_MARKER.encode() not in body and INPUT_MARKER.encode() not in body
    assert rows[0]["steps"][0]["has_llm_call_log_ref"] is True
    (event,) = AuditEvent.objects.filter(action="admin.reasoning.export.downloaded")
    assert event.actor == f"user:{operator_user.pk}"
    assert event.payload["rows"] == 1 and event.payload["format"] == "raw"


def test_recorded_runs_are_listed_read_only_in_django_admin(admin_client: Client) -> None:
    record_signature_check()
    run = EvaluationRun.objects.get()

    listing = admin_client.get("/admin/reasoning/evaluationrun/")
    detail = admin_client.get(f"/admin/reasoning/evaluationrun/{run.pk}/change/")

    assert listing.status_code == 200 and "sample-flows-drift.jsonl" in listing.content.decode()
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert admin_client.get("/admin/reasoning/evaluationrun/add/").status_code == 403
