"""The Django admin change (a reason asked for, saved through the service) and the commands."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from processors.models import Processor
from processors.services import register
from tests.conftest import events

pytestmark = pytest.mark.django_db

Status = Processor.Status


def change_url(row: Processor) -> str:
    return f"/admin/processors/processor/{row.pk}/change/"


def form(**fields: str) -> dict[str, str]:
    return {
        "status": "active",
        "agreement_ref": "BAA-2026-014",
        "agreement_signed_on": "2026-02-01",
        "agreement_expires_on": "",
        **fields,
    }


def test_an_operator_changes_a_status_with_a_reason(operator_client: Client) -> None:
    row, _ = register("voyage", actor="system:demo")

    response = operator_client.post(change_url(row), form(reason="BAA signed"))

    assert response.status_code == 302
    stored = Processor.objects.get(key="voyage")
    assert (stored.status, stored.agreement_ref) == (Status.ACTIVE, "BAA-2026-014")
    assert stored.changed_by.startswith("user:")
    (event,) = events("processor.status_changed")
    assert event.payload["reason"] == "BAA signed"
    assert event.actor == stored.changed_by


def test_a_change_without_a_reason_is_refused_by_the_form(operator_client: Client) -> None:
    row, _ = register("voyage", actor="system:demo")

    response = operator_client.post(change_url(row), form(reason=""))

    assert response.status_code == 200
    assert b"This field is required" in response.content
    assert Processor.objects.get(key="voyage").status == Status.PENDING_COMPLIANCE
    assert not events("processor.status_changed")


def test_the_admin_neither_adds_nor_deletes(operator_client: Client) -> None:
    row, _ = register("voyage", actor="system:demo")
    assert operator_client.get("/admin/processors/processor/add/").status_code == 403
    assert operator_client.get(f"/admin/processors/processor/{row.pk}/delete/").status_code == 403


def test_processor_set_changes_the_status_with_its_reason() -> None:
    out = StringIO()
    call_command(
        "processor_set",
        "openai",
        "--status",
        "active",
        "--reason",
        "BAA on file",
        "--agreement-ref",
        "BAA-7",
        "--expires-on",
        "2027-06-30",
        stdout=out,
    )

    assert out.getvalue().strip() == "openai: active"
    stored = Processor.objects.get(key="openai")
    assert (stored.status, stored.agreement_ref, str(stored.agreement_expires_on)) == ("active", "BAA-7", "2027-06-30")
    (event,) = events("processor.status_changed")
    assert (event.actor, event.payload["reason"]) == ("system:cli", "BAA on file")


def test_processor_set_refuses_a_blank_reason_naming_it() -> None:
    with pytest.raises(CommandError, match="reason"):
        call_command("processor_set", "openai", "--status", "active", "--reason", " ")
    assert not Processor.objects.exists()


def test_processor_list_shows_every_catalogue_processor() -> None:
    register("voyage", actor="system:demo")
    out = StringIO()

    call_command("processor_list", stdout=out)

    lines = {line.split()[0]: line.split()[1:3] for line in out.getvalue().splitlines()[1:]}
    assert lines["voyage"] == ["pending_compliance", "yes"]
    assert lines["openai"] == ["not_registered", "yes"]
    assert lines["hash_bucket"] == ["not_registered", "no"]


def test_load_demo_registers_builtins_active_and_vendors_pending() -> None:
    from processors.demo import load_demo_data

    load_demo_data()
    load_demo_data()  # idempotent

    statuses = dict(Processor.objects.values_list("key", "status"))
    assert statuses == {
        "hash_bucket": "active",
        "local_minilm": "active",
        "openai": "pending_compliance",
        "voyage": "pending_compliance",
        "research_dispatcher": "pending_compliance",
    }
    assert len(events("processor.registered")) == 5
