"""processors.services.register and set_status: the rows and their audit events."""

from __future__ import annotations

from datetime import date

import pytest

from core.errors import InvalidInput, NotFound
from processors.models import Processor
from processors.services import register, set_status
from tests.conftest import events

pytestmark = pytest.mark.django_db

Status = Processor.Status


def test_register_creates_the_catalogue_row_once() -> None:
    row, created = register("voyage", actor="system:demo")
    again, created_again = register("voyage", actor="system:demo")

    assert created and not created_again
    assert again.pk == row.pk
    assert row.status == Status.PENDING_COMPLIANCE
    assert row.leaves_host is True
    assert row.data_categories == ["pathway_text"]
    (event,) = events("processor.registered")
    assert event.payload == {"key": "voyage", "status": "pending_compliance", "leaves_host": True}
    assert event.actor == "system:demo"


def test_builtins_register_as_active_and_never_leaving_the_host() -> None:
    row, _ = register("hash_bucket", actor="system:demo")
    assert (row.status, row.leaves_host) == (Status.ACTIVE, False)


def test_register_refuses_a_key_outside_the_catalogue() -> None:
    with pytest.raises(NotFound):
        register("acme_llm", actor="system:test")
    assert not Processor.objects.exists()


def test_set_status_records_the_change_its_reason_and_the_agreement() -> None:
    register("openai", actor="system:demo")

    row = set_status(
        "openai",
        Status.ACTIVE,
        actor="user:7",
        reason="BAA countersigned by legal",
        agreement_ref="BAA-2026-014",
        agreement_signed_on=date(2026, 2, 1),
        agreement_expires_on=date(2027, 1, 31),
    )

    stored = Processor.objects.get(key="openai")
    assert stored.status == Status.ACTIVE == row.status
    assert (stored.agreement_ref, stored.changed_by) == ("BAA-2026-014", "user:7")
    (event,) = events("processor.status_changed")
    assert event.payload == {
        "key": "openai",
        "from": "pending_compliance",
        "to": "active",
        "reason": "BAA countersigned by legal",
        "agreement_ref": "BAA-2026-014",
        "agreement_signed_on": "2026-02-01",
        "agreement_expires_on": "2027-01-31",
    }
    assert (event.actor, event.target_type, event.target_id) == ("user:7", "processors.processor", "openai")


def test_set_status_registers_a_catalogue_processor_first() -> None:
    set_status("research_dispatcher", Status.REVOKED, actor="system:cli", reason="vendor offboarded")
    assert [e.action for e in events("processor.registered") + events("processor.status_changed")] == [
        "processor.registered",
        "processor.status_changed",
    ]
    assert Processor.objects.get(key="research_dispatcher").status == Status.REVOKED


@pytest.mark.parametrize("reason", ["", "   ", "x" * 201])
def test_set_status_needs_a_short_reason(reason: str) -> None:
    register("openai", actor="system:demo")
    with pytest.raises(InvalidInput) as refused:
        set_status("openai", Status.ACTIVE, actor="system:test", reason=reason)
    assert refused.value.field == "reason"
    assert Processor.objects.get(key="openai").status == Status.PENDING_COMPLIANCE
    assert not events("processor.status_changed")


def test_a_builtin_cannot_be_revoked() -> None:
    with pytest.raises(InvalidInput) as refused:
        set_status("hash_bucket", Status.REVOKED, actor="system:test", reason="no")
    assert refused.value.field == "status"


def test_an_expiry_before_the_signing_date_is_refused_and_nothing_changes() -> None:
    with pytest.raises(InvalidInput) as refused:
        set_status(
            "voyage",
            Status.ACTIVE,
            actor="system:test",
            reason="typo in dates",
            agreement_signed_on=date(2026, 5, 1),
            agreement_expires_on=date(2026, 4, 1),
        )
    assert refused.value.field == "agreement_expires_on"
    assert not Processor.objects.exists()  # the registration rolled back with it
