"""The Decision Dimensions snapshot: stored at flow close, served to the patient ever after.

Flows are written through the agent API (``reasoning.write``); the narrative is read with
a ``reasoning.read`` token bound to a consenting patient.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from pathways.models import Pathway
from pathways.radar import library_facts
from patients.models import Patient
from reasoning import radar as radar_module
from reasoning.dimensions import AXES, LABELS, is_radar
from reasoning.models import ReasoningFlow
from reasoning.radar import flow_radar
from reasoning.recording import services
from tests.factories import add_step, make_pathway, open_flow

pytestmark = pytest.mark.django_db

FLOWS = "/api/reasoning/flows"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def flow_url(flow_id: str) -> str:
    return f"{FLOWS}/{flow_id}"


def close(agent: APIClient, flow_id: str, *, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "flow_state": "completed",
        "outcome_type": "recommendation_delivered",
        "outcome_summary": "Suggested a follow-up visit with the care team",
    }
    if metrics is not None:
        body["outcome_metrics"] = metrics
    response = agent.patch(flow_url(flow_id), body, format="json")
    assert response.status_code == 200, response.content
    closed: dict[str, Any] = response.json()
    return closed


def abort(agent: APIClient, flow_id: str) -> None:
    response = agent.patch(flow_url(flow_id), {"flow_state": "aborted", "abort_reason": "timeout"}, format="json")
    assert response.status_code == 200, response.content


def snapshot_of(flow_id: str) -> dict[str, dict[str, Any]]:
    stored = ReasoningFlow.objects.get(pk=flow_id).dimensions_snapshot
    assert is_radar(stored), stored
    return stored


def scores(radar: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {axis: radar[axis]["score"] for axis in AXES}


@pytest.fixture
def clock_start() -> datetime:
    return T0


def read_dimensions(patient_app: APIClient, flow_id: str) -> dict[str, Any]:
    response = patient_app.get(flow_url(flow_id))
    assert response.status_code == 200, response.content
    dimensions: dict[str, Any] = response.json()["dimensions"]
    return dimensions


def served_scores(dimensions: dict[str, Any]) -> dict[str, int]:
    return {item["axis"]: item["score"] for item in dimensions["axes"]}


# --- Stored at close ------------------------------------------------------------------------


def test_closing_through_the_api_stores_the_radar_as_it_stood_at_close(agent: APIClient) -> None:
    flow_id = open_flow(agent, trigger_type="dims_probe")["id"]
    add_step(agent, flow_id, kind="retrieval", confidence=0.9)
    add_step(agent, flow_id, kind="llm_prompt", agent="critic", confidence=0.8)

    closed = close(agent, flow_id, metrics={"evidence_hits": 3})

    snapshot = snapshot_of(flow_id)
    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert set(snapshot) == set(AXES)
    assert snapshot == flow_radar(flow, now=flow.closed_at)
    assert closed["dimensions_snapshot"] == snapshot
    assert snapshot == {
        # round(7 * (0.8 + 0.85) / 2) = round(5.775)
        "confidence": {"score": 6, "bucket": "high"},
        # 3 evidence hits: 2; two step kinds: 1
        "coverage": {"score": 3, "bucket": "medium"},
        # no pathway of this trigger type: sparse
        "maturity": {"score": 0, "bucket": "low"},
        # taken at the moment of decision
        "recency": {"score": 7, "bucket": "high"},
        "consensus": {"score": 0, "bucket": "low"},
        "risk": {"score": 0, "bucket": "low"},
    }


def test_close_flow_service_stores_the_snapshot_too(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, confidence=0.95)

    flow = services.close_flow(
        uuid.UUID(flow_id), state="completed", actor="system:test", outcome_type="recommendation_delivered"
    )

    assert flow.dimensions_snapshot == snapshot_of(flow_id)
    assert flow.dimensions_snapshot == flow_radar(flow, now=flow.closed_at)


def test_an_active_flow_has_no_snapshot(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, confidence=0.9)

    assert ReasoningFlow.objects.get(pk=flow_id).dimensions_snapshot is None


# --- The snapshot reflects the inputs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("confidences", "risk", "confidence"),
    [
        pytest.param([0.9, 0.95], 0, 6, id="all_steady"),  # round(7 * (0.9 + 0.925) / 2) = round(6.39)
        pytest.param([0.4, 0.9], 1, 4, id="one_low_step"),  # round(7 * (0.4 + 0.65) / 2) = round(3.675)
        pytest.param([0.3, 0.2, 0.1], 2, 1, id="three_low_steps_capped_at_2"),  # round(7 * 0.3 / 2) = round(1.05)
    ],
)
def test_low_confidence_steps_raise_risk(
    agent: APIClient, confidences: list[float], risk: int, confidence: int
) -> None:
    flow_id = open_flow(agent)["id"]
    for value in confidences:
        add_step(agent, flow_id, confidence=value)

    close(agent, flow_id)

    snapshot = snapshot_of(flow_id)
    assert snapshot["risk"]["score"] == risk
    assert snapshot["confidence"]["score"] == confidence


@pytest.fixture(params=["with the library", "without it"])
def with_or_without_the_library(request: pytest.FixtureRequest) -> Iterator[None]:
    """The pathway library counts the aborted siblings in its facts' statement; without it (no
    provider registered), reasoning counts them itself."""
    if request.param == "without it":
        radar_module.register_library_facts(None)
    yield
    radar_module.register_library_facts(library_facts)


@pytest.mark.parametrize(("aborted", "risk"), [(0, 0), (1, 1), (2, 2), (3, 2)])
@pytest.mark.usefixtures("with_or_without_the_library")
def test_aborted_siblings_with_the_same_trigger_raise_risk(agent: APIClient, aborted: int, risk: int) -> None:
    ref = "portal/question/aborted-siblings"
    for _ in range(aborted):
        abort(agent, open_flow(agent, trigger_ref=ref)["id"])
    # Neither another ref, another trigger type, a completed sibling nor an active one counts.
    abort(agent, open_flow(agent, trigger_ref=f"{ref}/other")["id"])
    abort(agent, open_flow(agent, trigger_type="lab_result", trigger_ref=ref)["id"])
    close(agent, open_flow(agent, trigger_ref=ref)["id"])
    open_flow(agent, trigger_ref=ref)
    flow_id = open_flow(agent, trigger_ref=ref)["id"]
    add_step(agent, flow_id, confidence=0.9)

    close(agent, flow_id)

    assert snapshot_of(flow_id)["risk"]["score"] == risk


def test_a_summary_failing_the_patient_safety_guard_raises_risk_by_2(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, confidence=0.9, summary_text="Reviewed metformin 500mg")

    close(agent, flow_id)

    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert flow.patient_safe_summary is False
    assert snapshot_of(flow_id)["risk"]["score"] == 2


@pytest.mark.parametrize(
    ("metrics", "coverage"),
    [
        pytest.param(None, 0, id="no_metrics"),
        pytest.param({"evidence_hits": 0}, 0, id="zero_hits"),
        pytest.param({"evidence_hits": 1}, 1, id="one_hit"),
        pytest.param({"evidence_hits": 5}, 3, id="five_hits"),
        pytest.param({"evidence_hits": 8}, 4, id="eight_hits"),
        pytest.param({"composite_k": 0.8}, 0, id="metrics_without_hits"),
    ],
)
def test_evidence_hits_in_outcome_metrics_raise_coverage(
    agent: APIClient, metrics: dict[str, Any] | None, coverage: int
) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, confidence=0.9)  # one step kind: no breadth points

    close(agent, flow_id, metrics=metrics)

    assert snapshot_of(flow_id)["coverage"]["score"] == coverage


def test_distinct_step_kinds_add_breadth_to_coverage(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    for kind in ("retrieval", "llm_prompt", "graph_walk", "aggregation", "retrieval"):
        add_step(agent, flow_id, kind=kind, confidence=0.9)

    close(agent, flow_id, metrics={"evidence_hits": 2})

    assert snapshot_of(flow_id)["coverage"]["score"] == 2 + 3  # 2 hits: 2; four kinds: min(3, 4 - 1)


@pytest.mark.parametrize(
    ("verdicts", "consensus"),
    [
        pytest.param([], 0, id="no_verdicts"),
        pytest.param([("critic", "promote")], 2, id="one_agent"),
        pytest.param([("critic", "promote"), ("researcher", "promote")], 5, id="two_agents_agree"),
        pytest.param([("critic", "promote"), ("researcher", "reject")], 2, id="two_agents_disagree"),
        pytest.param(
            [("critic", "reject"), ("researcher", "promote"), ("critic", "promote")],
            5,
            id="an_agents_last_verdict_counts",
        ),
        pytest.param(
            [("critic", "promote"), ("researcher", "promote"), ("correlator", "promote")], 7, id="three_agree"
        ),
    ],
)
def test_verdict_steps_set_consensus(agent: APIClient, verdicts: list[tuple[str, str]], consensus: int) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, confidence=0.9)
    for by, verdict in verdicts:
        add_step(agent, flow_id, kind="verdict", agent=by, confidence=0.9, outputs={"verdict": verdict})

    close(agent, flow_id)

    assert snapshot_of(flow_id)["consensus"]["score"] == consensus


def test_verdict_steps_without_a_label_agree_as_concluded(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, kind="verdict", agent="critic", confidence=0.9)
    add_step(agent, flow_id, kind="verdict", agent="researcher", confidence=0.9, outputs={"note": "done"})

    close(agent, flow_id)

    assert snapshot_of(flow_id)["consensus"]["score"] == 5


def test_a_non_verdict_step_with_a_verdict_output_is_not_a_vote(agent: APIClient) -> None:
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, kind="llm_prompt", agent="critic", confidence=0.9, outputs={"verdict": "promote"})

    close(agent, flow_id)

    assert snapshot_of(flow_id)["consensus"]["score"] == 0


# --- Maturity comes from the pathway library ------------------------------------------------------


def library(trigger_type: str, *, active: int, high_hit: int = 0, demoted: int = 0) -> None:
    for i in range(active):
        make_pathway(trigger_type=trigger_type, trigger_ref=f"lib/{i}", hit_count=3 if i < high_hit else 0)
    for i in range(demoted):
        make_pathway(trigger_type=trigger_type, trigger_ref=f"lib/demoted/{i}", hit_count=9, demoted_at=T0)


@pytest.mark.parametrize(
    ("active", "high_hit", "demoted", "maturity"),
    [
        pytest.param(0, 0, 0, 0, id="sparse"),
        pytest.param(0, 0, 6, 0, id="only_demoted_is_sparse"),
        pytest.param(1, 0, 0, 2, id="growing"),
        pytest.param(5, 0, 0, 2, id="five_never_reused_is_growing"),
        pytest.param(4, 1, 3, 2, id="demoted_do_not_count_toward_mature"),
        pytest.param(5, 1, 0, 4, id="mature"),
    ],
)
def test_maturity_at_close_follows_the_trigger_family(
    agent: APIClient, active: int, high_hit: int, demoted: int, maturity: int
) -> None:
    library("lab_result", active=active, high_hit=high_hit, demoted=demoted)
    library("user_question", active=5, high_hit=5)  # another family: irrelevant
    flow_id = open_flow(agent, trigger_type="lab_result")["id"]
    add_step(agent, flow_id, confidence=0.95)

    close(agent, flow_id)

    # The closing flow has seeded no pathway yet (extraction runs after commit): no reuse points.
    assert snapshot_of(flow_id)["maturity"]["score"] == maturity


def test_mature_family_gives_the_flow_maturity_of_at_least_4(agent: APIClient) -> None:
    library("user_question", active=6, high_hit=2)
    flow_id = open_flow(agent)["id"]
    add_step(agent, flow_id, confidence=0.95)

    close(agent, flow_id)

    assert snapshot_of(flow_id)["maturity"]["score"] >= 4


# --- The narrative serves the snapshot ------------------------------------------------------------


def test_narrative_serves_the_snapshot_with_patient_labels(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    flow_id = open_flow(agent, patient_id=str(consenting_patient.pk))["id"]
    add_step(agent, flow_id, confidence=0.9)
    add_step(agent, flow_id, kind="verdict", agent="critic", confidence=0.4, outputs={"verdict": "promote"})
    add_step(agent, flow_id, kind="verdict", agent="researcher", confidence=0.9, outputs={"verdict": "promote"})
    close(agent, flow_id, metrics={"evidence_hits": 4})

    dimensions = read_dimensions(patient_app, flow_id)

    snapshot = snapshot_of(flow_id)
    assert dimensions["source"] == "snapshot"
    assert [item["axis"] for item in dimensions["axes"]] == list(AXES)
    assert {item["axis"]: item["label"] for item in dimensions["axes"]} == LABELS["patient"]
    labels = [item["label"] for item in dimensions["axes"]]
    assert {"Evidence breadth", "Care team agreement", "Caution flags"} <= set(labels)
    for item in dimensions["axes"]:
        assert set(item) == {"axis", "label", "score", "bucket"}
        assert item["score"] == snapshot[item["axis"]]["score"]
        assert item["bucket"] == snapshot[item["axis"]]["bucket"]
    assert served_scores(dimensions)["consensus"] == 5
    assert served_scores(dimensions)["risk"] == 1  # the 0.4 step


def test_narrative_keeps_serving_the_snapshot_after_the_world_changes(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient, clock: time_machine.Coordinates
) -> None:
    ref = "portal/question/world-changes"
    flow_id = open_flow(agent, trigger_ref=ref, patient_id=str(consenting_patient.pk))["id"]
    add_step(agent, flow_id, confidence=0.9)
    close(agent, flow_id)
    at_close = read_dimensions(patient_app, flow_id)
    assert served_scores(at_close)["recency"] == 7
    assert served_scores(at_close)["risk"] == 0

    # 200 days on, two flows with the same trigger have been aborted and the family matured.
    clock.move_to(T0 + timedelta(days=200))
    abort(agent, open_flow(agent, trigger_ref=ref)["id"])
    abort(agent, open_flow(agent, trigger_ref=ref)["id"])
    library("user_question", active=5, high_hit=1)
    now = flow_radar(ReasoningFlow.objects.get(pk=flow_id))
    assert scores(now) != served_scores(at_close)  # the world really did change
    assert (now["recency"]["score"], now["risk"]["score"], now["maturity"]["score"]) == (0, 2, 4)

    later = read_dimensions(patient_app, flow_id)

    assert later == at_close
    assert later["source"] == "snapshot"


@pytest.mark.parametrize("stored", [None, {}, {"confidence": {"score": 5, "bucket": "high"}}])
def test_flow_closed_before_snapshots_existed_gets_a_computed_radar(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient, clock: time_machine.Coordinates, stored: Any
) -> None:
    ref = "portal/question/pre-snapshot"
    flow_id = open_flow(agent, trigger_ref=ref, patient_id=str(consenting_patient.pk))["id"]
    add_step(agent, flow_id, confidence=0.9)
    close(agent, flow_id)
    ReasoningFlow.objects.filter(pk=flow_id).update(dimensions_snapshot=stored)
    clock.move_to(T0 + timedelta(days=40))
    abort(agent, open_flow(agent, trigger_ref=ref)["id"])

    dimensions = read_dimensions(patient_app, flow_id)

    assert dimensions["source"] == "computed"
    assert {item["axis"]: item["label"] for item in dimensions["axes"]} == LABELS["patient"]
    assert served_scores(dimensions) == scores(flow_radar(ReasoningFlow.objects.get(pk=flow_id)))
    # Computed now: 40 days since close (7 - floor(log2(41)) = 2) and the sibling aborted since.
    assert served_scores(dimensions)["recency"] == 2
    assert served_scores(dimensions)["risk"] == 1
    for item in dimensions["axes"]:
        assert item["bucket"] == ("low" if item["score"] <= 2 else "medium" if item["score"] <= 4 else "high")


def test_computed_radar_counts_the_reuse_and_demotion_of_the_pathway_the_flow_seeded(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    flow_id = open_flow(agent, trigger_type="lab_result", patient_id=str(consenting_patient.pk))["id"]
    add_step(agent, flow_id, confidence=0.95)
    close(agent, flow_id)
    flow = ReasoningFlow.objects.get(pk=flow_id)
    seeded = Pathway.objects.create(
        trigger_type=flow.trigger_type, trigger_ref=flow.trigger_ref, seed_flow=flow, confidence=0.95, hit_count=7
    )
    ReasoningFlow.objects.filter(pk=flow_id).update(dimensions_snapshot=None)

    served = served_scores(read_dimensions(patient_app, flow_id))
    # Its own pathway makes the family growing (2), reused 7 times (3).
    assert served["maturity"] == 2 + 3
    assert served["risk"] == 0

    Pathway.objects.filter(pk=seeded.pk).update(demoted_at=T0)
    served = served_scores(read_dimensions(patient_app, flow_id))
    # Demoted: Risk +3, and the family has no active pathway left (sparse).
    assert served["risk"] == 3
    assert served["maturity"] == 0 + 3
