"""/dashboard/profile (the consent toggle), its POST endpoint, and logging in and out."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

import pytest
from django.test import Client

from audit.models import AuditEvent
from patients.models import Patient
from patients.services import create_patient
from tests.factories import PASSWORD
from tests.html import doc

pytestmark = pytest.mark.django_db

PROFILE = "/dashboard/profile"
CONSENT = "/dashboard/profile/consent"
CONSENT_CHANGED = "patient.reasoning_read_consent.changed"


@pytest.fixture
def non_consenting_patient() -> Patient:
    """Grace before she opts in, with PHI (a birth date too) that must never reach her profile."""
    return create_patient(
        username="grace.patient",
        password=PASSWORD,
        consent=False,
        actor="system:test",
        name="Grace Hopper",
        mrn="MRN-1906",
        date_of_birth=date(1906, 12, 9),
    )


def consent_of(patient: Patient) -> bool:
    patient.refresh_from_db()
    return patient.reasoning_read_consent


def consent_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=CONSENT_CHANGED).order_by("id"))


# --- Logging in and out ---------------------------------------------------------------


def test_login_page_renders_a_form() -> None:
    response = Client().get("/accounts/login/")

    assert response.status_code == 200
    body = response.content.decode()
    assert 'name="username"' in body
    assert 'type="password"' in body
    assert 'name="csrfmiddlewaretoken"' in body


def test_login_with_credentials_redirects_to_profile(non_consenting_patient: Patient) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get("/accounts/login/")

    response = client.post(
        "/accounts/login/",
        {"username": "grace.patient", "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"].value},
    )

    assert response.status_code == 302
    assert response["Location"] == "/dashboard/"
    landing = client.get("/dashboard/")
    assert landing.status_code == 302
    assert landing["Location"] == PROFILE
    assert client.get(PROFILE).status_code == 200


def test_login_with_wrong_password_shows_error(non_consenting_patient: Patient) -> None:
    response = Client().post("/accounts/login/", {"username": "grace.patient", "password": "wrong"})

    assert response.status_code == 200
    assert "did not match" in response.content.decode()


def test_logout_is_a_post_and_returns_to_login(non_consenting_client: Client) -> None:
    response = non_consenting_client.post("/accounts/logout/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert non_consenting_client.get(PROFILE).status_code == 302


# --- The profile page ------------------------------------------------------------------


def test_anonymous_is_redirected_to_login() -> None:
    response = Client().get(PROFILE)

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/dashboard/profile"


def test_patient_sees_public_id_and_consent_state(
    non_consenting_patient: Patient, non_consenting_client: Client
) -> None:
    response = non_consenting_client.get(PROFILE)

    assert response.status_code == 200
    body = response.content.decode()
    assert str(non_consenting_patient.pk) in body
    assert "is <strong>off</strong>" in body
    assert 'name="consent" value="on"' in body
    assert "Turn on" in body


def test_profile_shows_no_phi(non_consenting_patient: Patient, non_consenting_client: Client) -> None:
    body = non_consenting_client.get(PROFILE).content.decode()

    for phi in ("Grace Hopper", "MRN-1906", "1906", "grace.patient"):
        assert phi not in body


def test_toggle_form_works_with_and_without_js(non_consenting_client: Client) -> None:
    form = doc(non_consenting_client.get(PROFILE)).one("form", id="consent-toggle")

    # A plain POST form (no JS) that htmx upgrades to swap only itself.
    assert (form.attrs["method"], form.attrs["action"]) == ("post", "/dashboard/profile/consent")
    assert form.attrs["hx-post"] == "/dashboard/profile/consent"
    assert form.attrs["hx-swap"] == "outerHTML"


def test_page_loads_htmx_only_from_vendored_static(non_consenting_client: Client) -> None:
    body = non_consenting_client.get(PROFILE).content.decode()

    assert '<script src="/static/vendor/htmx/htmx.min.js" defer></script>' in body
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", body)


def test_non_patient_user_sees_polite_message(outsider_client: Client) -> None:
    response = outsider_client.get(PROFILE)

    assert response.status_code == 200
    body = response.content.decode()
    assert "not linked to a patient record" in body
    assert "consent-toggle" not in body


# --- The consent toggle ----------------------------------------------------------------


def test_toggle_without_js_flips_consent_and_redirects(
    non_consenting_patient: Patient, non_consenting_client: Client
) -> None:
    response = non_consenting_client.post(CONSENT, {"consent": "on"})

    assert response.status_code == 303
    assert response["Location"] == PROFILE
    assert consent_of(non_consenting_patient) is True
    page = non_consenting_client.get(PROFILE).content.decode()
    assert "is <strong>on</strong>" in page
    assert "Reading the reasoning behind decisions is now on." in page  # the confirmation message

    non_consenting_client.post(CONSENT, {"consent": "off"})

    assert consent_of(non_consenting_patient) is False


def test_toggle_with_htmx_returns_only_the_fragment(
    non_consenting_patient: Patient, non_consenting_client: Client
) -> None:
    response = non_consenting_client.post(CONSENT, {"consent": "on"}, headers={"HX-Request": "true"})

    assert response.status_code == 200
    body = response.content.decode()
    assert "<html" not in body
    assert "<header" not in body
    assert '<form id="consent-toggle"' in body
    assert "is <strong>on</strong>" in body
    assert 'name="consent" value="off"' in body
    assert 'role="status"' in body
    assert consent_of(non_consenting_patient) is True


def test_each_toggle_writes_an_audit_event(non_consenting_patient: Patient, non_consenting_client: Client) -> None:
    non_consenting_client.post(CONSENT, {"consent": "on"})
    non_consenting_client.post(CONSENT, {"consent": "off"}, headers={"HX-Request": "true"})

    events = consent_events()
    assert [event.payload for event in events] == [
        {"reasoning_read_consent": True},
        {"reasoning_read_consent": False},
    ]
    assert {event.actor for event in events} == {f"user:{non_consenting_patient.user_id}"}
    assert {event.target_id for event in events} == {str(non_consenting_patient.pk)}


def test_posting_the_current_state_again_changes_nothing(
    non_consenting_patient: Patient, non_consenting_client: Client
) -> None:
    # The form posts the wanted state, so a double submit cannot flip it back.
    non_consenting_client.post(CONSENT, {"consent": "on"})
    response = non_consenting_client.post(CONSENT, {"consent": "on"})

    assert response.status_code == 303
    assert consent_of(non_consenting_patient) is True
    assert len(consent_events()) == 1


def test_bad_consent_value_is_400(non_consenting_patient: Patient, non_consenting_client: Client) -> None:
    response = non_consenting_client.post(CONSENT, {"consent": "maybe"})

    assert response.status_code == 400
    assert consent_of(non_consenting_patient) is False
    assert consent_events() == []


def test_csrf_is_enforced(non_consenting_patient: Patient) -> None:
    client = Client(enforce_csrf_checks=True)
    assert non_consenting_patient.user is not None
    client.force_login(non_consenting_patient.user)

    refused = client.post(CONSENT, {"consent": "on"})

    assert refused.status_code == 403
    assert consent_of(non_consenting_patient) is False

    client.get(PROFILE)  # sets the CSRF cookie, as a browser would
    accepted = client.post(CONSENT, {"consent": "on", "csrfmiddlewaretoken": client.cookies["csrftoken"].value})

    assert accepted.status_code == 303
    assert consent_of(non_consenting_patient) is True


def test_anonymous_post_redirects_to_login_and_changes_nothing(non_consenting_patient: Patient) -> None:
    response = Client().post(CONSENT, {"consent": "on"})

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert consent_of(non_consenting_patient) is False


def test_get_on_the_toggle_endpoint_is_405(non_consenting_client: Client) -> None:
    assert non_consenting_client.get(CONSENT).status_code == 405


def test_non_patient_post_is_403(outsider_client: Client) -> None:
    response = outsider_client.post(CONSENT, {"consent": "on"})

    assert response.status_code == 403
    assert "not linked to a patient record" in response.content.decode()
    assert consent_events() == []


def test_profile_page_query_count(non_consenting_client: Client, django_assert_num_queries: Any) -> None:
    # 1 the session, 2 the user, 3 the patient (id, user and consent only: no PHI columns);
    # "Your decisions" (the reasoning app's panel): 4 the patient again, 5 savepoint, 6 the
    # newest 50 flows, 7 the audit event, 8 release. Constant in the number of flows.
    with django_assert_num_queries(8):
        response = non_consenting_client.get(PROFILE)

    assert response.status_code == 200


def test_consent_toggle_query_count(non_consenting_client: Client, django_assert_num_queries: Any) -> None:
    # 1 the session, 2 the user, 3 the patient; the service: 4 savepoint, 5 the
    # conditional update of consent, 6 the audit event, 7 release; "Your decisions"
    # out of band: 8 the patient, 9 savepoint, 10 their flows, 11 the audited read, 12 release.
    with django_assert_num_queries(12):
        response = non_consenting_client.post(CONSENT, {"consent": "on"}, headers={"HX-Request": "true"})

    assert response.status_code == 200
