"""GET pathways/stats: shape, values, maturity per trigger type, audit and query count."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries
from rest_framework.test import APIClient

from audit.models import AuditEvent
from pathways.embeddings import HashBucketEmbedding
from pathways.jobs import backfill_embeddings
from pathways.models import Pathway, maturity
from pathways.stats import pathway_stats
from tests.factories import make_pathway

STATS_URL = "/admin/v1/reasoning/pathways/stats"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
COLD = Pathway.DemotionReason.COLD.value
STALE = Pathway.DemotionReason.STALE.value


def demoted(reason: str) -> dict[str, Any]:
    return {"demoted_at": timezone.now(), "demotion_reason": reason}


def make_type(trigger_type: str, hits: list[int], *, demoted_hits: tuple[int, ...] = ()) -> None:
    for n, hit_count in enumerate(hits):
        make_pathway(trigger_type, f"{trigger_type}/{n}", hit_count=hit_count)
    for hit_count in demoted_hits:
        make_pathway(trigger_type, "demoted", hit_count=hit_count, **demoted(STALE))


# --- maturity() ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("active", "high_hit", "expected"),
    [
        (0, 0, "sparse"),
        (1, 0, "growing"),
        (4, 1, "growing"),
        (5, 0, "growing"),
        (5, 1, "mature"),
        (50, 3, "mature"),
    ],
)
def test_maturity_buckets(active: int, high_hit: int, expected: str) -> None:
    assert maturity(active, high_hit) == expected


# --- maturity through the library ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("hits", "demoted_hits", "expected"),
    [
        pytest.param([3, 0, 0, 0], (), "growing", id="4_active_one_reused_3_times"),
        pytest.param([2, 2, 1, 0, 0], (), "growing", id="5_active_max_2_hits"),
        pytest.param([3, 0, 0, 0, 0], (), "mature", id="5_active_one_reused_3_times"),
        pytest.param([0, 0, 0, 0, 0, 0, 9], (), "mature", id="6_active_one_reused_9_times"),
        pytest.param([], (7, 0, 3), "sparse", id="all_demoted"),
        pytest.param([0, 1, 2, 0, 0], (10, 4), "growing", id="demoted_high_hits_do_not_count"),
        pytest.param([3, 0, 0, 0], (0,), "growing", id="demoted_rows_do_not_count_as_active"),
    ],
)
def test_maturity_per_trigger_type(hits: list[int], demoted_hits: tuple[int, ...], expected: str) -> None:
    make_type("user_question", hits, demoted_hits=demoted_hits)
    # Another trigger type's pathways never lend their maturity.
    make_type("lab_result", [5, 5, 5, 5, 5])

    stats = pathway_stats()

    assert stats["maturity_by_trigger_type"]["user_question"] == expected
    assert stats["by_trigger_type"]["user_question"] == len(hits)
    assert stats["maturity_by_trigger_type"]["lab_result"] == "mature"


# --- the route -------------------------------------------------------------------------------


@pytest.fixture
def library() -> dict[str, Pathway]:
    """Nine pathways in three trigger types, created a minute apart (top_hits ties break on age).

    user_question: 5 active, one reused 3 times -> mature; one embedded by another model.
    lab_result:    2 active, 1 demoted cold      -> growing.
    claim_review:  0 active, 1 demoted stale with 9 hits -> sparse, absent from top_hits.
    """
    rows: dict[str, Pathway] = {}
    with time_machine.travel(T0, tick=False) as clock:
        for key, kind, hits, extra in [
            ("q1", "user_question", 3, {}),
            ("q2", "user_question", 2, {}),
            ("q3", "user_question", 1, {}),
            ("q4", "user_question", 1, {}),
            ("q5", "user_question", 0, {}),
            ("l1", "lab_result", 6, {}),
            ("l2", "lab_result", 4, {}),
            ("l3", "lab_result", 0, demoted(COLD)),
            ("c1", "claim_review", 9, demoted(STALE)),
        ]:
            rows[key] = make_pathway(kind, f"{kind}/{key}", hit_count=hits, **extra)
            clock.shift(timedelta(minutes=1))
    backfill_embeddings(HashBucketEmbedding())  # embeds the 7 active ones
    Pathway.objects.filter(pk=rows["q5"].pk).update(embedding_model="other_model")
    return rows


@pytest.mark.django_db
def test_stats_shape_and_values(operator: APIClient, library: dict[str, Pathway]) -> None:
    response = operator.get(STATS_URL)

    assert response.status_code == 200, response.content

    def top(key: str) -> dict[str, Any]:
        return {
            "id": str(library[key].pk),
            "trigger_type": library[key].trigger_type,
            "hit_count": library[key].hit_count,
        }

    assert response.json() == {
        "total": 9,
        "active": 7,
        "embedded": 7,
        "by_model": {"hash_bucket_v1": 6, "other_model": 1},
        "by_trigger_type": {"claim_review": 0, "lab_result": 2, "user_question": 5},
        "maturity_by_trigger_type": {"claim_review": "sparse", "lab_result": "growing", "user_question": "mature"},
        "demoted": {"total": 2, "by_reason": {COLD: 1, STALE: 1}},
        # Five at most, active only, most reused first; the 1-hit tie goes to the older (q3).
        "top_hits": [top("l1"), top("l2"), top("q1"), top("q2"), top("q3")],
    }


@pytest.mark.django_db
def test_stats_of_an_empty_library(operator: APIClient) -> None:
    response = operator.get(STATS_URL)

    assert response.json() == {
        "total": 0,
        "active": 0,
        "embedded": 0,
        "by_model": {},
        "by_trigger_type": {},
        "maturity_by_trigger_type": {},
        "demoted": {"total": 0, "by_reason": {}},
        "top_hits": [],
    }


@pytest.mark.django_db
def test_stats_hold_no_refs(operator: APIClient, library: dict[str, Pathway]) -> None:
    body = operator.get(STATS_URL).content.decode()

    assert "user_question/q1" not in body
    assert "trigger_ref" not in body


@pytest.mark.django_db
def test_stats_read_is_audited_with_counts(operator: APIClient, library: dict[str, Pathway]) -> None:
    operator.get(STATS_URL)

    (event,) = AuditEvent.objects.filter(action="admin.reasoning.pathway.stats_read")
    assert event.actor == "token:operator"
    assert event.payload == {"total": 9, "active": 7}


@pytest.mark.django_db
def test_stats_without_a_token_is_401(anonymous: APIClient) -> None:
    assert anonymous.get(STATS_URL).status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("scope", ["reasoning.write", "reasoning.read"])
def test_stats_without_the_admin_scope_is_403(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient], scope: str
) -> None:
    response = client_for(make_token(scope)).get(STATS_URL)

    assert response.status_code == 403
    assert not AuditEvent.objects.filter(action="admin.reasoning.pathway.stats_read").exists()


@pytest.mark.django_db
def test_stats_run_a_fixed_number_of_queries(
    operator: APIClient, library: dict[str, Pathway], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    make_type("radiology_report", [1, 2, 3, 4, 5, 6, 7])  # more rows and types: same count

    # Expect 9 queries, however large the library:
    #   1. the token lookup;
    #   2. the totals (total, active, embedded, demoted in one aggregate);
    #   3. counts by embedding model;
    #   4. active and high-hit counts by trigger type (by_trigger_type and maturity);
    #   5. demoted counts by reason;
    #   6. the top hits;
    #   7-9. SAVEPOINT (the audit write is atomic, nested in the test's transaction), the
    #        audit event with its chainer queue row (one statement), RELEASE SAVEPOINT.
    with django_assert_num_queries(9):
        response = operator.get(STATS_URL)

    assert response.json()["total"] == 16
