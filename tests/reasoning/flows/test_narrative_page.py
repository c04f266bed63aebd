"""GET /dashboard/reasoning/<decision_id>: the patient's narrative page."""

from __future__ import annotations

import re
import uuid
from typing import Protocol

import pytest
from django.test import Client
from pytest_django import DjangoAssertNumQueries
from pytest_django.fixtures import Settings

from audit.models import AuditEvent
from core.throttling import Rate
from patients.models import Patient
from reasoning.flows.narrative import DISCLAIMER
from tests.factories import SAFE_STEPS, logged_in, make_flow
from tests.html import doc

pytestmark = pytest.mark.django_db


def page_url(decision_id: object) -> str:
    return f"/dashboard/reasoning/{decision_id}"


class _Response(Protocol):
    @property
    def content(self) -> bytes: ...


def html(response: _Response) -> str:
    return response.content.decode()


def test_anonymous_is_redirected_to_login(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient)

    response = Client().get(page_url(flow_id))

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next=/dashboard/reasoning/{flow_id}"


def test_consenting_patient_sees_their_safe_narrative(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient)

    response = logged_in(consenting_patient).get(page_url(flow_id))

    assert response.status_code == 200
    body = html(response)
    assert "A new lab result arrived" in body
    for summary in SAFE_STEPS:
        assert summary in body
    assert body.count('class="card"') == len(SAFE_STEPS)
    assert "Research assistant" in body  # the agent's plain label, not "researcher"
    assert "Suggested a follow-up visit" in body
    assert DISCLAIMER in body
    # When it was decided: a machine-readable <time> with a readable UTC label.
    assert any(
        re.fullmatch(r"\d{4}-\d\d-\d\dT.+", time.attrs.get("datetime", ""))
        and re.fullmatch(r"\d{1,2} \w+ \d{4}, \d\d:\d\d UTC", time.text)
        for time in doc(response).select("time")
    )


def test_completed_flow_reads_as_a_decision_with_its_radar(consenting_patient: Patient) -> None:
    body = html(logged_in(consenting_patient).get(page_url(make_flow(consenting_patient))))

    assert "How this decision was reached" in body
    assert "Finished" in body
    assert "How the decision measures up" in body
    assert "How sure" in body
    assert "stopped before reaching a decision" not in body


CONCLUSION_STEP = "Concluded that a follow-up visit is the right next step"


@pytest.mark.parametrize(
    ("abort_reason", "reason_text"),
    [
        ("tool_error", "One of the tools it relies on failed"),
        ("timeout", "It ran for too long without finishing"),
        ("lost connection to chart-7781", "It could not finish."),
    ],
)
def test_aborted_flow_says_it_stopped_before_a_decision_and_recommended_nothing(
    consenting_patient: Patient, abort_reason: str, reason_text: str
) -> None:
    flow_id = make_flow(consenting_patient, ["Reviewed recent lab results", CONCLUSION_STEP], abort_reason=abort_reason)

    response = logged_in(consenting_patient).get(page_url(flow_id))

    assert response.status_code == 200
    body = html(response)
    page = doc(response)
    text = page.text
    # The banner comes first, before any step could read as a conclusion.
    banner = text.index("This process stopped before reaching a decision. Nothing was recommended.")
    assert banner < text.index(CONCLUSION_STEP)
    assert reason_text in text
    assert "What was done before it stopped" in text
    assert "No decision was reached and nothing was recommended." in text
    # Nothing presented as a finished decision or as its strength.
    assert "How this decision was reached" not in text
    assert "Finished" not in text
    assert "Stopped" in text
    assert "How the decision measures up" not in text
    assert "How sure" not in text
    assert not page.select("svg")
    assert "chart-7781" not in body
    assert DISCLAIMER in body


def test_served_read_is_audited_for_the_logged_in_user(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient)

    logged_in(consenting_patient).get(page_url(flow_id))

    event = AuditEvent.objects.filter(action="patient.reasoning.flow.read").get()
    assert event.actor == f"user:{consenting_patient.user_id}"
    assert event.target_id == str(flow_id)
    assert event.payload["outcome"] == "served"


