"""Two workers refused at the same moment audit the hour once: the second waits on the
first's uncommitted refusal row, then inserts nothing."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from processors.services import ProcessorNotActive, check_outbound
from tests.conftest import events

WAIT_S = 30.0


def waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            ["%processors_processorrefusal%"],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_concurrent_refusals_are_audited_once() -> None:
    first_refused = threading.Event()
    release_first = threading.Event()
    causes: list[str] = []

    def refuse() -> None:
        try:
            check_outbound("voyage", category="pathway_text", count=1)
        except ProcessorNotActive as exc:
            causes.append(exc.cause)

    def first() -> None:
        try:
            # The refusal row and its event stay uncommitted until released.
            with transaction.atomic():
                refuse()
                first_refused.set()
                release_first.wait(WAIT_S)
        finally:
            connections.close_all()

    def second() -> None:
        try:
            refuse()
        finally:
            connections.close_all()

    one = threading.Thread(target=first)
    one.start()
    assert first_refused.wait(WAIT_S)
    two = threading.Thread(target=second)
    two.start()
    deadline = time.monotonic() + WAIT_S
    while waiting_on_a_lock() == 0:  # the second insert waits on the first's unique-index entry
        assert time.monotonic() < deadline, "the second refusal never waited on the first"
        time.sleep(0.01)
    release_first.set()
    one.join(WAIT_S)
    two.join(WAIT_S)

    assert causes == ["not_registered", "not_registered"]
    assert len(events("processor.outbound_refused")) == 1
