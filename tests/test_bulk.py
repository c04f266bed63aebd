"""core.bulk.insert_rows: one statement for any number of rows, storing what save() would."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.bulk import insert_rows
from reasoning.models import ReasoningFlow, ReasoningStep

pytestmark = pytest.mark.django_db

AWKWARD = ["plain", 'with "quotes"', "back\\slash", "comma, and {braces}", "NULL", "", "ünïcødé ✓", " spaced "]


def flow() -> ReasoningFlow:
    made = ReasoningFlow(trigger_type="user_question", trace_id="t", request_hash="h")
    made.save()
    return made


def step(owner: ReasoningFlow, position: int, **fields: object) -> ReasoningStep:
    base: dict[str, object] = {"kind": "retrieval", "agent": "a", "summary_text": "s", "request_hash": "h"}
    return ReasoningStep(id=uuid.uuid4(), flow=owner, position=position, **{**base, **fields})


def test_any_text_survives_an_array_column() -> None:
    parent = step(owner := flow(), 1)
    insert_rows([parent])
    child = step(owner, 2, pii_fields=AWKWARD, extra_parent_ids=[parent.pk], inputs={"k": [1, "two", None]})

    insert_rows([child])

    stored = ReasoningStep.objects.get(pk=child.pk)
    assert stored.pii_fields == AWKWARD
    assert stored.extra_parent_ids == [parent.pk]
    assert stored.inputs == {"k": [1, "two", None]}


def test_encrypted_fields_are_encrypted_as_save_would() -> None:
    owner = flow()
    row = step(owner, 1, inputs_pii='{"name": "Jane Example"}', reasoning_content="Thinking about Jane Example")

    insert_rows([row])

    with connection.cursor() as cursor:
        cursor.execute("SELECT inputs_pii, reasoning_content FROM reasoning_step WHERE id = %s", [row.pk])
        ciphertexts = cursor.fetchone()
    assert all("Jane" not in value for value in ciphertexts)
    stored = ReasoningStep.objects.get(pk=row.pk)
    assert (stored.inputs_pii, stored.reasoning_content) == ('{"name": "Jane Example"}', "Thinking about Jane Example")


def test_one_statement_whatever_the_number_of_rows() -> None:
    owner = flow()
    with CaptureQueriesContext(connection) as one:
        insert_rows([step(owner, 1)])
    with CaptureQueriesContext(connection) as many:
        insert_rows([step(owner, position) for position in range(2, 202)])

    assert len(one) == len(many) == 1
    assert (
        one.captured_queries[0]["sql"].split(" FROM unnest")[0]
        == many.captured_queries[0]["sql"].split(" FROM unnest")[0]
    )
    assert ReasoningStep.objects.filter(flow=owner).count() == 201


def test_nothing_to_insert_is_no_statement() -> None:
    with CaptureQueriesContext(connection) as queries:
        insert_rows([])

    assert len(queries) == 0