def test_narrative_page_shows_no_phi(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient)

    body = html(logged_in(consenting_patient).get(page_url(flow_id)))

    assert "Ada Lovelace" not in body
    assert "MRN-4455" not in body
    assert "ada.patient" not in body  # not even the username in the header


def test_active_flow_shows_still_working_banner_with_step_count(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient, close=False)

    response = logged_in(consenting_patient).get(page_url(flow_id))

    # The page mirrors the API: 202 while the decision is still being worked on.
    assert response.status_code == 202
    body = html(response)
    assert "Still working on this" in body
    assert "So far 2 steps have been completed" in body
    assert SAFE_STEPS[0] not in body


def test_active_flow_with_one_step_says_step_singular(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient, ["Reviewed recent lab results"], close=False)

    body = html(logged_in(consenting_patient).get(page_url(flow_id)))

    assert "So far 1 step has been completed" in body


def test_unsafe_summary_asks_care_team_with_403(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient, ["Reviewed recent lab results", "Reviewed metformin 500mg"])

    response = logged_in(consenting_patient).get(page_url(flow_id))

    assert response.status_code == 403
    body = html(response)
    assert "ask your care team" in body
    assert "metformin" not in body
    assert "Reviewed recent lab results" not in body


def test_no_consent_is_403_with_link_to_profile(non_consenting_patient: Patient) -> None:
    flow_id = make_flow(non_consenting_patient)

    response = logged_in(non_consenting_patient).get(page_url(flow_id))

    assert response.status_code == 403
    body = html(response)
    assert "not turned on" in body
    assert '<a href="/dashboard/profile">your profile</a>' in body
    assert SAFE_STEPS[0] not in body


def test_another_patients_flow_is_404(consenting_patient: Patient, non_consenting_patient: Patient) -> None:
    someone_elses = make_flow(non_consenting_patient)

    response = logged_in(consenting_patient).get(page_url(someone_elses))

    assert response.status_code == 404
    body = html(response)
    assert "Decision not found" in body
    assert SAFE_STEPS[0] not in body


@pytest.mark.parametrize("decision_id", [uuid.UUID(int=7), "not-a-uuid"])
def test_unknown_or_malformed_id_is_404_page(consenting_patient: Patient, decision_id: object) -> None:
    response = logged_in(consenting_patient).get(page_url(decision_id))

    assert response.status_code == 404
    assert "Decision not found" in html(response)
    assert response["Content-Type"].startswith("text/html")


def test_logged_in_non_patient_is_403_and_asked_to_see_care_team(
    consenting_patient: Patient, outsider_client: Client
) -> None:
    flow_id = make_flow(consenting_patient)

    response = outsider_client.get(page_url(flow_id))

    assert response.status_code == 403
    body = html(response)
    assert "ask your care team" in body
    assert SAFE_STEPS[0] not in body


def test_reads_past_the_limit_are_429(consenting_patient: Patient, settings: Settings) -> None:
    # The page shares the API's throttle; lower it instead of making 31 reads.
    settings.NARRATIVE_RATE_LIMIT = Rate(1, 300)
    flow_id = make_flow(consenting_patient)
    client = logged_in(consenting_patient)

    assert client.get(page_url(flow_id)).status_code == 200
    response = client.get(page_url(flow_id))

    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert "try again in a few minutes" in html(response)


def test_page_loads_htmx_only_from_vendored_static(consenting_patient: Patient) -> None:
    flow_id = make_flow(consenting_patient)

    body = html(logged_in(consenting_patient).get(page_url(flow_id)))

    assert '<script src="/static/vendor/htmx/htmx.min.js" defer></script>' in body
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", body)


def test_narrative_page_query_count(
    consenting_patient: Patient, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    flow_id = make_flow(consenting_patient)
    client = logged_in(consenting_patient)

    # 1 session, 2 user, 3 the patient (patient_of, once for the throttle and the read);
    # 4 the throttle's counter (one upsert for the user and the patient); read_narrative:
    # 5 savepoint, 6 the flow, 7 the audit event, 8 the steps, 9 release.
    with django_assert_num_queries(9):
        response = client.get(page_url(flow_id))

    assert response.status_code == 200
