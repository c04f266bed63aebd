"""The patient's "Your decisions" list on their profile: their own decisions only, newest first,
with a plain-language status, linked to each narrative, audited like a narrative read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from patients.models import Patient
from tests.factories import make_flow
from tests.html import doc

pytestmark = pytest.mark.django_db

PROFILE = "/dashboard/profile"
CONSENT = "/dashboard/profile/consent"


def decisions(response: Any) -> list[tuple[str, str]]:
    page = doc(response)
    return [(item.attrs["data-decision"], item.attrs["data-status"]) for item in page.select("li", "decision")]


def test_a_patient_sees_their_decisions_newest_first_with_links(
    patient_client: Client, consenting_patient: Patient, non_consenting_patient: Patient
) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=2)):
        older = make_flow(consenting_patient, trigger_summary="Asked whether a dose change is needed")
    newer = make_flow(consenting_patient, close=False)
    stopped = make_flow(consenting_patient, abort_reason="timeout")
    make_flow(non_consenting_patient)  # someone else's

    response = patient_client.get(PROFILE)

    assert decisions(response) == [
        (str(stopped), "stopped"),
        (str(newer), "in_progress"),
        (str(older), "ready"),
    ]
    page = doc(response)
    item = page.one("li", "decision", data_decision=str(older))
    assert item.one("a").attrs["href"] == f"/dashboard/reasoning/{older}"
    assert "Asked whether a dose change is needed" in item.text and "Ready to read" in item.text
    assert "Still working on this" in page.one("li", "decision", data_decision=str(newer)).text
    event = AuditEvent.objects.get(action="patient.reasoning.flows.listed")
    assert event.target_id == str(consenting_patient.pk)
    assert event.payload == {"count": 3, "consent": True}


def test_each_decision_says_which_agent_made_it(patient_client: Client, consenting_patient: Patient) -> None:
    question = make_flow(consenting_patient, trigger_summary="Asked about sleep")
    message = make_flow(consenting_patient, steps=[], trigger_summary="Sorted a message", agent="triage")
    unnamed = make_flow(consenting_patient, steps=[], agent="")

    page = doc(patient_client.get(PROFILE))

    # The patient's label for each agent tells two decisions of one day apart.
    assert "Research assistant · " in page.one("li", "decision", data_decision=str(question)).text
    assert "Message triage · " in page.one("li", "decision", data_decision=str(message)).text
    assert not page.one("li", "decision", data_decision=str(unnamed)).select("span", "decision-agent")


def test_a_blocked_decision_shows_no_summary_and_sends_to_the_care_team(
    patient_client: Client, consenting_patient: Patient
) -> None:
    blocked = make_flow(
        consenting_patient,
        steps=["Mailed jane.roe@example.com the results"],
        trigger_summary="Asked about the results",
    )

    item = doc(patient_client.get(PROFILE)).one("li", "decision", data_decision=str(blocked))

    assert item.attrs["data-status"] == "ask_care_team"
    assert "Asked about the results" not in item.text and "A decision about your care" in item.text
    assert "Please ask your care team" in item.text


def test_without_consent_the_list_has_no_links_and_says_why(
    non_consenting_client: Client, non_consenting_patient: Patient
) -> None:
    make_flow(non_consenting_patient)

    page = doc(non_consenting_client.get(PROFILE))

    section = page.one("section", "your-decisions")
    assert not section.select("a")
    assert "Turn on explanations above" in section.text


def test_toggling_consent_with_htmx_refreshes_the_list_out_of_band(
    non_consenting_client: Client, non_consenting_patient: Patient
) -> None:
    flow_id = make_flow(non_consenting_patient)

    turned_on = doc(non_consenting_client.post(CONSENT, {"consent": "on"}, headers={"HX-Request": "true"}))
    turned_off = doc(non_consenting_client.post(CONSENT, {"consent": "off"}, headers={"HX-Request": "true"}))

    # The toggle swaps itself; the list comes along out of band, its links following the consent.
    on = turned_on.one("section", id="your-decisions")
    assert on.attrs["hx-swap-oob"] == "true"
    assert on.one("li", "decision").one("a").attrs["href"] == f"/dashboard/reasoning/{flow_id}"
    off = turned_off.one("section", id="your-decisions")
    assert not off.select("a") and "Turn on explanations above" in off.text
    assert turned_off.one("form", id="consent-toggle")


def test_no_decisions_yet(patient_client: Client) -> None:
    assert "No decisions about you have been recorded yet" in doc(patient_client.get(PROFILE)).text


def test_a_narrative_opened_from_the_list_says_its_disclaimer_once(
    patient_client: Client, consenting_patient: Patient
) -> None:
    flow_id = make_flow(consenting_patient)
    link = doc(patient_client.get(PROFILE)).one("li", "decision", data_decision=str(flow_id)).one("a")

    body = patient_client.get(link.attrs["href"]).content.decode()

    assert body.count("medical advice") == 1  # the narrative's own notice; the site footer leaves it out
