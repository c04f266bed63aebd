"""processors.services.check_outbound: the one gate, and its once-an-hour refusal audit."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from processors.models import Processor, ProcessorRefusal
from processors.services import ProcessorNotActive, check_outbound
from tests.conftest import events
from tests.processors.support import registered

pytestmark = pytest.mark.django_db

Status = Processor.Status
REFUSED = "processor.outbound_refused"
T0 = datetime(2026, 3, 2, 9, 10, tzinfo=UTC)


def refuse(key: str = "openai", category: str = "pathway_text") -> str:
    with pytest.raises(ProcessorNotActive) as refused:
        check_outbound(key, category=category, count=1)
    assert refused.value.code == "processor_not_active"
    return refused.value.cause


def test_builtins_pass_without_asking_the_database() -> None:
    with CaptureQueriesContext(connection) as queries:
        check_outbound("hash_bucket", category="pathway_text", count=3)
        check_outbound("local_minilm", category="pathway_text", count=3)
    assert len(queries) == 0


def test_a_refusal_is_audited_once_per_processor_cause_and_hour() -> None:
    registered("openai", Status.REVOKED)
    with time_machine.travel(T0, tick=False):
        for _ in range(5):
            refuse("openai")
        refuse("voyage")  # another processor: its own event
    with time_machine.travel(T0 + timedelta(minutes=49), tick=False):
        refuse("openai")  # still 09:xx
    with time_machine.travel(T0 + timedelta(minutes=51), tick=False):
        refuse("openai")  # 10:01: a new hour

    audited = [(e.payload["key"], e.payload["cause"], e.payload["hour"]) for e in events(REFUSED)]
    assert audited == [
        ("openai", "revoked", "2026-03-02T09:00:00+00:00"),
        ("voyage", "not_registered", "2026-03-02T09:00:00+00:00"),
        ("openai", "revoked", "2026-03-02T10:00:00+00:00"),
    ]
    assert ProcessorRefusal.objects.count() == 3


def test_refusal_rows_older_than_a_day_are_dropped_and_their_events_stay() -> None:
    registered("openai", Status.REVOKED)
    with time_machine.travel(T0, tick=False):
        refuse("openai")
        refuse("voyage")
    with time_machine.travel(T0 + timedelta(hours=23), tick=False):
        refuse("openai")  # within a day: the 09:00 rows stay
    assert ProcessorRefusal.objects.count() == 3
    with time_machine.travel(T0 + timedelta(days=1, hours=1), tick=False):
        refuse("openai")
    kept = sorted((row.processor_key, row.hour.hour) for row in ProcessorRefusal.objects.all())
    assert kept == [("openai", 8), ("openai", 10)]  # 2026-03-03 08:00 and 10:00
    assert len(events(REFUSED)) == 4


def test_a_new_cause_in_the_same_hour_is_audited_again() -> None:
    with time_machine.travel(T0, tick=False):
        assert refuse("openai") == "not_registered"
        registered("openai", Status.PENDING_COMPLIANCE)
        assert refuse("openai") == "pending_compliance"
        assert refuse("openai") == "pending_compliance"
    assert [e.payload["cause"] for e in events(REFUSED)] == ["not_registered", "pending_compliance"]


def test_an_active_processor_past_its_agreement_is_refused() -> None:
    registered("openai", Status.ACTIVE, agreement_signed_on=date(2025, 1, 1), agreement_expires_on=date(2026, 3, 1))
    with time_machine.travel(datetime(2026, 3, 1, 23, 0, tzinfo=UTC), tick=False):
        check_outbound("openai", category="pathway_text", count=1)  # the last day still counts
    with time_machine.travel(T0, tick=False):
        assert refuse("openai") == "agreement_expired"


def test_a_category_the_processor_does_not_receive_is_refused() -> None:
    registered("openai", Status.ACTIVE)
    assert refuse("openai", category="research_question") == "category_not_covered"


def test_the_override_does_not_cover_a_revoked_processor(settings: Any) -> None:
    settings.PROCESSOR_DEV_OVERRIDE = True
    registered("voyage", Status.REVOKED)
    assert refuse("voyage") == "revoked"
    assert not events("processor.text_sent_under_override")
