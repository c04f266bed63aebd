"""pathways.services.reuse_pathway / undo_reuse: a console reuse taken back within a minute."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from audit.models import AuditEvent
from core.errors import Conflict, NotFound
from pathways import services
from pathways.models import Pathway, PathwayHit
from tests.factories import make_pathway

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 19, 4, tzinfo=UTC)
EARLIER = NOW - timedelta(days=3)
OLIVE = "user:1"
OSCAR = "user:2"
UNDONE = "admin.reasoning.pathway.reuse_undone"


@pytest.fixture
def clock_start() -> datetime:
    return NOW


@pytest.fixture
def pathway() -> Pathway:
    return make_pathway("lab_result", "labs/potassium", hit_count=3, last_hit_at=EARLIER)


def counters(pathway: Pathway) -> tuple[int, datetime | None]:
    pathway.refresh_from_db()
    return pathway.hit_count, pathway.last_hit_at


def state() -> dict[str, Any]:
    return {
        "pathways": list(Pathway.objects.order_by("pk").values_list("pk", "hit_count", "last_hit_at")),
        "hits": list(PathwayHit.objects.order_by("pk").values_list("pk", "undone_at", "previous_last_hit_at")),
        "audit": list(AuditEvent.objects.order_by("id").values_list("id", flat=True)),
    }


def test_reuse_counts_the_hit_and_keeps_it_for_an_undo(clock: time_machine.Coordinates, pathway: Pathway) -> None:
    reused, hit = services.reuse_pathway(pathway.pk, actor=OLIVE)

    assert (reused.hit_count, reused.last_hit_at) == (4, NOW)
    assert counters(pathway) == (4, NOW)
    assert (hit.actor, hit.previous_last_hit_at, hit.created_at, hit.undone_at) == (OLIVE, EARLIER, NOW, None)
    event = AuditEvent.objects.get(action="admin.reasoning.pathway.hit.proxy")
    assert (event.actor, event.target_id, event.payload) == (OLIVE, str(pathway.pk), {"hit_count": 4})


@pytest.mark.parametrize("after", [timedelta(0), timedelta(seconds=30), timedelta(seconds=60)])
def test_undo_within_the_minute_restores_the_counters_and_audits(
    clock: time_machine.Coordinates, pathway: Pathway, after: timedelta
) -> None:
    _, hit = services.reuse_pathway(pathway.pk, actor=OLIVE)
    clock.shift(after)

    undone = services.undo_reuse(hit.pk, actor=OLIVE)

    assert (undone.hit_count, undone.last_hit_at) == (3, EARLIER)
    assert counters(pathway) == (3, EARLIER)
    hit.refresh_from_db()
    assert hit.undone_at == NOW + after
    event = AuditEvent.objects.get(action=UNDONE)
    assert (event.actor, event.target_type, event.target_id) == (OLIVE, "pathways.pathway", str(pathway.pk))
    assert event.payload == {"hit_id": str(hit.pk), "hit_count": 3}


@pytest.mark.parametrize("after", [timedelta(seconds=60, microseconds=1), timedelta(seconds=61), timedelta(hours=2)])
def test_undo_after_the_minute_is_a_conflict_and_changes_nothing(
    clock: time_machine.Coordinates, pathway: Pathway, after: timedelta
) -> None:
    _, hit = services.reuse_pathway(pathway.pk, actor=OLIVE)
    clock.shift(after)
    before = state()

    with pytest.raises(Conflict, match="Too late to undo"):
        services.undo_reuse(hit.pk, actor=OLIVE)

    assert state() == before
    assert counters(pathway) == (4, NOW)


def test_undo_by_another_operator_is_a_conflict_and_changes_nothing(
    clock: time_machine.Coordinates, pathway: Pathway
) -> None:
    _, hit = services.reuse_pathway(pathway.pk, actor=OLIVE)
    before = state()

    with pytest.raises(Conflict, match="Only the operator who reused"):
        services.undo_reuse(hit.pk, actor=OSCAR)

    assert state() == before


def test_undo_twice_is_a_conflict_and_takes_one_hit_back_only(
    clock: time_machine.Coordinates, pathway: Pathway
) -> None:
    _, hit = services.reuse_pathway(pathway.pk, actor=OLIVE)
    services.undo_reuse(hit.pk, actor=OLIVE)
    before = state()

    with pytest.raises(Conflict, match="already undone"):
        services.undo_reuse(hit.pk, actor=OLIVE)

    assert state() == before
    assert counters(pathway) == (3, EARLIER)
    assert AuditEvent.objects.filter(action=UNDONE).count() == 1


def test_undo_of_an_unknown_reuse_is_not_found(pathway: Pathway) -> None:
    with pytest.raises(NotFound):
        services.undo_reuse(pathway.pk, actor=OLIVE)  # a pathway id is no reuse id


def test_undoing_the_earlier_of_two_reuses_keeps_the_later_one_as_the_last(
    clock: time_machine.Coordinates, pathway: Pathway
) -> None:
    _, first = services.reuse_pathway(pathway.pk, actor=OLIVE)
    clock.shift(timedelta(seconds=10))
    _, second = services.reuse_pathway(pathway.pk, actor=OLIVE)

    services.undo_reuse(first.pk, actor=OLIVE)
    assert counters(pathway) == (4, NOW + timedelta(seconds=10))

    # ... and undoing the later one too goes back past both, to the last hit before them.
    services.undo_reuse(second.pk, actor=OLIVE)
    assert counters(pathway) == (3, EARLIER)


def test_undoing_the_later_of_two_reuses_goes_back_to_the_earlier(
    clock: time_machine.Coordinates, pathway: Pathway
) -> None:
    services.reuse_pathway(pathway.pk, actor=OLIVE)
    clock.shift(timedelta(seconds=10))
    _, second = services.reuse_pathway(pathway.pk, actor=OSCAR)

    services.undo_reuse(second.pk, actor=OSCAR)

    assert counters(pathway) == (4, NOW)


def test_undo_and_its_audit_event_are_one_transaction(
    clock: time_machine.Coordinates, pathway: Pathway, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, hit = services.reuse_pathway(pathway.pk, actor=OLIVE)
    before = state()

    def audit_fails(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("the audit write failed")

    monkeypatch.setattr(services, "record", audit_fails)
    with pytest.raises(RuntimeError, match="audit write failed"):
        services.undo_reuse(hit.pk, actor=OLIVE)

    # No event, so no change: the hit still counts and can still be undone.
    assert state() == before
    assert counters(pathway) == (4, NOW)
    monkeypatch.undo()
    services.undo_reuse(hit.pk, actor=OLIVE)
    assert counters(pathway) == (3, EARLIER)


def test_a_demoted_pathway_cannot_be_reused(clock: time_machine.Coordinates) -> None:
    demoted = make_pathway("lab_result", "labs/old", demoted_at=NOW, demotion_reason=Pathway.DemotionReason.COLD)
    before = state()

    with pytest.raises(Conflict, match="demoted"):
        services.reuse_pathway(demoted.pk, actor=OLIVE)

    assert state() == before
