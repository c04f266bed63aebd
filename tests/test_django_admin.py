"""The Django admin: read-only audit trail and flows, tokens and consent through services, PHI masked."""

from __future__ import annotations

import hashlib
import html
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from audit.chain import chain_all
from audit.models import AuditChainLink, AuditEvent
from core.errors import Conflict
from pathways.models import Pathway
from patients.models import Patient
from patients.services import create_patient
from reasoning.models import ApiToken, ReasoningFlow
from reasoning.tokens import create_api_token
from tests.conftest import events
from tests.factories import add_step, logged_in, make_flow
from tests.html import doc, parse

pytestmark = pytest.mark.django_db

NAME = "Zebulon Quixote"
MRN = "MRN-55443322"
RAW_TOKEN = re.compile(r"rft_[A-Za-z0-9_-]+")


@pytest.fixture
def patient() -> Patient:
    return create_patient(username="zeb", password="a-long-passphrase", name=NAME, mrn=MRN, actor="system:test")


@pytest.fixture
def staff_client() -> Client:
    """Staff, not superuser, allowed to view and change patients: sees PHI masked."""
    user = User.objects.create_user(username="clerk", password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="patients", codename__in=["view_patient", "change_patient"])
    )
    return logged_in(user)


def change_url(model: str, pk: object) -> str:
    return f"/admin/{model}/{pk}/change/"


# --- Every changelist ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shows"),
    [
        ("/admin/audit/auditevent/", "event_target"),
        ("/admin/audit/auditchainlink/", "link_hash"),
        ("/admin/reasoning/reasoningflow/", "flow_id"),
        ("/admin/reasoning/apitoken/", "token_prefix"),
        ("/admin/patients/patient/", "patient_id"),
    ],
)
def test_changelist_lists_the_rows(
    admin_client: Client, patient: Patient, flow: dict[str, Any], url: str, shows: str
) -> None:
    chain_all()
    link = AuditChainLink.objects.order_by("position").first()
    assert link is not None
    expected = {
        "event_target": str(patient.pk),  # the patient.created event
        "link_hash": link.hash,
        "flow_id": flow["id"],
        "token_prefix": ApiToken.objects.get(name="agent").prefix,  # the token that opened the flow
        "patient_id": str(patient.pk),
    }[shows]

    response = admin_client.get(url)

    assert response.status_code == 200
    assert expected in response.content.decode()


# --- Audit trail: read-only ---------------------------------------------------------


def test_audit_event_page_is_view_only_and_shows_the_payload(admin_client: Client, patient: Patient) -> None:
    event = events("patient.created")[0]

    response = admin_client.get(change_url("audit/auditevent", event.pk))

    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="_save"' not in page
    assert "reasoning_read_consent" in page  # the payload key
    assert admin_client.post(change_url("audit/auditevent", event.pk), {"actor": "someone:else"}).status_code == 403
    assert admin_client.get("/admin/audit/auditevent/add/").status_code == 403
    event.refresh_from_db()
    assert event.actor == "system:test"


def test_audit_events_filter_by_action_and_search_by_target(admin_client: Client, patient: Patient) -> None:
    other = create_patient(username="other", password="a-long-passphrase", actor="system:test")

    by_action = admin_client.get("/admin/audit/auditevent/", {"action": "patient.created"}).content.decode()
    by_target = admin_client.get("/admin/audit/auditevent/", {"q": str(patient.pk)}).content.decode()

    assert str(patient.pk) in by_action and str(other.pk) in by_action
    assert str(patient.pk) in by_target and str(other.pk) not in by_target


def test_chain_link_page_is_view_only(admin_client: Client, patient: Patient) -> None:
    chain_all()
    # The patient's creation (the admin's login is audited too: auth.login.succeeded).
    link = AuditChainLink.objects.get(event_id=AuditEvent.objects.get(action="patient.created").pk)

    response = admin_client.get(change_url("audit/auditchainlink", link.pk))

    assert response.status_code == 200
    assert link.hash in response.content.decode()
    assert 'name="_save"' not in response.content.decode()
    assert admin_client.post(change_url("audit/auditchainlink", link.pk), {}).status_code == 403


# --- Flows: view only, steps inline, no encrypted columns ---------------------------


