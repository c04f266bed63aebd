"""The access report (issue 41, part 7): incident response from the audit log.

The issue's test: plant reads of one patient's flows by three actors; the report for the patient
lists exactly them (with the writes that made the flows), and none of another patient's.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from patients.models import Patient
from patients.services import create_patient
from reasoning.flows.access_report import access_report
from tests.conftest import events
from tests.factories import PASSWORD, logged_in, make_flow
from tests.html import doc

READS = {
    "patient.reasoning.flow.read",
    "admin.reasoning.flow.read",
    "admin.reasoning.flow.content_read",
    "admin.reasoning.turn.read",
}


@pytest.fixture
def other_patient(db: None) -> Patient:
    return create_patient(username="other.patient", password=PASSWORD, consent=True, actor="system:test")


def client(raw: str) -> APIClient:
    made = APIClient()
    made.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return made


def report_rows(**options: str) -> list[dict[str, str]]:
    out = StringIO()
    call_command("audit_access_report", "--no-progress", stdout=out, **options)
    return list(csv.DictReader(StringIO(out.getvalue())))


def test_the_report_for_a_patient_lists_exactly_the_reads_of_their_data(
    consenting_patient: Patient, other_patient: Patient, make_token: Callable[..., str]
) -> None:
    mine = make_flow(consenting_patient, trace_id="turn-of-ada")
    theirs = make_flow(other_patient)
    app = client(make_token("reasoning.read", name="ada-app", patient_id=consenting_patient.pk))
    admin = client(make_token("reasoning.admin", name="on-call"))
    desk = client(make_token("reasoning.admin", "reasoning.content.read", name="incident-desk"))
    snoop = client(make_token("reasoning.admin", name="elsewhere"))
    assert app.get(f"/api/reasoning/flows/{mine}").status_code == 200
    assert admin.get("/admin/v1/reasoning/turns/turn-of-ada").status_code == 200
    assert desk.get(f"/admin/v1/reasoning/flows/{mine}?include_content=true").status_code == 200
    assert snoop.get(f"/admin/v1/reasoning/flows/{theirs}").status_code == 200

    rows = report_rows(patient=str(consenting_patient.pk))

    reads = {(row["actor"], row["action"]) for row in rows if row["action"] in READS}
    assert reads == {
        ("token:ada-app", "patient.reasoning.flow.read"),
        ("token:on-call", "admin.reasoning.turn.read"),
        ("token:incident-desk", "admin.reasoning.flow.read"),
        ("token:incident-desk", "admin.reasoning.flow.content_read"),
    }
    assert "token:elsewhere" not in {row["actor"] for row in rows}
    writes = {row["action"] for row in rows if row["action"] not in READS}
    assert {"patient.created", "reasoning.flow.started", "reasoning.step.created", "reasoning.flow.completed"} <= writes
    (asked,) = events("admin.audit.access_report", consenting_patient.pk)
    assert asked.actor == "system:cli"
    assert asked.payload["subject"] == ["patient"] and asked.payload["rows"] == len(rows)


def test_the_report_for_an_actor_in_a_window_is_json_lines(make_token: Callable[..., str]) -> None:
    flow = make_flow()
    desk = client(make_token("reasoning.admin", name="incident-desk"))
    assert desk.get(f"/admin/v1/reasoning/flows/{flow}").status_code == 200

    out = StringIO()
    call_command(
        "audit_access_report",
        "--no-progress",
        actor="token:incident-desk",
        since="2000-01-01",
        format="json",
        stdout=out,
    )

    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["actor"], line["action"], line["target_id"]) for line in lines] == [
        ("token:incident-desk", "admin.reasoning.flow.read", str(flow))
    ]


def test_a_report_needs_a_subject_and_names_a_bad_one(db: None) -> None:
    with pytest.raises(CommandError, match="name a patient, an actor or a time window"):
        call_command("audit_access_report")
    with pytest.raises(CommandError, match="--patient: not a patient id"):
        call_command("audit_access_report", patient="nobody")
    with pytest.raises(CommandError, match="--patient: no patient with this id"):
        call_command("audit_access_report", patient="00000000-0000-4000-8000-000000000000")
    with pytest.raises(CommandError, match="--since"):
        call_command("audit_access_report", since="last tuesday")
    assert events("admin.audit.access_report") == []


def test_the_service_counts_what_it_returns(consenting_patient: Patient) -> None:
    make_flow(consenting_patient)

    report = access_report(requested_by="user:7", patient_id=consenting_patient.pk)

    assert report.rows == len(list(report)) > 0


# --- The page ---------------------------------------------------------------------------------

PAGE = "/dashboard/admin/reasoning/access-report"


def test_the_page_runs_a_report_for_an_operator_allowed_to_and_audits_it(
    consenting_patient: Patient, operator_client: Client, operator_user: User
) -> None:
    make_flow(consenting_patient)

    html = doc(operator_client.get(PAGE, {"patient": str(consenting_patient.pk)}))

    actions = [row.one("td", data_cell="action").text for row in html.one("table", "access-report").select("tr")[1:]]
    assert "patient.created" in actions and "reasoning.flow.started" in actions
    (asked,) = events("admin.audit.access_report", consenting_patient.pk)
    assert asked.actor == f"user:{operator_user.pk}"


def test_the_page_names_a_bad_field_and_refuses_an_operator_without_the_permission(
    operator_client: Client, db: None
) -> None:
    from reasoning.tokens import create_operator

    bad = operator_client.get(PAGE, {"since": "last tuesday"})
    assert bad.status_code == 400 and "since:" in doc(bad).one("p", "error").text

    plain = create_operator(username="plain.operator", password=PASSWORD, actor="system:test", superuser=False)
    refused = logged_in(plain).get(PAGE, {"actor": "token:x"})
    assert refused.status_code == 403
    assert events("admin.audit.access_report") == []


def test_the_report_for_a_patient_with_more_flows_than_a_statement_takes_parameters(
    consenting_patient: Patient, make_token: Callable[..., str]
) -> None:
    """Statements carry their parameters apart from their text (config.settings: server-side
    binding), and PostgreSQL takes at most 65,535 a statement: a patient's flows, unbounded,
    go to it as one array each."""
    first = make_flow(consenting_patient)
    with connection.cursor() as cursor:  # 40,000 more flows of the patient, copies of the first
        cursor.execute(
            "CREATE TEMP TABLE copies AS SELECT f.* FROM reasoning_flow f, generate_series(1, 40000) WHERE f.id = %s",
            [first],
        )
        cursor.execute("UPDATE copies SET id = gen_random_uuid()")
        cursor.execute("INSERT INTO reasoning_flow SELECT * FROM copies")
    admin = client(make_token("reasoning.admin", name="on-call"))
    assert admin.get(f"/admin/v1/reasoning/flows/{first}").status_code == 200

    rows = report_rows(patient=str(consenting_patient.pk))

    assert ("token:on-call", "admin.reasoning.flow.read", str(first)) in {
        (row["actor"], row["action"], row["target_id"]) for row in rows
    }
    assert {"reasoning.step.created", "reasoning.flow.completed"} <= {row["action"] for row in rows}
