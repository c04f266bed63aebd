"""The Research Console: triggering deeper research."""

from __future__ import annotations

import pytest
from django.test import Client

from core.errors import InvalidInput
from pathways.models import Pathway
from research_backlog import services
from research_backlog.models import ResearchRequest
from tests.conftest import audit_trail_text, events
from tests.factories import QUESTION
from tests.html import doc
from tests.research_backlog.support import (
    BACKLOG_READ_PROXY,
    CREATED,
    DEEPER,
    DEEPER_REQUESTED,
    HTMX,
    console_url,
    deeper_form_on_page,
    form_fields,
    messages_on,
    submit,
    written,
)

pytestmark = pytest.mark.django_db


def test_deeper_research_by_plain_form_queues_a_request_and_audits_both_events(
    csrf_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    form = deeper_form_on_page(csrf_client)

    response = submit(csrf_client, form, question=QUESTION)

    assert response.status_code == 302
    assert response["Location"] == console_url("lab_result", "vitals/heart-rate")
    row = ResearchRequest.objects.get()
    assert (row.status, row.reason, row.source, row.requested_by) == (
        "pending",
        "operator_requested",
        "research_console",
        actor,
    )
    assert (row.trigger_type, row.trigger_ref, row.question) == ("lab_result", "vitals/heart-rate", QUESTION)
    (requested,) = events(DEEPER_REQUESTED)
    (created,) = events(CREATED)
    for event in (requested, created):
        assert (event.actor, event.target_id) == (actor, str(row.pk))
        assert event.payload["reason"] == "operator_requested"
        assert event.payload["source"] == "research_console"
    assert created.payload["question_chars"] == len(QUESTION)
    assert QUESTION not in audit_trail_text()
    page = doc(csrf_client.get(response["Location"]))
    assert [li.text for li in page.one("ul", "messages").select("li")] == [
        "Deeper research requested: it is in the backlog as pending."
    ]
    assert page.by_id("backlog").one("li", data_status="pending").one("strong").text == "1"


def test_deeper_research_form_without_the_csrf_token_is_refused(
    csrf_client: Client, library: dict[str, Pathway]
) -> None:
    form = deeper_form_on_page(csrf_client)
    data = form_fields(form)
    del data["csrfmiddlewaretoken"]
    before = written()

    response = csrf_client.post(form.attrs["action"], data)

    assert response.status_code == 403
    assert written() == before


def test_deeper_research_accepts_a_browser_textarea_with_crlf(csrf_client: Client, library: dict[str, Pathway]) -> None:
    question = "Which potassium target applies?\r\nThe patient is 83 and on dialysis.\r\n"

    response = submit(csrf_client, deeper_form_on_page(csrf_client), question=question)

    assert response.status_code == 302
    assert ResearchRequest.objects.get().question == question.strip()


def test_deeper_research_by_htmx_answers_with_the_queued_note_and_the_backlog_oob(
    csrf_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    form = deeper_form_on_page(csrf_client)
    assert form.attrs["hx-post"] == form.attrs["action"]
    assert form.attrs["hx-target"] == "#deeper-research"

    response = submit(csrf_client, form, htmx=True, question=QUESTION)

    assert response.status_code == 200
    row = ResearchRequest.objects.get()
    fragment = doc(response)
    note = fragment.by_id("deeper-research")
    assert note.attrs["role"] == "status"
    assert f"The question is in the backlog as pending (request {row.pk})." in note.text
    backlog = fragment.by_id("backlog")
    assert backlog.attrs["hx-swap-oob"] == "true"
    assert backlog.one("li", data_status="pending").one("strong").text == "1"
    assert len(events(DEEPER_REQUESTED)) == len(events(CREATED)) == 1
    assert events(BACKLOG_READ_PROXY)[-1].payload == {"total": 1, "loop_health": "healthy"}


@pytest.mark.parametrize(
    ("question", "problem"),
    [
        ("", "question: This field may not be blank."),
        ("   \r\n  ", "question: This field may not be blank."),
        ("Ring the bell \x07 twice", "question: Must be text without control characters."),
        ("Escape \x1b[31m red", "question: Must be text without control characters."),
        ("q" * 2001, "question: Ensure this field has no more than 2000 characters."),
    ],
)
def test_deeper_research_rejects_a_bad_question_by_htmx_with_400(
    operator_client: Client, library: dict[str, Pathway], question: str, problem: str
) -> None:
    form = deeper_form_on_page(operator_client)
    before = written()

    response = submit(operator_client, form, htmx=True, question=question)

    assert response.status_code == 400
    box = doc(response).by_id("deeper-research")
    assert [p.text for p in box.select("p", "error")] == [problem]
    assert box.one("form").attrs["hx-post"] == DEEPER  # the form comes back to correct and resend
    assert written() == before


def test_an_empty_question_reaches_the_server_and_is_refused_next_to_the_field(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    # Not `required`: the browser's check would stop an empty question with a bubble naming no field.
    form = deeper_form_on_page(operator_client)
    textarea = form.one("textarea")
    assert "required" not in textarea.attrs
    assert textarea.attrs["aria-required"] == "true"
    before = written()

    response = submit(operator_client, form, htmx=True, question="")

    assert response.status_code == 400
    box = doc(response).by_id("deeper-research")
    error = box.by_id("deeper-research-error-question")
    assert error.text == "question: This field may not be blank."
    assert box.one("textarea").attrs["aria-describedby"] == "deeper-research-error-question"
    assert box.one("textarea").attrs["aria-invalid"] == "true"
    assert written() == before


@pytest.mark.parametrize("question", ["", "  \r\n\t "], ids=["empty", "whitespace"])
def test_the_service_refuses_a_blank_question_whoever_calls_it(question: str, actor: str) -> None:
    before = written()

    with pytest.raises(InvalidInput) as refused:
        services.request_deeper_research(
            trigger_type="lab_result", trigger_ref="vitals/heart-rate", question=question, actor=actor
        )

    assert (refused.value.field, refused.value.status_code) == ("question", 400)
    assert written() == before


def test_deeper_research_rejects_a_bad_question_by_plain_form_with_a_message(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    form = deeper_form_on_page(operator_client)
    before = written()

    response = submit(operator_client, form, question="Ring the bell \x07")

    assert response.status_code == 302
    assert response["Location"] == console_url("lab_result", "vitals/heart-rate")
    assert written() == before
    assert messages_on(operator_client, response["Location"]) == ["question: Must be text without control characters."]


def test_deeper_research_rejects_a_tampered_trigger_type(operator_client: Client) -> None:
    before = written()

    response = operator_client.post(DEEPER, {"trigger_type": "not a label!", "question": QUESTION}, headers=HTMX)

    assert response.status_code == 400
    assert "trigger_type:" in doc(response).by_id("deeper-research").text
    assert written() == before
