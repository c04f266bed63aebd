"""The matcher: structural scores, the semantic blend, fallbacks, filtering and ranking."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from pathways.embeddings import EmbeddingError, HashBucketEmbedding, pathway_text
from pathways.jobs import backfill_embeddings
from pathways.matcher import Candidate, composite_score, match, structural_score
from pathways.models import Pathway
from tests.factories import make_pathway

QUERY_TYPE = "user_question"
QUERY_REF = "benchmark/run-7/case-3"


def cosine(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


def query_vector(trigger_type: str = QUERY_TYPE, trigger_ref: str = QUERY_REF) -> list[float]:
    return HashBucketEmbedding().embed([pathway_text(trigger_type, trigger_ref)])[0]


def by_ref(candidates: list[Candidate]) -> dict[str, Candidate]:
    return {c.pathway.trigger_ref: c for c in candidates}


class BrokenClient:
    """An embedding vendor that is down."""

    model_name = "hash_bucket_v1"
    dimensions = 256

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise EmbeddingError("vendor unavailable")


# --- structural_score -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pathway_type", "pathway_ref", "expected"),
    [
        pytest.param(QUERY_TYPE, QUERY_REF, (1.0, "exact_ref"), id="exact"),
        pytest.param(QUERY_TYPE, "benchmark/run-7", (0.7, "prefix_ref"), id="pathway_is_parent_of_query"),
        pytest.param(QUERY_TYPE, "benchmark", (0.7, "prefix_ref"), id="pathway_is_ancestor_of_query"),
        pytest.param(QUERY_TYPE, "benchmark/run-7/case-3/step-1", (0.7, "prefix_ref"), id="pathway_is_child"),
        pytest.param(QUERY_TYPE, "benchmark/run-7/case-9", (0.7, "prefix_ref"), id="sibling_same_parent"),
        pytest.param(QUERY_TYPE, "benchmark/run-8/case-3", (0.3, "trigger_type_only"), id="cousin"),
        pytest.param(QUERY_TYPE, "other/path", (0.3, "trigger_type_only"), id="unrelated_ref"),
        pytest.param(QUERY_TYPE, "", (0.3, "trigger_type_only"), id="pathway_without_ref"),
        pytest.param("lab_result", QUERY_REF, (0.0, "none"), id="other_type_same_ref"),
    ],
)
def test_structural_score_branches(pathway_type: str, pathway_ref: str, expected: tuple[float, str]) -> None:
    assert structural_score(QUERY_TYPE, QUERY_REF, pathway_type, pathway_ref) == expected


def test_string_prefix_that_is_not_a_path_prefix_is_only_a_type_match() -> None:
    # "case-3" is not a path segment of "case-31": no shared parent, no ancestry.
    assert structural_score(QUERY_TYPE, "case-31", QUERY_TYPE, "case-3") == (0.3, "trigger_type_only")


def test_query_without_ref_never_matches_a_ref_exactly() -> None:
    assert structural_score(QUERY_TYPE, "", QUERY_TYPE, "") == (0.3, "trigger_type_only")
    assert structural_score(QUERY_TYPE, "", QUERY_TYPE, "benchmark") == (0.3, "trigger_type_only")


def test_trailing_slash_does_not_hide_a_parent() -> None:
    assert structural_score(QUERY_TYPE, "benchmark/run-7/", QUERY_TYPE, "benchmark") == (0.7, "prefix_ref")


# --- composite_score --------------------------------------------------------------------


def test_composite_weights_structure_0_3_and_semantics_0_7() -> None:
    assert composite_score(0.7, 0.5) == pytest.approx(0.3 * 0.7 + 0.7 * 0.5)
    assert composite_score(1.0, 1.0) == pytest.approx(1.0)
    assert composite_score(0.0, 0.0) == 0.0


def test_negative_cosine_is_clipped_to_zero() -> None:
    assert composite_score(1.0, -0.5) == pytest.approx(0.3)
    assert composite_score(0.3, -1.0) == pytest.approx(0.09)


# --- match(): structural ----------------------------------------------------------------


@pytest.mark.django_db
def test_structural_match_ranks_exact_then_prefix_then_type_only() -> None:
    make_pathway(trigger_ref="other/path", hit_count=9)
    make_pathway(trigger_ref="benchmark/run-7")
    make_pathway(trigger_ref=QUERY_REF)

    candidates = match(QUERY_TYPE, QUERY_REF, client=None)

    assert [(c.pathway.trigger_ref, c.score, c.reason) for c in candidates] == [
        (QUERY_REF, 1.0, "exact_ref"),
        ("benchmark/run-7", 0.7, "prefix_ref"),
        ("other/path", 0.3, "trigger_type_only"),
    ]
    assert all(c.semantic is None for c in candidates)


@pytest.mark.django_db
def test_demoted_pathways_never_match() -> None:
    kept = make_pathway(trigger_ref="benchmark/run-7")
    make_pathway(
        trigger_ref=QUERY_REF, hit_count=50, demoted_at=timezone.now(), demotion_reason="stale_no_recent_hits_90d"
    )

    candidates = match(QUERY_TYPE, QUERY_REF, client=None)

    assert [c.pathway.pk for c in candidates] == [kept.pk]


@pytest.mark.django_db
def test_embedded_demoted_pathway_is_not_a_semantic_candidate_either() -> None:
    kept = make_pathway(trigger_ref="benchmark/run-7")
    demoted = make_pathway(trigger_ref=QUERY_REF)
    backfill_embeddings(HashBucketEmbedding())
    # Demoted after it was embedded: its vector is the closest one there is.
    Pathway.objects.filter(pk=demoted.pk).update(demoted_at=timezone.now(), demotion_reason="cold_no_hits_30d")

    candidates = match(QUERY_TYPE, QUERY_REF, client=HashBucketEmbedding())

    assert [c.pathway.pk for c in candidates] == [kept.pk]


@pytest.mark.django_db
def test_other_trigger_types_never_match_even_with_the_same_ref() -> None:
    same_type = make_pathway(trigger_ref="unrelated")
    make_pathway(trigger_type="lab_result", trigger_ref=QUERY_REF, hit_count=20)
    backfill_embeddings(HashBucketEmbedding())

    structural = match(QUERY_TYPE, QUERY_REF, client=None)
    semantic = match(QUERY_TYPE, QUERY_REF, client=HashBucketEmbedding())

    assert [c.pathway.pk for c in structural] == [same_type.pk]
    assert [c.pathway.pk for c in semantic] == [same_type.pk]


@pytest.mark.django_db
def test_equal_scores_are_ordered_by_hit_count_descending() -> None:
    make_pathway(trigger_ref="x/1", hit_count=1)
    make_pathway(trigger_ref="x/2", hit_count=7)
    make_pathway(trigger_ref="x/3", hit_count=0)
    make_pathway(trigger_ref="x/4", hit_count=3)

    candidates = match(QUERY_TYPE, QUERY_REF, client=None)

    assert {c.score for c in candidates} == {0.3}
    assert [c.pathway.hit_count for c in candidates] == [7, 3, 1, 0]


@pytest.mark.django_db
def test_a_higher_score_beats_more_hits() -> None:
    make_pathway(trigger_ref="x/1", hit_count=100)
    exact = make_pathway(trigger_ref=QUERY_REF, hit_count=0)

    assert match(QUERY_TYPE, QUERY_REF, client=None)[0].pathway.pk == exact.pk


@pytest.mark.django_db
def test_limit_cuts_the_ranked_list() -> None:
    make_pathway(trigger_ref="x/1", hit_count=4)
    make_pathway(trigger_ref="x/2", hit_count=2)
    make_pathway(trigger_ref="benchmark/run-7")
    make_pathway(trigger_ref=QUERY_REF)
    make_pathway(trigger_ref="x/3")

    candidates = match(QUERY_TYPE, QUERY_REF, client=None, limit=3)

    assert [c.pathway.trigger_ref for c in candidates] == [QUERY_REF, "benchmark/run-7", "x/1"]


@pytest.mark.django_db
def test_empty_library_matches_nothing() -> None:
    assert match(QUERY_TYPE, QUERY_REF, client=HashBucketEmbedding()) == []


# --- match(): semantic ------------------------------------------------------------------


@pytest.mark.django_db
def test_without_a_client_reasons_are_structural_only() -> None:
    make_pathway(trigger_ref=QUERY_REF)
    make_pathway(trigger_ref="benchmark/run-7/case-4")
    backfill_embeddings(HashBucketEmbedding())

    candidates = match(QUERY_TYPE, QUERY_REF, client=None)

    assert [c.reason for c in candidates] == ["exact_ref", "prefix_ref"]
    assert [c.score for c in candidates] == [1.0, 0.7]


@pytest.mark.django_db
def test_same_model_embeddings_blend_structure_and_cosine() -> None:
    make_pathway(trigger_ref=QUERY_REF)
    make_pathway(trigger_ref="benchmark/run-7")
    make_pathway(trigger_ref="benchmark/run-7/case-4")
    make_pathway(trigger_ref="pharmacy/refill/42")
    backfill_embeddings(HashBucketEmbedding())
    query = query_vector()

    candidates = match(QUERY_TYPE, QUERY_REF, client=HashBucketEmbedding())

    assert len(candidates) == 4
    stored = {p.pk: p.embedding for p in Pathway.objects.all()}
    for candidate in candidates:
        structural, reason = structural_score(
            QUERY_TYPE, QUERY_REF, candidate.pathway.trigger_type, candidate.pathway.trigger_ref
        )
        expected_cosine = cosine(query, stored[candidate.pathway.pk])
        assert candidate.reason == f"{reason}+semantic"
        assert candidate.structural == structural
        assert candidate.semantic == pytest.approx(expected_cosine, abs=1e-5)
        assert candidate.score == pytest.approx(0.3 * structural + 0.7 * max(expected_cosine, 0.0), abs=1e-5)
    scores = [c.score for c in candidates]
    assert scores == sorted(scores, reverse=True)
    assert candidates[0].pathway.trigger_ref == QUERY_REF
    assert candidates[0].score == pytest.approx(1.0, abs=1e-5)  # same text: cosine 1


@pytest.mark.django_db
def test_candidate_embedded_with_another_model_falls_back_to_structural() -> None:
    make_pathway(trigger_ref=QUERY_REF)
    foreign = make_pathway(trigger_ref="benchmark/run-7")
    backfill_embeddings(HashBucketEmbedding())
    # Same vector, but labelled with another model: it must not be compared.
    Pathway.objects.filter(pk=foreign.pk).update(embedding_model="other_model")

    candidates = by_ref(match(QUERY_TYPE, QUERY_REF, client=HashBucketEmbedding()))

    assert candidates[QUERY_REF].reason == "exact_ref+semantic"
    assert candidates["benchmark/run-7"].reason == "prefix_ref"
    assert candidates["benchmark/run-7"].score == 0.7
    assert candidates["benchmark/run-7"].semantic is None


@pytest.mark.django_db
def test_unembedded_candidate_falls_back_to_structural() -> None:
    make_pathway(trigger_ref=QUERY_REF)
    backfill_embeddings(HashBucketEmbedding())
    make_pathway(trigger_ref="benchmark/run-7/case-9")  # extracted after the backfill

    candidates = by_ref(match(QUERY_TYPE, QUERY_REF, client=HashBucketEmbedding()))

    assert candidates[QUERY_REF].reason == "exact_ref+semantic"
    assert candidates["benchmark/run-7/case-9"].reason == "prefix_ref"
    assert candidates["benchmark/run-7/case-9"].score == 0.7


@pytest.mark.django_db
def test_embedding_failure_degrades_to_structural_without_raising() -> None:
    make_pathway(trigger_ref=QUERY_REF)
    make_pathway(trigger_ref="x/1")
    backfill_embeddings(HashBucketEmbedding())

    candidates = match(QUERY_TYPE, QUERY_REF, client=BrokenClient())

    assert [(c.reason, c.score) for c in candidates] == [("exact_ref", 1.0), ("trigger_type_only", 0.3)]


@pytest.mark.django_db
def test_semantic_search_finds_a_near_identical_pathway_that_structure_misses() -> None:
    # More than the structural candidate budget (50 most reused of the type), all reused
    # more than the target, none sharing its ref's path: the target is reachable only
    # through its embedding.
    for n in range(55):
        make_pathway(trigger_ref=f"pharmacy/refill-{n}", hit_count=n + 1)
    target = make_pathway(trigger_ref="benchmark-run-7-case-3")
    backfill_embeddings(HashBucketEmbedding())
    query_ref = "benchmark-run-7-case-4"

    structural_only = match(QUERY_TYPE, query_ref, client=None, limit=50)
    semantic = match(QUERY_TYPE, query_ref, client=HashBucketEmbedding(), limit=5)

    assert target.pk not in {c.pathway.pk for c in structural_only}
    best = semantic[0]
    assert best.pathway.pk == target.pk
    assert best.reason == "trigger_type_only+semantic"
    expected_cosine = cosine(query_vector(QUERY_TYPE, query_ref), Pathway.objects.get(pk=target.pk).embedding)
    assert expected_cosine > 0.5
    assert best.score == pytest.approx(0.3 * 0.3 + 0.7 * expected_cosine, abs=1e-5)


@pytest.mark.django_db
def test_hnsw_search_still_finds_the_type_when_other_types_crowd_the_neighbourhood() -> None:
    # 300 pathways of a look-alike type sit nearer the query than anything of the query's
    # type. A filtered HNSW scan that stops after ef_search rows (no iterative scan) would
    # return none of the query's type; the needle below is reachable only semantically.
    for n in range(300):
        make_pathway(trigger_type="user_question_v2", trigger_ref=f"benchmark-run-7-case-4/{n}")
    for n in range(55):
        make_pathway(trigger_ref=f"pharmacy/refill-{n}", hit_count=n + 1)
    needle = make_pathway(trigger_ref="benchmark")
    backfill_embeddings(HashBucketEmbedding())
    query_ref = "benchmark-run-7-case-4"
    with connection.cursor() as cursor:
        # A library this small would be scanned sequentially; make the planner take the
        # index path a large library takes (for the rest of this test's transaction).
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")

    with CaptureQueriesContext(connection) as captured:
        candidates = match(QUERY_TYPE, query_ref, client=HashBucketEmbedding(), limit=50)

    semantic_sql = [q["sql"] for q in captured.captured_queries if "ORDER BY embedding <=>" in q["sql"]]
    assert len(semantic_sql) == 1
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + semantic_sql[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "pathways_pathway_embed_hnsw" in plan  # the premise: the HNSW index served the query
    assert candidates[0].pathway.pk == needle.pk
    assert candidates[0].reason == "trigger_type_only+semantic"
    assert {c.pathway.trigger_type for c in candidates} == {QUERY_TYPE}
