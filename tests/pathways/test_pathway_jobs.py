"""The pathway jobs: decay (cold / stale demotion), embedding backfill, and their schedules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import numpy as np
import pytest
import time_machine
from django.core.management import call_command
from django.db.models import QuerySet
from django_q.models import Schedule
from pytest_django import Settings

from pathways import jobs
from pathways.embeddings import EMBEDDING_DIMENSIONS, EmbeddingError, HashBucketEmbedding, pathway_text
from pathways.jobs import backfill_embeddings, decay_pathways
from pathways.matcher import match
from pathways.models import Pathway
from pathways.services import demote_batch, record_hit
from tests.conftest import events
from tests.factories import make_pathway

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
COLD = "cold_no_hits_30d"
STALE = "stale_no_recent_hits_90d"
DECAY_ACTOR = "system:pathway_decay"
BACKFILL_ACTOR = "system:pathway_embedding_backfill"


def hit(pathway: Pathway) -> None:
    record_hit(pathway.pk, actor="token:operator")


def fresh(pathway: Pathway) -> Pathway:
    return Pathway.objects.get(pk=pathway.pk)


class AltHashEmbedding(HashBucketEmbedding):
    """The same vectors under another model name: a model change, as the backfill sees it."""

    model_name = "hash_bucket_v1_alt"


class FailingEmbedding:
    model_name = "hash_bucket_v1"
    dimensions = EMBEDDING_DIMENSIONS

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise EmbeddingError("vendor unavailable")


# --- decay: cold -------------------------------------------------------------------------------


def test_unused_pathway_29_days_old_stays_active(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    clock.move_to(T0 + timedelta(days=29))

    assert decay_pathways() == {COLD: 0, STALE: 0}

    assert fresh(pathway).demoted_at is None


def test_unused_pathway_31_days_old_is_demoted_cold(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    clock.move_to(T0 + timedelta(days=31))

    assert decay_pathways() == {COLD: 1, STALE: 0}

    stored = fresh(pathway)
    assert stored.demoted_at == T0 + timedelta(days=31)
    assert stored.demotion_reason == COLD


def test_cold_rule_spares_a_pathway_that_was_used(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    clock.move_to(T0 + timedelta(days=20))
    hit(pathway)
    clock.move_to(T0 + timedelta(days=45))

    assert decay_pathways() == {COLD: 0, STALE: 0}

    assert fresh(pathway).demoted_at is None


# --- decay: stale ------------------------------------------------------------------------------


def test_pathway_last_used_89_days_ago_stays_active(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    hit(pathway)
    clock.move_to(T0 + timedelta(days=89))

    assert decay_pathways() == {COLD: 0, STALE: 0}

    assert fresh(pathway).demoted_at is None


def test_pathway_last_used_91_days_ago_is_demoted_stale(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    hit(pathway)
    hit(pathway)
    clock.move_to(T0 + timedelta(days=91))

    assert decay_pathways() == {COLD: 0, STALE: 1}

    stored = fresh(pathway)
    assert (stored.demoted_at, stored.demotion_reason) == (T0 + timedelta(days=91), STALE)


def test_old_pathway_with_a_recent_hit_stays_active(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    clock.move_to(T0 + timedelta(days=300))
    hit(pathway)
    clock.move_to(T0 + timedelta(days=310))

    assert decay_pathways() == {COLD: 0, STALE: 0}

    assert fresh(pathway).demoted_at is None


# --- decay: configuration, audit, idempotence --------------------------------------------------


def test_thresholds_come_from_settings(clock: time_machine.Coordinates, settings: Settings) -> None:
    settings.PATHWAY_COLD_DAYS = 7
    settings.PATHWAY_STALE_DAYS = 14
    unused = make_pathway(trigger_ref="unused")
    used = make_pathway(trigger_ref="used")
    hit(used)
    clock.move_to(T0 + timedelta(days=6))
    assert decay_pathways() == {COLD: 0, STALE: 0}

    clock.move_to(T0 + timedelta(days=15))
    assert decay_pathways() == {COLD: 1, STALE: 1}

    assert fresh(unused).demotion_reason == COLD
    assert fresh(used).demotion_reason == STALE
    started = events("memory.job.pathway_decay.started")
    assert [e.payload for e in started] == [{"cold_days": 7, "stale_days": 14}] * 2


def test_demotion_keeps_the_row_and_everything_in_it(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway(trigger_ref="benchmark/run-7")
    hit(pathway)
    backfill_embeddings(HashBucketEmbedding())
    before = fresh(pathway)
    clock.move_to(T0 + timedelta(days=100))

    decay_pathways()

    after = fresh(pathway)
    assert after.demoted_at == T0 + timedelta(days=100)
    assert after.demotion_reason == STALE
    for field in ("trigger_type", "trigger_ref", "step_kinds", "agents", "confidence", "hit_count", "last_hit_at"):
        assert getattr(after, field) == getattr(before, field), field
    assert after.embedding_model == before.embedding_model == "hash_bucket_v1"
    assert np.array_equal(after.embedding, before.embedding)


def test_each_demotion_is_audited_with_counts_and_labels_only(clock: time_machine.Coordinates) -> None:
    cold = make_pathway(trigger_type="lab_result", trigger_ref="lab/panel-7")
    stale = make_pathway(trigger_ref="benchmark/run-7")
    hit(stale)
    hit(stale)
    hit(stale)
    clock.move_to(T0 + timedelta(days=95, hours=5))

    decay_pathways()

    demoted = {e.target_id: e for e in events("reasoning.pathway.demoted")}
    assert set(demoted) == {str(cold.pk), str(stale.pk)}
    for event in demoted.values():
        assert event.target_type == "pathways.pathway"
        assert event.actor == DECAY_ACTOR
        assert set(event.payload) == {"pathway_id", "reason", "hit_count", "age_days", "trigger_type"}
    assert demoted[str(cold.pk)].payload == {
        "pathway_id": str(cold.pk),
        "reason": COLD,
        "hit_count": 0,
        "age_days": 95,
        "trigger_type": "lab_result",
    }
    assert demoted[str(stale.pk)].payload == {
        "pathway_id": str(stale.pk),
        "reason": STALE,
        "hit_count": 3,
        "age_days": 95,
        "trigger_type": "user_question",
    }
    assert "lab/panel-7" not in str([e.payload for e in demoted.values()])


def test_decay_writes_started_and_completed_with_counts(clock: time_machine.Coordinates) -> None:
    for n in range(3):
        make_pathway(trigger_ref=f"cold/{n}")
    stale = make_pathway(trigger_ref="stale")
    hit(stale)
    make_pathway(trigger_ref="young")
    clock.move_to(T0 + timedelta(days=60))
    make_pathway(trigger_ref="born-today")
    clock.move_to(T0 + timedelta(days=91))

    decay_pathways()

    (started,) = events("memory.job.pathway_decay.started")
    (completed,) = events("memory.job.pathway_decay.completed")
    assert started.actor == completed.actor == DECAY_ACTOR
    assert started.payload == {"cold_days": 30, "stale_days": 90}
    # "young" is 91 days old and unused: cold too; "born-today" is 31 days old: cold.
    assert completed.payload == {COLD: 5, STALE: 1}
    assert started.pk < completed.pk
    assert events("memory.job.pathway_decay.error") == []


def test_second_decay_run_demotes_nothing_more(clock: time_machine.Coordinates) -> None:
    make_pathway(trigger_ref="cold")
    stale = make_pathway(trigger_ref="stale")
    hit(stale)
    clock.move_to(T0 + timedelta(days=100))
    assert decay_pathways() == {COLD: 1, STALE: 1}
    first_demotions = {p.pk: p.demoted_at for p in Pathway.objects.all()}
    clock.move_to(T0 + timedelta(days=200))

    assert decay_pathways() == {COLD: 0, STALE: 0}

    assert {p.pk: p.demoted_at for p in Pathway.objects.all()} == first_demotions
    assert len(events("reasoning.pathway.demoted")) == 2
    assert len(events("memory.job.pathway_decay.completed")) == 2


def test_demoted_pathways_leave_matching(clock: time_machine.Coordinates) -> None:
    make_pathway(trigger_ref="benchmark/run-7")
    assert len(match("user_question", "benchmark/run-7", client=None)) == 1
    clock.move_to(T0 + timedelta(days=31))

    decay_pathways()

    assert match("user_question", "benchmark/run-7", client=None) == []


def test_pathway_reused_while_decay_runs_is_left_active(
    clock: time_machine.Coordinates, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job selects candidate ids, then demotes them. A reuse that commits in between
    # makes the row neither cold nor stale; demote_batch promises to leave such a row alone.
    pathway = make_pathway()
    clock.move_to(T0 + timedelta(days=31))
    demote = demote_batch

    def reused_first(rule: QuerySet[Pathway], ids: list[object], reason: str, now: datetime, *, actor: str) -> int:
        hit(pathway)  # an operator's hit lands after the candidates were chosen
        return demote(rule, ids, reason, now, actor=actor)

    monkeypatch.setattr(jobs, "demote_batch", reused_first)

    counts = decay_pathways()

    stored = fresh(pathway)
    assert stored.hit_count == 1
    assert (stored.demoted_at, stored.demotion_reason) == (None, "")
    assert counts == {COLD: 0, STALE: 0}
    assert events("reasoning.pathway.demoted") == []


def test_decay_failure_is_audited_and_raised(clock: time_machine.Coordinates, monkeypatch: pytest.MonkeyPatch) -> None:
    make_pathway()
    clock.move_to(T0 + timedelta(days=31))

    def broken(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("database went away")

    monkeypatch.setattr(jobs, "demote_batch", broken)

    with pytest.raises(RuntimeError):
        decay_pathways()

    (error,) = events("memory.job.pathway_decay.error")
    assert error.payload == {COLD: 0, STALE: 0, "error_type": "RuntimeError"}
    assert events("memory.job.pathway_decay.completed") == []


def test_decay_command_prints_the_counts(clock: time_machine.Coordinates) -> None:
    pathway = make_pathway()
    clock.move_to(T0 + timedelta(days=31))
    out = StringIO()

    call_command("decay_pathways", stdout=out)

    assert out.getvalue().strip() == f"{COLD}: 1, {STALE}: 0"
    assert fresh(pathway).demotion_reason == COLD


# --- backfill -----------------------------------------------------------------------------------


def test_backfill_embeds_active_pathways_with_unit_vectors_of_the_client() -> None:
    rows = [make_pathway(trigger_ref=f"benchmark/run-{n}") for n in range(3)]
    client = HashBucketEmbedding()

    assert backfill_embeddings(client) == 3

    for row in rows:
        stored = fresh(row)
        assert stored.embedding_model == "hash_bucket_v1"
        vector = np.asarray(stored.embedding, dtype=np.float64)
        assert vector.shape == (EMBEDDING_DIMENSIONS,)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
        expected = client.embed([pathway_text(row.trigger_type, row.trigger_ref)])[0]
        assert vector == pytest.approx(expected, abs=1e-6)


def test_backfill_skips_demoted_pathways(clock: time_machine.Coordinates) -> None:
    active = make_pathway(trigger_ref="active")
    demoted = make_pathway(trigger_ref="demoted", demoted_at=T0, demotion_reason=COLD)

    assert backfill_embeddings(HashBucketEmbedding()) == 1

    assert fresh(active).embedding_model == "hash_bucket_v1"
    assert fresh(demoted).embedding is None
    assert fresh(demoted).embedding_model == ""


def test_second_backfill_embeds_nothing() -> None:
    make_pathway(trigger_ref="a")
    make_pathway(trigger_ref="b")
    backfill_embeddings(HashBucketEmbedding())
    before = {p.pk: np.asarray(p.embedding).tolist() for p in Pathway.objects.all()}

    assert backfill_embeddings(HashBucketEmbedding()) == 0

    assert {p.pk: np.asarray(p.embedding).tolist() for p in Pathway.objects.all()} == before


def test_backfill_picks_up_pathways_extracted_since_the_last_run() -> None:
    make_pathway(trigger_ref="a")
    backfill_embeddings(HashBucketEmbedding())
    late = make_pathway(trigger_ref="b")

    assert backfill_embeddings(HashBucketEmbedding()) == 1

    assert fresh(late).embedding_model == "hash_bucket_v1"


def test_model_change_reembeds_every_active_pathway(clock: time_machine.Coordinates) -> None:
    active = [make_pathway(trigger_ref=f"r/{n}") for n in range(3)]
    demoted = make_pathway(trigger_ref="old")
    backfill_embeddings(HashBucketEmbedding())
    Pathway.objects.filter(pk=demoted.pk).update(demoted_at=T0, demotion_reason=COLD)

    assert backfill_embeddings(AltHashEmbedding()) == 3

    assert {fresh(p).embedding_model for p in active} == {"hash_bucket_v1_alt"}
    assert fresh(demoted).embedding_model == "hash_bucket_v1"  # demoted rows are left as they were
    assert backfill_embeddings(AltHashEmbedding()) == 0


def test_backfill_works_through_several_batches() -> None:
    for n in range(5):
        make_pathway(trigger_ref=f"r/{n}")

    assert backfill_embeddings(HashBucketEmbedding(), batch_size=2) == 5

    assert not Pathway.objects.filter(embedding__isnull=True).exists()


def test_backfill_writes_started_and_completed_with_counts() -> None:
    make_pathway(trigger_ref="a")
    make_pathway(trigger_ref="b")

    backfill_embeddings(HashBucketEmbedding())

    (started,) = events("memory.job.pathway_embedding_backfill.started")
    (completed,) = events("memory.job.pathway_embedding_backfill.completed")
    assert started.actor == completed.actor == BACKFILL_ACTOR
    assert started.payload == {"model": "hash_bucket_v1"}
    assert completed.payload == {"model": "hash_bucket_v1", "embedded": 2}
    assert started.pk < completed.pk


def test_backfill_audits_each_written_batch_with_its_counts() -> None:
    for n in range(5):
        make_pathway(trigger_ref=f"r/{n}")

    backfill_embeddings(HashBucketEmbedding(), batch_size=2)

    batches = events("reasoning.pathway.embeddings_stored")
    assert [event.payload for event in batches] == [
        {"model": "hash_bucket_v1", "batch": 2, "embedded": 2},
        {"model": "hash_bucket_v1", "batch": 2, "embedded": 2},
        {"model": "hash_bucket_v1", "batch": 1, "embedded": 1},
    ]
    assert {event.actor for event in batches} == {BACKFILL_ACTOR}
    (started,) = events("memory.job.pathway_embedding_backfill.started")
    (completed,) = events("memory.job.pathway_embedding_backfill.completed")
    assert started.pk < batches[0].pk and batches[-1].pk < completed.pk


def test_backfill_with_nothing_to_embed_writes_no_batch_event() -> None:
    make_pathway(trigger_ref="a")
    backfill_embeddings(HashBucketEmbedding())

    backfill_embeddings(HashBucketEmbedding())

    assert [event.payload["embedded"] for event in events("reasoning.pathway.embeddings_stored")] == [1]


def test_a_batch_whose_audit_event_fails_keeps_no_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    pathway = make_pathway(trigger_ref="a")

    def broken_record(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("audit write failed")

    monkeypatch.setattr("pathways.services.record", broken_record)

    with pytest.raises(RuntimeError):
        backfill_embeddings(HashBucketEmbedding())

    stored = fresh(pathway)
    assert (stored.embedding, stored.embedding_model) == (None, "")
    (error,) = events("memory.job.pathway_embedding_backfill.error")
    assert error.payload == {"model": "hash_bucket_v1", "embedded": 0, "error_type": "RuntimeError"}


def test_backfill_failure_is_audited_and_raised() -> None:
    pathway = make_pathway(trigger_ref="a")

    with pytest.raises(EmbeddingError):
        backfill_embeddings(FailingEmbedding())

    (error,) = events("memory.job.pathway_embedding_backfill.error")
    assert error.payload == {"model": "hash_bucket_v1", "embedded": 0, "error_type": "EmbeddingError"}
    assert events("memory.job.pathway_embedding_backfill.completed") == []
    assert fresh(pathway).embedding is None


def test_backfill_command_uses_the_configured_model() -> None:
    pathway = make_pathway(trigger_ref="a")
    out = StringIO()

    call_command("backfill_pathway_embeddings", stdout=out)

    assert out.getvalue().strip() == "embedded 1 pathway(s)"
    assert fresh(pathway).embedding_model == "hash_bucket_v1"


# --- schedules ----------------------------------------------------------------------------------


def test_setup_schedules_runs_the_backfill_hourly_and_the_decay_daily() -> None:
    call_command("setup_schedules", stdout=StringIO())
    call_command("setup_schedules", stdout=StringIO())

    backfill = Schedule.objects.get(name="pathways.embedding_backfill")
    decay = Schedule.objects.get(name="pathways.decay")
    assert (backfill.func, backfill.schedule_type, backfill.repeats) == (
        "pathways.jobs.backfill_embeddings",
        Schedule.HOURLY,
        -1,
    )
    assert (decay.func, decay.schedule_type, decay.repeats) == ("pathways.jobs.decay_pathways", Schedule.DAILY, -1)