def test_flow_page_shows_its_steps_in_order_and_no_encrypted_content(
    admin_client: Client, admin_user: User, agent: APIClient, flow: dict[str, Any]
) -> None:
    add_step(agent, flow["id"], summary_text="Looked up the formulary")
    add_step(
        agent,
        flow["id"],
        kind="llm_prompt",
        summary_text="Weighed the two options",
        inputs={"patient_name": "Alice Example", "dose": 5},
        pii_fields=["patient_name"],
        reasoning_content="SECRET-CHAIN-OF-THOUGHT " * 3,
    )

    response = admin_client.get(change_url("reasoning/reasoningflow", flow["id"]))

    assert response.status_code == 200
    page = response.content.decode()
    assert page.index("Looked up the formulary") < page.index("Weighed the two options")
    assert "llm_prompt" in page
    counts = [cell.text for cell in parse(page).select(cls="field-reasoning_content_chars")]
    assert counts == ["-", "72"]  # none, then 3 x 24 characters
    assert "SECRET-CHAIN-OF-THOUGHT" not in page
    assert "Alice Example" not in page
    assert 'name="_save"' not in page
    # Opening a flow is audited like the API's operator read.
    (read,) = events("admin.reasoning.flow.read")
    assert (read.actor, read.target_id, read.payload) == (f"user:{admin_user.pk}", flow["id"], {"step_count": 2})


def test_flows_cannot_be_added_changed_or_deleted(admin_client: Client, flow: dict[str, Any]) -> None:
    assert admin_client.get("/admin/reasoning/reasoningflow/add/").status_code == 403
    assert admin_client.post(change_url("reasoning/reasoningflow", flow["id"]), {}).status_code == 403
    assert admin_client.get(f"/admin/reasoning/reasoningflow/{flow['id']}/delete/").status_code == 403
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == "active"


def test_flow_search_matches_exact_id_or_trace_id(admin_client: Client, agent: APIClient) -> None:
    first = agent.post("/api/reasoning/flows", {"trigger_type": "a", "trace_id": "trace-1"}, format="json").json()
    second = agent.post("/api/reasoning/flows", {"trigger_type": "b", "trace_id": "trace-2"}, format="json").json()

    by_trace = admin_client.get("/admin/reasoning/reasoningflow/", {"q": "trace-1"}).content.decode()
    by_id = admin_client.get("/admin/reasoning/reasoningflow/", {"q": second["id"]}).content.decode()

    assert first["id"] in by_trace and second["id"] not in by_trace
    assert second["id"] in by_id and first["id"] not in by_id


def test_flow_list_has_a_compact_id_agent_and_date_filters_and_a_page_link(
    admin_client: Client, agent: APIClient
) -> None:
    critic = agent.post("/api/reasoning/flows", {"trigger_type": "a", "agent": "critic"}, format="json").json()
    other = agent.post("/api/reasoning/flows", {"trigger_type": "a", "agent": "researcher"}, format="json").json()

    listing = doc(admin_client.get("/admin/reasoning/reasoningflow/", {"agent": "critic"}))
    (week,) = [a.attrs["href"] for a in listing.one(id="changelist-filter").select("a") if a.text == "Past 7 days"]
    this_week = doc(admin_client.get("/admin/reasoning/reasoningflow/" + week))

    compact = listing.one("code", title=critic["id"])
    assert compact.text == uuid.UUID(critic["id"]).hex[:8]
    assert listing.select("a", href=f"/dashboard/admin/reasoning/{critic['id']}")
    assert not listing.select("code", title=other["id"])
    assert this_week.select("code", title=critic["id"])  # the week's link keeps the agent filter
    assert not this_week.select("code", title=other["id"])
    filters = listing.one(id="changelist-filter").text
    assert "By agent" in filters and "By created at" in filters and "Past 7 days" in filters


def test_flow_page_draws_the_dimensions_snapshot_as_the_radar(admin_client: Client) -> None:
    closed = make_flow()
    active = make_flow(close=False)
    snapshot = ReasoningFlow.objects.get(pk=closed).dimensions_snapshot
    assert snapshot is not None

    page = doc(admin_client.get(change_url("reasoning/reasoningflow", closed)))
    open_page = doc(admin_client.get(change_url("reasoning/reasoningflow", active)))

    field = page.one(cls="field-dimensions_radar")
    radar = field.one("svg", role="img")
    # One point per axis, carrying the snapshot's scores; the values are listed beside it.
    scores = {point.attrs["data-axis"]: int(point.attrs["data-score"]) for point in radar.select("circle")}
    assert scores == {axis: value["score"] for axis, value in snapshot.items()}
    assert "/7" in field.text
    assert '"score"' not in field.text  # not the raw JSON
    assert page.select("link", href="/static/css/radar.css")
    assert "Taken when the flow closes." in open_page.one(cls="field-dimensions_radar").text


