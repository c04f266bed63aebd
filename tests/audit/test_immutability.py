"""Audit rows are append-only: the database refuses UPDATE and DELETE, whoever asks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from audit.actions import Action
from audit.chain import chain_all
from audit.models import AuditChainLink, AuditEvent
from audit.services import record
from audit.verify import verify_chain


@pytest.fixture
def chained_event_id(db: None) -> int:
    """One event, already linked into the chain."""
    event_id = record(
        Action.FLOW_STARTED, actor="token:agent", target=("reasoning.reasoningflow", "flow-1"), payload={"count": 1}
    )
    assert chain_all() == 1
    return event_id


def _event_row(event_id: int) -> dict[str, Any]:
    row = AuditEvent.objects.values().get(pk=event_id)
    return {**row, "canonical": bytes(row["canonical"])}


def _link_row(event_id: int) -> dict[str, Any]:
    return dict(AuditChainLink.objects.values().get(event_id=event_id))


def _sql(statement: str, event_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, [event_id])


def _save_event(event_id: int) -> None:
    event = AuditEvent.objects.get(pk=event_id)
    event.actor = "system:intruder"
    event.save()


def _save_link(event_id: int) -> None:
    link = AuditChainLink.objects.get(event_id=event_id)
    link.prev_hash = "f" * 64
    link.save()


EVENT_CHANGES: dict[str, tuple[str, Callable[[int], object]]] = {
    "orm-update": ("UPDATE", lambda pk: AuditEvent.objects.filter(pk=pk).update(actor="system:intruder")),
    "orm-save": ("UPDATE", _save_event),
    "orm-queryset-delete": ("DELETE", lambda pk: AuditEvent.objects.filter(pk=pk).delete()),
    "orm-instance-delete": ("DELETE", lambda pk: AuditEvent.objects.get(pk=pk).delete()),
    "sql-update": ("UPDATE", lambda pk: _sql("UPDATE audit_event SET payload = '{\"count\": 2}' WHERE id = %s", pk)),
    "sql-delete": ("DELETE", lambda pk: _sql("DELETE FROM audit_event WHERE id = %s", pk)),
}

LINK_CHANGES: dict[str, tuple[str, Callable[[int], object]]] = {
    "orm-update": ("UPDATE", lambda pk: AuditChainLink.objects.filter(event_id=pk).update(hash="0" * 64)),
    "orm-save": ("UPDATE", _save_link),
    "orm-queryset-delete": ("DELETE", lambda pk: AuditChainLink.objects.filter(event_id=pk).delete()),
    "orm-instance-delete": ("DELETE", lambda pk: AuditChainLink.objects.get(event_id=pk).delete()),
    "sql-update": (
        "UPDATE",
        lambda pk: _sql("UPDATE audit_chain_link SET event_id = event_id + 1 WHERE event_id = %s", pk),
    ),
    "sql-delete": ("DELETE", lambda pk: _sql("DELETE FROM audit_chain_link WHERE event_id = %s", pk)),
}


@pytest.mark.parametrize("change", EVENT_CHANGES.values(), ids=EVENT_CHANGES.keys())
def test_changing_an_audit_event_is_rejected_and_the_row_is_unchanged(
    chained_event_id: int, change: tuple[str, Callable[[int], object]]
) -> None:
    operation, attempt = change
    before = _event_row(chained_event_id)

    with pytest.raises(DatabaseError, match=f"append-only: {operation} on audit_event"), transaction.atomic():
        attempt(chained_event_id)

    assert _event_row(chained_event_id) == before
    assert verify_chain().ok


@pytest.mark.parametrize("change", LINK_CHANGES.values(), ids=LINK_CHANGES.keys())
def test_changing_an_audit_chain_link_is_rejected_and_the_row_is_unchanged(
    chained_event_id: int, change: tuple[str, Callable[[int], object]]
) -> None:
    operation, attempt = change
    before = _link_row(chained_event_id)

    with pytest.raises(DatabaseError, match=f"append-only: {operation} on audit_chain_link"), transaction.atomic():
        attempt(chained_event_id)

    assert _link_row(chained_event_id) == before
    assert verify_chain().ok


def test_bulk_delete_of_the_whole_trail_is_rejected(chained_event_id: int) -> None:
    record(Action.STEP_CREATED, actor="token:agent")
    chain_all()

    with pytest.raises(DatabaseError, match="append-only: DELETE on audit_event"), transaction.atomic():
        AuditEvent.objects.all().delete()

    assert AuditEvent.objects.count() == 2
    assert AuditChainLink.objects.count() == 2
