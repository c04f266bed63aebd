"""Decision Dimensions of match candidates: GET pathways/match and pathways.radar.candidate_radars."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from pathways.matcher import match
from pathways.models import Pathway
from pathways.radar import candidate_radars
from reasoning.auth import token_cache
from reasoning.dimensions import AXES, MAX_SCORE
from reasoning.models import ReasoningFlow, ReasoningStep
from tests.factories import make_pathway

pytestmark = pytest.mark.django_db

MATCH_URL = "/admin/v1/reasoning/pathways/match"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
QUERY_TYPE = "user_question"


def get_candidates(operator: APIClient, trigger_type: str = QUERY_TYPE, trigger_ref: str = "") -> list[dict[str, Any]]:
    params = {"trigger_type": trigger_type, "limit": "50"}
    if trigger_ref:
        params["trigger_ref"] = trigger_ref
    response = operator.get(MATCH_URL, params)
    assert response.status_code == 200, response.content
    candidates: list[dict[str, Any]] = response.json()["candidates"]
    return candidates


def dims_by_id(candidates: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c["dimensions"] for c in candidates}


def aborted_flow(trigger_type: str, trigger_ref: str) -> None:
    ReasoningFlow.objects.create(
        trigger_type=trigger_type,
        trigger_ref=trigger_ref,
        trace_id=uuid.uuid4().hex,
        request_hash="test",
        flow_state=ReasoningFlow.State.ABORTED,
    )


def verdict_step(flow_id: uuid.UUID, position: int, agent: str, verdict: str) -> None:
    ReasoningStep.objects.create(
        flow_id=flow_id,
        position=position,
        kind="verdict",
        agent=agent,
        summary_text="Judged the claim",
        outputs={"verdict": verdict},
        confidence=0.95,
        request_hash="test",
    )


# --- Every candidate carries a radar -------------------------------------------------------------


def test_every_candidate_carries_six_axes_from_0_to_7_with_buckets(
    operator: APIClient, clock: time_machine.Coordinates
) -> None:
    made = [
        make_pathway(trigger_ref="benchmark/run-7/case-3", hit_count=2),
        make_pathway(trigger_ref="benchmark/run-7", hit_count=5),
        make_pathway(trigger_ref="pharmacy/refill", hit_count=9),
    ]

    candidates = get_candidates(operator, trigger_ref="benchmark/run-7/case-3")

    assert {c["id"] for c in candidates} == {str(p.pk) for p in made}
    for candidate in candidates:
        dimensions = candidate["dimensions"]
        assert set(dimensions) == set(AXES)
        for axis, value in dimensions.items():
            assert set(value) == {"score", "bucket"}, axis
            assert isinstance(value["score"], int)
            assert 0 <= value["score"] <= MAX_SCORE
            assert value["bucket"] == ("low" if value["score"] <= 2 else "medium" if value["score"] <= 4 else "high")
        # The same radar the library computes for the fully loaded row.
        (expected,) = candidate_radars([Pathway.objects.get(pk=candidate["id"])])
        assert dimensions == expected


def test_no_candidates_means_no_radars(operator: APIClient) -> None:
    assert get_candidates(operator, trigger_type="nothing_here") == []
    assert candidate_radars([]) == []


# --- Recency --------------------------------------------------------------------------------------


def test_recency_is_high_for_a_pathway_hit_today_and_0_for_one_created_200_days_ago(
    operator: APIClient, clock: time_machine.Coordinates
) -> None:
    long_ago = NOW - timedelta(days=200)
    hit_today = make_pathway(trigger_ref="r/today", created_at=long_ago, last_hit_at=NOW, hit_count=1)
    never_hit = make_pathway(trigger_ref="r/old", created_at=long_ago)
    new = make_pathway(trigger_ref="r/new", created_at=NOW - timedelta(days=3))
    hit_a_month_ago = make_pathway(
        trigger_ref="r/month", created_at=long_ago, last_hit_at=NOW - timedelta(days=31), hit_count=1
    )

    dims = dims_by_id(get_candidates(operator))

    assert dims[str(hit_today.pk)]["recency"] == {"score": 7, "bucket": "high"}
    assert dims[str(never_hit.pk)]["recency"] == {"score": 0, "bucket": "low"}  # 7 - min(7, floor(log2(201)))
    assert dims[str(new.pk)]["recency"]["score"] == 5  # 3 days
    assert dims[str(hit_a_month_ago.pk)]["recency"]["score"] == 2  # 31 days since the last hit


def test_recency_of_a_candidate_fades_as_time_passes(operator: APIClient, clock: time_machine.Coordinates) -> None:
    pathway = make_pathway(trigger_ref="r/fading")
    seen = []
    for days in (0, 1, 7, 63, 200):
        clock.move_to(NOW + timedelta(days=days))
        seen.append(dims_by_id(get_candidates(operator))[str(pathway.pk)]["recency"]["score"])

    assert seen == [7, 6, 4, 1, 0]


# --- Maturity ------------------------------------------------------------------------------------


def test_maturity_follows_the_trigger_family(operator: APIClient) -> None:
    # user_question: 5 active, one reused 3 times (mature); lab_result: 1 active (growing);
    # imaging: 5 active, none reused 3 times (growing).
    mature = [make_pathway(trigger_ref=f"m/{i}", hit_count=3 if i == 0 else 0) for i in range(5)]
    growing = make_pathway(trigger_type="lab_result", trigger_ref="g/0")
    not_yet = [make_pathway(trigger_type="imaging", trigger_ref=f"i/{i}", hit_count=2) for i in range(5)]

    mature_dims = dims_by_id(get_candidates(operator))
    growing_dims = dims_by_id(get_candidates(operator, trigger_type="lab_result"))
    not_yet_dims = dims_by_id(get_candidates(operator, trigger_type="imaging"))

    # Family 4 plus reuse: 3 hits -> 2, 0 hits -> 0.
    assert mature_dims[str(mature[0].pk)]["maturity"] == {"score": 6, "bucket": "high"}
    for pathway in mature[1:]:
        assert mature_dims[str(pathway.pk)]["maturity"] == {"score": 4, "bucket": "medium"}
    assert growing_dims[str(growing.pk)]["maturity"] == {"score": 2, "bucket": "low"}
    for pathway in not_yet:
        assert not_yet_dims[str(pathway.pk)]["maturity"]["score"] == 2 + 1  # growing, 2 hits -> 1


def test_a_demoted_pathway_does_not_make_its_family_mature(operator: APIClient) -> None:
    pathways = [make_pathway(trigger_ref=f"m/{i}", hit_count=3) for i in range(4)]
    make_pathway(trigger_ref="m/demoted", hit_count=3, demoted_at=NOW)

    dims = dims_by_id(get_candidates(operator))

    assert len(dims) == 4  # demoted pathways never match
    for pathway in pathways:
        assert dims[str(pathway.pk)]["maturity"]["score"] == 2 + 2  # growing, 3 hits -> 2


# --- Coverage, consensus, risk come from the seed flow and the trigger ---------------------------


def test_seed_flow_evidence_kinds_and_verdicts_feed_coverage_and_consensus(operator: APIClient) -> None:
    rich = make_pathway(trigger_ref="c/rich", step_kinds=["retrieval", "llm_prompt", "verdict", "retrieval"])
    ReasoningFlow.objects.filter(pk=rich.seed_flow_id).update(outcome_metrics={"evidence_hits": 8})
    verdict_step(rich.seed_flow_id, 1, "critic", "promote")
    verdict_step(rich.seed_flow_id, 2, "researcher", "promote")
    plain = make_pathway(trigger_ref="c/plain")

    dims = dims_by_id(get_candidates(operator))

    assert dims[str(rich.pk)]["coverage"]["score"] == 4 + 2  # 8 hits: 4; three distinct kinds: 2
    assert dims[str(rich.pk)]["consensus"]["score"] == 5  # two agents agreeing
    assert dims[str(plain.pk)]["coverage"]["score"] == 0
    assert dims[str(plain.pk)]["consensus"]["score"] == 0


def test_aborted_flows_with_the_candidates_trigger_raise_its_risk(operator: APIClient) -> None:
    shaky = make_pathway(trigger_ref="k/shaky")
    steady = make_pathway(trigger_ref="k/steady")
    for _ in range(3):
        aborted_flow(QUERY_TYPE, "k/shaky")
    aborted_flow("lab_result", "k/steady")  # another trigger type: not a sibling

    dims = dims_by_id(get_candidates(operator))

    assert dims[str(shaky.pk)]["risk"]["score"] == 2  # capped at 2
    assert dims[str(steady.pk)]["risk"]["score"] == 0


def test_a_low_confidence_pathway_scores_low_confidence_and_some_risk(operator: APIClient) -> None:
    weak = make_pathway(trigger_ref="f/weak")  # the factory's confidence is 0.95
    Pathway.objects.filter(pk=weak.pk).update(confidence=0.4)
    sure = make_pathway(trigger_ref="f/sure")

    dims = dims_by_id(get_candidates(operator))

    # round(7 * (0.4 + 0.4) / 2) = 3; below 0.5 counts as a low-confidence step.
    assert dims[str(weak.pk)]["confidence"]["score"] == 3
    assert dims[str(weak.pk)]["risk"]["score"] == 1
    assert dims[str(sure.pk)]["confidence"]["score"] == 7  # round(6.65)
    assert dims[str(sure.pk)]["risk"]["score"] == 0


# --- Query counts -------------------------------------------------------------------------------------


def library_of(size: int, trigger_type: str | None = None) -> list[Pathway]:
    """``size`` pathways (over two trigger types unless one is given), each seed flow with a
    verdict, every third with an aborted sibling flow."""
    made = [
        make_pathway(
            trigger_type=trigger_type or (QUERY_TYPE if i % 2 else "lab_result"), trigger_ref=f"q/{i}", hit_count=i
        )
        for i in range(size)
    ]
    for i, pathway in enumerate(made):
        verdict_step(pathway.seed_flow_id, 1, "critic", "promote")
        if i % 3 == 0:
            aborted_flow(pathway.trigger_type, pathway.trigger_ref)
    # Fully loaded rows: what the library needs is already on them.
    return list(Pathway.objects.filter(pk__in=[p.pk for p in made]))


@pytest.mark.parametrize("size", [2, 10])
def test_candidate_radars_runs_two_queries_whatever_the_number_of_candidates(
    size: int, django_assert_num_queries: Callable[..., Any]
) -> None:
    pathways = library_of(size)

    # 1. the inputs: each pathway's fields, its seed flow's outcome_metrics (evidence
    #    hits), the seed's verdict steps (consensus) and the aborted flows with its
    #    trigger (risk)
    # 2. family maturity: bounded active / high-hit probes per trigger type
    with django_assert_num_queries(2):
        radars = candidate_radars(pathways)

    assert len(radars) == size
    assert all(set(r) == set(AXES) for r in radars)
    assert all(r["consensus"]["score"] == 2 for r in radars)  # one verdict on every seed flow


def match_query_count(operator: APIClient, trigger_type: str, size: int) -> int:
    library_of(size, trigger_type)
    token_cache.clear()  # both counts include the token lookup
    with CaptureQueriesContext(connection) as queries:
        candidates = get_candidates(operator, trigger_type=trigger_type)
    assert len(candidates) == size
    return len(queries.captured_queries)


def test_candidate_radars_on_matcher_output_runs_two_queries(
    django_assert_num_queries: Callable[..., Any],
) -> None:
    library_of(10)
    candidates = match(QUERY_TYPE, "", client=None, limit=50)
    assert len(candidates) == 5

    with django_assert_num_queries(2):
        candidate_radars([c.pathway for c in candidates])


def test_match_route_runs_as_many_queries_for_10_candidates_as_for_2(operator: APIClient) -> None:
    small = match_query_count(operator, "few_candidates", 2)
    large = match_query_count(operator, "many_candidates", 10)

    assert large == small