def test_audit_list_hides_routine_reads_unless_asked(
    admin_client: Client, agent: APIClient, operator: APIClient
) -> None:
    flow_id = agent.post("/api/reasoning/flows", {"trigger_type": "a"}, format="json").json()["id"]
    assert operator.get(f"/admin/v1/reasoning/flows/{flow_id}").status_code == 200

    def actions(params: dict[str, str]) -> set[str]:
        page = doc(admin_client.get("/admin/audit/auditevent/", params))
        return {cell.text for cell in page.select("td", "field-action")}

    assert "reasoning.flow.started" in actions({})
    assert "admin.reasoning.flow.read" not in actions({})
    assert actions({"kind": "reads"}) == {"admin.reasoning.flow.read"}
    assert {"reasoning.flow.started", "admin.reasoning.flow.read"} <= actions({"kind": "all"})
    assert actions({"action": "admin.reasoning.flow.read"}) == {"admin.reasoning.flow.read"}


# --- API tokens: created and revoked through the services ---------------------------


def test_token_added_in_admin_works_once_shown_and_is_stored_hashed(
    admin_client: Client, admin_user: User, client_for: Callable[[str | None], APIClient]
) -> None:
    response = admin_client.post(
        "/admin/reasoning/apitoken/add/", {"name": "ops-dashboard", "scopes": ["reasoning.admin"], "_save": "Save"}
    )

    assert response.status_code == 302
    (message,) = [str(m) for m in get_messages(response.wsgi_request) if "Token created" in str(m)]
    match = RAW_TOKEN.search(message)
    assert match is not None
    raw = match.group()
    token = ApiToken.objects.get(name="ops-dashboard")
    assert token.scopes == ["reasoning.admin"]
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in {token.token_hash, token.prefix, token.name}
    assert LogEntry.objects.filter(object_id=str(token.pk)).exists()  # the admin logged the service's row
    (created,) = events("auth.api_token.created")
    assert (created.actor, created.target_id) == (f"user:{admin_user.pk}", str(token.pk))
    # Shown on the page the admin lands on, then never again.
    assert raw in admin_client.get(response["Location"]).content.decode()
    assert raw not in admin_client.get(response["Location"]).content.decode()

    assert client_for(raw).get("/admin/v1/reasoning/flows").status_code == 200


def test_token_pages_never_show_the_hash(admin_client: Client, make_token: Callable[..., str]) -> None:
    make_token("reasoning.read", name="reader-app")
    token = ApiToken.objects.get(name="reader-app")

    listing = admin_client.get("/admin/reasoning/apitoken/").content.decode()
    detail = admin_client.get(change_url("reasoning/apitoken", token.pk))

    assert token.prefix in listing and token.token_hash not in listing
    assert detail.status_code == 200
    assert token.token_hash not in detail.content.decode()
    assert 'name="_save"' not in detail.content.decode()
    assert admin_client.post(change_url("reasoning/apitoken", token.pk), {"name": "renamed"}).status_code == 403


def test_patient_bound_token_with_admin_scope_is_refused_on_the_form(admin_client: Client, patient: Patient) -> None:
    response = admin_client.post(
        "/admin/reasoning/apitoken/add/",
        {"name": "bad", "scopes": ["reasoning.admin"], "patient": str(patient.pk), "_save": "Save"},
    )

    assert response.status_code == 200
    assert "may carry only the reasoning.read scope" in response.content.decode()
    assert not ApiToken.objects.filter(name="bad").exists()


def test_duplicate_token_name_is_refused_on_the_form(admin_client: Client, make_token: Callable[..., str]) -> None:
    make_token("reasoning.read", name="taken")

    response = admin_client.post(
        "/admin/reasoning/apitoken/add/", {"name": "taken", "scopes": ["reasoning.write"], "_save": "Save"}
    )

    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert ApiToken.objects.filter(name="taken").count() == 1
    assert len(events("auth.api_token.created")) == 1


