"""GET /dashboard/admin/reasoning/pathway-library: the operators' view of the library."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from audit.models import AuditEvent
from pathways.embeddings import HashBucketEmbedding
from pathways.jobs import backfill_embeddings
from pathways.models import Pathway
from tests.factories import make_pathway
from tests.html import Element, parse

pytestmark = pytest.mark.django_db

PAGE_URL = "/dashboard/admin/reasoning/pathway-library"
ACTION = "admin.reasoning.pathway.stats_read.proxy"
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
COLD = Pathway.DemotionReason.COLD.value
STALE = Pathway.DemotionReason.STALE.value
CONFIGURED = "hash_bucket_v1"  # settings.PATHWAY_EMBEDDING_MODEL in the test settings
OLD_MODEL = "old_model_v0"


def page_of(client: Client) -> tuple[str, Element]:
    response = client.get(PAGE_URL)
    assert response.status_code == 200, response.content
    body = response.content.decode()
    return body, parse(body)


def demoted(reason: str) -> dict[str, Any]:
    return {"demoted_at": timezone.now(), "demotion_reason": reason}


@pytest.fixture
def library() -> dict[str, Pathway]:
    """Nine pathways in three trigger types, a minute apart, all active ones embedded.

    lab_result:    5 active, one reused 7 times              -> mature
    user_question: 2 active, 1 demoted stale with 9 hits     -> growing
    claim_review:  0 active, 1 demoted cold                  -> sparse
    Embeddings: 5 active from the configured model, 2 still from an older one.
    """
    rows: dict[str, Pathway] = {}
    with time_machine.travel(T0, tick=False) as clock:
        for key, kind, hits, extra in [
            ("l1", "lab_result", 7, {}),
            ("l2", "lab_result", 3, {}),
            ("l3", "lab_result", 0, {}),
            ("l4", "lab_result", 0, {}),
            ("l5", "lab_result", 0, {}),
            ("q1", "user_question", 2, {}),
            ("q2", "user_question", 1, {}),
            ("q3", "user_question", 9, demoted(STALE)),
            ("c1", "claim_review", 0, demoted(COLD)),
        ]:
            rows[key] = make_pathway(kind, f"{kind}/{key}", hit_count=hits, **extra)
            clock.shift(timedelta(minutes=1))
    backfill_embeddings(HashBucketEmbedding())  # the 7 active ones
    Pathway.objects.filter(pk__in=[rows["l5"].pk, rows["q2"].pk]).update(embedding_model=OLD_MODEL)
    return rows


# --- who may see it ----------------------------------------------------------------------------


def test_operator_sees_the_page(operator_client: Client) -> None:
    response = operator_client.get(PAGE_URL)

    assert response.status_code == 200
    assert "<h1>Pathway library</h1>" in response.content.decode()


def test_patient_session_is_403_and_not_audited(patient_client: Client) -> None:
    response = patient_client.get(PAGE_URL)

    assert response.status_code == 403
    assert "Operators only" in response.content.decode()
    assert not AuditEvent.objects.filter(action=ACTION).exists()


def test_anonymous_is_redirected_to_login_with_next() -> None:
    response = Client().get(PAGE_URL)

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={PAGE_URL}"
    assert not AuditEvent.objects.filter(action=ACTION).exists()


def test_post_is_405(operator_client: Client) -> None:
    assert operator_client.post(PAGE_URL).status_code == 405


def test_url_name_resolves_to_the_page() -> None:
    assert reverse("pathway-library") == PAGE_URL


# --- what it shows -----------------------------------------------------------------------------


def test_totals_match_the_database(operator_client: Client, library: dict[str, Pathway]) -> None:
    _, page = page_of(operator_client)

    active = Pathway.objects.filter(demoted_at__isnull=True)
    assert page.text_of("total-total") == str(Pathway.objects.count()) == "9"
    assert page.text_of("total-active") == str(active.count()) == "7"
    assert page.text_of("total-embedded") == str(Pathway.objects.exclude(embedding_model="").count()) == "7"
    assert page.text_of("total-demoted") == str(Pathway.objects.filter(demoted_at__isnull=False).count()) == "2"


def test_embedding_models_mark_the_configured_one_and_the_backfill_left(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    _, page = page_of(operator_client)

    assert page.rows("by-model") == [[f"{CONFIGURED} configured", "5"], [OLD_MODEL, "2"]]
    assert page.text_of("backfill") == (
        f"Active pathways still without an embedding from {CONFIGURED}: 2 of 7. "
        "The embedding backfill job fills them in; this falls to 0 as it converges."
    )


def test_backfill_progress_converges_after_a_model_switch(operator_client: Client, library: dict[str, Pathway]) -> None:
    # Everything was embedded by the old model; the configured one has nothing yet.
    Pathway.objects.exclude(embedding_model="").update(embedding_model=OLD_MODEL)

    _, before = page_of(operator_client)
    backfill_embeddings(HashBucketEmbedding())
    _, after = page_of(operator_client)

    assert before.rows("by-model") == [[f"{CONFIGURED} configured", "0"], [OLD_MODEL, "7"]]
    assert f"{CONFIGURED}: 7 of 7." in before.text_of("backfill")
    assert after.rows("by-model") == [[f"{CONFIGURED} configured", "7"]]
    assert after.text_of("backfill") == f"Every active pathway has an embedding from {CONFIGURED}."


def test_demoted_by_reason(operator_client: Client, library: dict[str, Pathway]) -> None:
    _, page = page_of(operator_client)

    assert page.rows("demoted") == [
        [COLD, "never reused, and older than 30 days", "1"],
        [STALE, "not reused in the last 90 days", "1"],
    ]


def test_maturity_per_trigger_type_with_legend(operator_client: Client, library: dict[str, Pathway]) -> None:
    body, page = page_of(operator_client)

    assert page.rows("maturity") == [
        ["claim_review", "0", "sparse"],
        ["lab_result", "5", "mature"],
        ["user_question", "2", "growing"],
    ]
    for bucket in ("mature", "growing", "sparse"):
        assert f'<span class="chip chip-{bucket}">{bucket}</span>' in body
    assert page.text_of("maturity-legend") == (
        "mature = at least 5 active and at least one reused 3+ times; "
        "growing = at least one active; sparse = none active."
    )


def test_top_five_most_reused_in_order_and_not_a_sixth(operator_client: Client) -> None:
    last_hit = T0 + timedelta(days=3)
    with time_machine.travel(T0, tick=False) as clock:
        # Hits 6, 5, 4, 4 (tie: the older first), 2, 1 -- and a demoted one with 50.
        for n, hits in enumerate([1, 4, 6, 2, 4, 5]):
            make_pathway("lab_result" if n % 2 else "user_question", f"ref/{n}", hit_count=hits, last_hit_at=last_hit)
            clock.shift(timedelta(minutes=1))
        make_pathway("lab_result", "ref/demoted", hit_count=50, last_hit_at=last_hit, **demoted(STALE))

    body, page = page_of(operator_client)

    shown = "2026-03-05 12:00"
    assert page.rows("top-hits") == [
        ["1", "user_question", "ref/2", "6", shown],
        ["2", "lab_result", "ref/5", "5", shown],
        ["3", "lab_result", "ref/1", "4", shown],
        ["4", "user_question", "ref/4", "4", shown],
        ["5", "lab_result", "ref/3", "2", shown],
    ]
    assert "ref/0" not in body  # the sixth
    assert "ref/demoted" not in body


def test_top_hits_without_any_reuse(operator_client: Client) -> None:
    make_pathway("lab_result", "ref/0")

    body, page = page_of(operator_client)

    assert page.select("table", id="top-hits") == []
    assert "No active pathway has been reused yet." in body


def test_empty_library_says_where_pathways_come_from(operator_client: Client) -> None:
    body, page = page_of(operator_client)

    assert [page.text_of(f"total-{key}") for key in ("total", "active", "embedded", "demoted")] == ["0"] * 4
    assert "The library is empty" in page.text_of("library-empty")
    assert "confidence of 0.9 or more" in page.text_of("library-empty")
    assert f'<a href="{reverse("research-console")}">Research Console</a>' in body
    assert page.select("table") == []


# --- audit -------------------------------------------------------------------------------------


def test_page_read_is_audited_with_counts_only(
    operator_client: Client, operator_user: User, library: dict[str, Pathway]
) -> None:
    operator_client.get(PAGE_URL)

    (event,) = AuditEvent.objects.filter(action=ACTION)
    assert event.actor == f"user:{operator_user.pk}"
    assert (event.target_type, event.target_id) == ("", "")
    assert event.payload == {"total": 9, "active": 7, "embedded": 7, "demoted": 2, "needing_embedding": 2}
    stored = json.dumps(event.payload)
    assert "lab_result" not in stored and "/" not in stored  # no trigger types, no refs


# --- queries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [3, 30])
def test_page_runs_a_fixed_number_of_queries(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, size: int
) -> None:
    # Trigger types grow with the library too (1 vs 10): nothing is fetched per type or per row.
    for n in range(size):
        extra = demoted(COLD) if n % 4 == 3 else {}
        make_pathway(f"type_{n % (size // 3)}", f"ref/{n}", hit_count=n, **extra)

    # Expect 13 queries, however large the library:
    #   1. the session; 2. the operator (user);
    #   3. the totals (total, active, embedded, demoted in one aggregate);
    #   4. counts by embedding model;
    #   5. active and high-hit counts by trigger type (active column and maturity);
    #   6. demoted counts by reason;
    #   7. the top hits (ids, in rank order);
    #   8. active pathways still needing the configured model's embedding;
    #   9. the top hits' refs and last-hit times;
    #   10-12. SAVEPOINT (the audit write is atomic, nested in the test's transaction), the
    #          audit event with its chainer queue row (one statement), RELEASE SAVEPOINT;
    #   13. base.html: the audit chain's lag for the banner (the oldest queued event, two
    #       primary keys).
    with django_assert_num_queries(13):
        response = operator_client.get(PAGE_URL)

    assert response.status_code == 200
    assert parse(response.content).text_of("total-total") == str(size)
