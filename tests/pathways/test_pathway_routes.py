"""Operator routes: GET pathways/match and POST pathways/{id}/hit (reasoning.admin)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from pathways.embeddings import HashBucketEmbedding
from pathways.jobs import backfill_embeddings
from pathways.models import Pathway
from tests.conftest import events
from tests.factories import make_pathway

pytestmark = pytest.mark.django_db

MATCH_URL = "/admin/v1/reasoning/pathways/match"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def hit_url(pathway_id: object) -> str:
    return f"/admin/v1/reasoning/pathways/{pathway_id}/hit"


@pytest.fixture
def library() -> dict[str, Pathway]:
    return {
        "exact": make_pathway(trigger_ref="benchmark/run-7/case-3", hit_count=2),
        "prefix": make_pathway(trigger_ref="benchmark/run-7", hit_count=5),
        "type_only": make_pathway(trigger_ref="pharmacy/refill", hit_count=9),
        "other_type": make_pathway(trigger_type="lab_result", trigger_ref="benchmark/run-7/case-3", hit_count=1),
    }


# --- GET match ----------------------------------------------------------------------------


def test_match_ranks_candidates_with_score_reason_and_hit_count(
    operator: APIClient, library: dict[str, Pathway]
) -> None:
    response = operator.get(MATCH_URL, {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3"})

    assert response.status_code == 200, response.content
    candidates = response.json()["candidates"]
    assert [(c["id"], c["score"], c["reason"], c["hit_count"]) for c in candidates] == [
        (str(library["exact"].pk), 1.0, "exact_ref", 2),
        (str(library["prefix"].pk), 0.7, "prefix_ref", 5),
        (str(library["type_only"].pk), 0.3, "trigger_type_only", 9),
    ]
    assert candidates[0]["trigger_type"] == "user_question"
    assert candidates[0]["trigger_ref"] == "benchmark/run-7/case-3"
    assert candidates[0]["semantic_score"] is None
    assert candidates[0]["embedding_model"] is None


def test_match_blends_in_semantics_once_the_library_is_embedded(
    operator: APIClient, library: dict[str, Pathway]
) -> None:
    backfill_embeddings(HashBucketEmbedding())

    response = operator.get(MATCH_URL, {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3"})

    candidates = response.json()["candidates"]
    assert [c["reason"] for c in candidates] == [
        "exact_ref+semantic",
        "prefix_ref+semantic",
        "trigger_type_only+semantic",
    ]
    assert candidates[0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert candidates[0]["semantic_score"] == pytest.approx(1.0, abs=1e-4)
    assert {c["embedding_model"] for c in candidates} == {"hash_bucket_v1"}


def test_match_is_read_only(operator: APIClient, library: dict[str, Pathway]) -> None:
    before = dict(Pathway.objects.values_list("pk", "hit_count"))

    response = operator.get(MATCH_URL, {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3"})

    assert response.status_code == 200
    assert dict(Pathway.objects.values_list("pk", "hit_count")) == before
    assert not Pathway.objects.filter(last_hit_at__isnull=False).exists()
    assert events("reasoning.pathway.matched") == []


def test_match_audits_the_count_and_top_reason_but_not_the_ref(
    operator: APIClient, library: dict[str, Pathway]
) -> None:
    operator.get(MATCH_URL, {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3", "limit": "2"})

    (event,) = events("reasoning.pathway.match_requested")
    assert event.actor == "token:operator"
    assert event.payload == {"trigger_type": "user_question", "count": 2, "top_reason": "exact_ref"}
    assert "benchmark" not in str(event.payload)


def test_match_with_no_candidates_is_200_empty_and_audited(operator: APIClient) -> None:
    response = operator.get(MATCH_URL, {"trigger_type": "never_seen"})

    assert response.status_code == 200
    assert response.json() == {"candidates": []}
    (event,) = events("reasoning.pathway.match_requested")
    assert event.payload == {"trigger_type": "never_seen", "count": 0, "top_reason": None}


def test_match_respects_limit(operator: APIClient, library: dict[str, Pathway]) -> None:
    response = operator.get(
        MATCH_URL, {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3", "limit": "1"}
    )

    assert [c["id"] for c in response.json()["candidates"]] == [str(library["exact"].pk)]


def test_match_never_returns_demoted_pathways(operator: APIClient, library: dict[str, Pathway]) -> None:
    Pathway.objects.filter(pk=library["exact"].pk).update(demoted_at=timezone.now(), demotion_reason="cold_no_hits_30d")

    response = operator.get(MATCH_URL, {"trigger_type": "user_question", "trigger_ref": "benchmark/run-7/case-3"})

    ids = [c["id"] for c in response.json()["candidates"]]
    assert str(library["exact"].pk) not in ids
    assert ids == [str(library["prefix"].pk), str(library["type_only"].pk)]


def test_match_without_trigger_type_is_400(operator: APIClient) -> None:
    response = operator.get(MATCH_URL, {"trigger_ref": "benchmark/run-7"})

    assert response.status_code == 400
    assert "trigger_type" in response.json()
    assert events("reasoning.pathway.match_requested") == []


@pytest.mark.parametrize("trigger_type", ["user question", "x" * 101, "-leading-dash"])
def test_match_with_a_trigger_type_that_is_not_a_label_is_400(operator: APIClient, trigger_type: str) -> None:
    response = operator.get(MATCH_URL, {"trigger_type": trigger_type})

    assert response.status_code == 400
    assert "trigger_type" in response.json()


@pytest.mark.parametrize("trigger_ref", ["r" * 501, "case\x003"], ids=["overlong", "nul"])
def test_match_with_a_bad_trigger_ref_is_400(operator: APIClient, trigger_ref: str) -> None:
    response = operator.get(MATCH_URL, {"trigger_type": "user_question", "trigger_ref": trigger_ref})

    assert response.status_code == 400
    assert "trigger_ref" in response.json()


@pytest.mark.parametrize("limit", ["abc", "0", "-1", "51", "2.5"])
def test_match_with_a_bad_limit_is_400(operator: APIClient, limit: str) -> None:
    response = operator.get(MATCH_URL, {"trigger_type": "user_question", "limit": limit})

    assert response.status_code == 400
    assert "limit" in response.json()


def test_match_accepts_the_largest_limit(operator: APIClient) -> None:
    assert operator.get(MATCH_URL, {"trigger_type": "user_question", "limit": "50"}).status_code == 200


def test_match_without_a_token_is_401(anonymous: APIClient) -> None:
    assert anonymous.get(MATCH_URL, {"trigger_type": "user_question"}).status_code == 401


@pytest.mark.parametrize("scope", ["reasoning.write", "reasoning.read"])
def test_match_without_the_admin_scope_is_403(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient], scope: str
) -> None:
    client = client_for(make_token(scope))

    response = client.get(MATCH_URL, {"trigger_type": "user_question"})

    assert response.status_code == 403
    assert events("reasoning.pathway.match_requested") == []


# --- POST hit -----------------------------------------------------------------------------


def test_hit_adds_one_and_stamps_last_hit_at(
    operator: APIClient, library: dict[str, Pathway], clock: time_machine.Coordinates
) -> None:
    pathway = library["prefix"]

    response = operator.post(hit_url(pathway.pk))

    assert response.status_code == 200, response.content
    assert response.json() == {"id": str(pathway.pk), "hit_count": 6, "last_hit_at": "2026-03-02T12:00:00Z"}
    stored = Pathway.objects.get(pk=pathway.pk)
    assert stored.hit_count == 6
    assert stored.last_hit_at == NOW
    # Only the hit pathway changed.
    assert Pathway.objects.get(pk=library["exact"].pk).hit_count == 2


def test_hit_audits_pathway_matched(operator: APIClient, library: dict[str, Pathway]) -> None:
    pathway = library["exact"]

    operator.post(hit_url(pathway.pk))

    (event,) = events("reasoning.pathway.matched")
    assert (event.target_type, event.target_id) == ("pathways.pathway", str(pathway.pk))
    assert event.actor == "token:operator"
    assert event.payload == {"hit_count": 3}


def test_hit_on_an_unknown_pathway_is_404(operator: APIClient) -> None:
    response = operator.post(hit_url(uuid.uuid4()))

    assert response.status_code == 404
    assert events("reasoning.pathway.matched") == []


def test_hit_with_a_malformed_id_is_400(operator: APIClient) -> None:
    response = operator.post(hit_url("not-a-uuid"))

    assert response.status_code == 400
    assert "pathway_id" in response.json()


def test_hit_on_a_demoted_pathway_is_409_and_changes_nothing(operator: APIClient, library: dict[str, Pathway]) -> None:
    pathway = library["exact"]
    Pathway.objects.filter(pk=pathway.pk).update(demoted_at=timezone.now(), demotion_reason="cold_no_hits_30d")

    response = operator.post(hit_url(pathway.pk))

    assert response.status_code == 409
    stored = Pathway.objects.get(pk=pathway.pk)
    assert (stored.hit_count, stored.last_hit_at) == (2, None)
    assert events("reasoning.pathway.matched") == []


def test_hit_without_a_token_is_401(anonymous: APIClient, library: dict[str, Pathway]) -> None:
    assert anonymous.post(hit_url(library["exact"].pk)).status_code == 401


def test_hit_with_a_write_only_token_is_403(agent: APIClient, library: dict[str, Pathway]) -> None:
    response = agent.post(hit_url(library["exact"].pk))

    assert response.status_code == 403
    assert Pathway.objects.get(pk=library["exact"].pk).hit_count == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_hits_are_all_counted(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    # Real commits; each thread gets its own database connection (Django's are per thread).
    pathway = make_pathway(trigger_ref="benchmark/run-7")
    raw = make_token("reasoning.admin", name="operator")
    threads_count = 10
    barrier = threading.Barrier(threads_count)
    answers: list[int] = []
    errors: list[BaseException] = []

    def hit() -> None:
        try:
            client = client_for(raw)
            barrier.wait(timeout=10)
            response = client.post(hit_url(pathway.pk))
            assert response.status_code == 200, response.content
            answers.append(response.json()["hit_count"])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=hit) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert Pathway.objects.get(pk=pathway.pk).hit_count == threads_count
    # Each request saw its own increment: no two read the same count.
    assert sorted(answers) == list(range(1, threads_count + 1))
    assert len(events("reasoning.pathway.matched")) == threads_count