def test_revoke_action_revokes_through_the_service(
    admin_client: Client,
    admin_user: User,
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
) -> None:
    raw = make_token("reasoning.admin", name="leaked")
    make_token("reasoning.admin", name="kept")
    token = ApiToken.objects.get(name="leaked")

    response = admin_client.post(
        "/admin/reasoning/apitoken/", {"action": "revoke_selected", "_selected_action": [str(token.pk)]}
    )

    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert ApiToken.objects.get(name="kept").revoked_at is None
    (revoked,) = events("auth.api_token.revoked")
    assert (revoked.actor, revoked.target_id) == (f"user:{admin_user.pk}", str(token.pk))
    assert client_for(raw).get("/admin/v1/reasoning/flows").status_code == 401


def test_revoking_an_already_revoked_token_writes_nothing(admin_client: Client, make_token: Callable[..., str]) -> None:
    make_token("reasoning.admin", name="old")
    token = ApiToken.objects.get(name="old")
    action = {"action": "revoke_selected", "_selected_action": [str(token.pk)]}
    admin_client.post("/admin/reasoning/apitoken/", action)

    response = admin_client.post("/admin/reasoning/apitoken/", action, follow=True)

    assert "Revoked 0 token(s). 1 already revoked." in response.content.decode()
    assert len(events("auth.api_token.revoked")) == 1


def test_staff_without_change_permission_cannot_revoke(make_token: Callable[..., str]) -> None:
    make_token("reasoning.admin", name="watched")
    token = ApiToken.objects.get(name="watched")
    viewer = User.objects.create_user(username="viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(content_type__app_label="reasoning", codename="view_apitoken"))
    client = logged_in(viewer)

    listing = client.get("/admin/reasoning/apitoken/")
    client.post("/admin/reasoning/apitoken/", {"action": "revoke_selected", "_selected_action": [str(token.pk)]})

    assert listing.status_code == 200 and "revoke_selected" not in listing.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None
    assert events("auth.api_token.revoked") == []


def test_service_refusal_at_save_is_an_error_message_not_a_500(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a concurrent creation of the same name looks like once the form has passed.
    def conflict(**kwargs: Any) -> None:
        raise Conflict("a token named 'racy' already exists", field="name")

    monkeypatch.setattr("reasoning.tokens.create_api_token", conflict)

    response = admin_client.post(
        "/admin/reasoning/apitoken/add/", {"name": "racy", "scopes": ["reasoning.read"], "_save": "Save"}, follow=True
    )

    assert response.status_code == 200
    assert "a token named 'racy' already exists" in html.unescape(response.content.decode()).lower()
    assert not LogEntry.objects.exists()


# --- Patients: PHI masked, consent through the service ------------------------------


def test_patient_list_never_shows_phi(admin_client: Client, patient: Patient) -> None:
    page = admin_client.get("/admin/patients/patient/").content.decode()

    assert str(patient.pk) in page
    assert "Zebulon" not in page and MRN not in page


def test_patient_search_is_by_id_only(admin_client: Client, patient: Patient) -> None:
    by_name = admin_client.get("/admin/patients/patient/", {"q": "Zebulon"})
    by_id = admin_client.get("/admin/patients/patient/", {"q": str(patient.pk)})

    assert by_name.status_code == 200 and str(patient.pk) not in by_name.content.decode()
    assert str(patient.pk) in by_id.content.decode()


def test_superuser_sees_phi_on_the_patient_page(admin_client: Client, patient: Patient) -> None:
    page = admin_client.get(change_url("patients/patient", patient.pk)).content.decode()

    assert NAME in page and MRN in page


def test_staff_sees_phi_masked_on_the_patient_page(staff_client: Client, patient: Patient) -> None:
    response = staff_client.get(change_url("patients/patient", patient.pk))

    assert response.status_code == 200
    page = response.content.decode()
    assert "Zebulon" not in page and MRN not in page
    assert "•••" in page


def test_consent_toggled_in_admin_is_audited(admin_client: Client, admin_user: User, patient: Patient) -> None:
    response = admin_client.post(
        change_url("patients/patient", patient.pk), {"reasoning_read_consent": "on", "_save": "Save"}
    )

    assert response.status_code == 302
    patient.refresh_from_db()
    assert patient.reasoning_read_consent is True
    assert patient.consent_changed_at is not None
    (changed,) = events("patient.reasoning_read_consent.changed")
    assert (changed.actor, changed.target_id, changed.payload) == (
        f"user:{admin_user.pk}",
        str(patient.pk),
        {"reasoning_read_consent": True},
    )


def test_staff_can_withdraw_consent_but_not_edit_phi(staff_client: Client) -> None:
    patient = create_patient(username="p2", password="a-long-passphrase", name=NAME, consent=True, actor="system:test")

    response = staff_client.post(change_url("patients/patient", patient.pk), {"name": "Someone Else", "_save": "Save"})

    assert response.status_code == 302
    patient.refresh_from_db()
    assert patient.reasoning_read_consent is False
    assert patient.name == NAME
    assert events("patient.reasoning_read_consent.changed")[0].payload == {"reasoning_read_consent": False}


def test_saving_unchanged_consent_writes_no_event(admin_client: Client, patient: Patient) -> None:
    response = admin_client.post(change_url("patients/patient", patient.pk), {"_save": "Save"})

    assert response.status_code == 302
    assert events("patient.reasoning_read_consent.changed") == []


def test_patient_added_in_admin_goes_through_create_patient(admin_client: Client, admin_user: User) -> None:
    response = admin_client.post(
        "/admin/patients/patient/add/",
        {"username": "newpatient", "password": "a-long-passphrase", "name": NAME, "mrn": MRN, "_save": "Save"},
    )

    assert response.status_code == 302
    patient = Patient.objects.get(user__username="newpatient")
    assert (patient.name, patient.mrn, patient.reasoning_read_consent) == (NAME, MRN, False)
    assert patient.user is not None and patient.user.check_password("a-long-passphrase")
    (created,) = events("patient.created")
    assert (created.actor, created.target_id) == (f"user:{admin_user.pk}", str(patient.pk))
    # The admin's own history entry names the row the service created, without PHI.
    (entry,) = LogEntry.objects.filter(object_id=str(patient.pk))
    assert entry.object_repr == f"patient {patient.pk}"


def test_patient_add_refuses_a_taken_username(admin_client: Client, patient: Patient) -> None:
    response = admin_client.post(
        "/admin/patients/patient/add/", {"username": "zeb", "password": "a-long-passphrase", "_save": "Save"}
    )

    assert response.status_code == 200
    assert "already exists" in response.content.decode()
    assert Patient.objects.count() == 1


def test_patients_cannot_be_deleted(admin_client: Client, patient: Patient) -> None:
    assert admin_client.get(f"/admin/patients/patient/{patient.pk}/delete/").status_code == 403


# --- No per-row queries -------------------------------------------------------------


def make_patient(i: int) -> None:
    create_patient(username=f"patient-{i}", password="a-long-passphrase", actor="system:test")


def make_patient_bound_token(i: int) -> None:
    owner = create_patient(username=f"owner-{i}", password="a-long-passphrase", actor="system:test")
    create_api_token(name=f"app-{i}", scopes=["reasoning.read"], actor="system:test", patient_id=owner.pk)


@pytest.mark.parametrize(
    ("url", "make_row"),
    [("/admin/patients/patient/", make_patient), ("/admin/reasoning/apitoken/", make_patient_bound_token)],
)
def test_list_page_queries_do_not_grow_with_rows(
    admin_client: Client, url: str, make_row: Callable[[int], None]
) -> None:
    make_row(0)
    admin_client.get(url)  # warm the session and content-type caches
    with CaptureQueriesContext(connection) as one_row:
        admin_client.get(url)
    for i in range(1, 4):
        make_row(i)

    with CaptureQueriesContext(connection) as four_rows:
        admin_client.get(url)

    assert len(four_rows) == len(one_row)


def test_superuser_viewing_patient_phi_is_audited(admin_client: Client) -> None:
    patient = create_patient(
        username="phi-viewed", password="pw-12345-long", name="Zebulon Quixote", actor="system:test"
    )
    response = admin_client.get(f"/admin/patients/patient/{patient.pk}/change/")
    assert response.status_code == 200
    event = AuditEvent.objects.filter(action="admin.patient.phi_viewed").get()
    assert event.target_id == str(patient.pk)
    assert "Zebulon" not in json.dumps(event.payload)


def test_pathway_changelist_and_detail_are_view_only(admin_client: Client, flow: dict[str, Any]) -> None:
    pathway = Pathway.objects.create(
        trigger_type="user_question", trigger_ref="bp/visit/1", seed_flow_id=flow["id"], confidence=0.95
    )
    listing = admin_client.get("/admin/pathways/pathway/")
    assert listing.status_code == 200
    assert "bp/visit/1" in listing.content.decode()
    detail = admin_client.get(change_url("pathways/pathway", pathway.pk))
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    assert admin_client.post(change_url("pathways/pathway", pathway.pk), {}).status_code == 403
