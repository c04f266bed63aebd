"""Producers at flow close: weak Researcher results and rejected Critic claims feed the loop.

Flows are opened, filled and closed through the real API with a ``reasoning.write``
token; the close owes the production (``reasoning.recording.close_work``) and its first attempt runs from
``transaction.on_commit``, so the close is made inside
``django_capture_on_commit_callbacks(execute=True)`` (and once for real, in a transactional test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import CloseWork, ReasoningFlow
from reasoning.recording import close_work
from research_backlog import services
from research_backlog.models import ClaimReview, ResearchRequest
from research_backlog.producers import produce
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

REPO_ROOT = Path(__file__).resolve().parents[2]
FLOWS = "/api/reasoning/flows"
PLAIN_TRIGGER = "Patient asked whether a medication change is needed"
DOSE_TRIGGER = "Reviewed metformin 500mg twice daily"
TRIGGER_REF = "q/42"
CLAIM = "claim/77"

DEEPER_CREATED = "reasoning.research.deeper_request_created"
CLAIM_MARKED = "reasoning.claims_pending_review.marked"

WEAK_RESEARCH: dict[str, Any] = {"evidence_hits": 0}
CRITIC_REJECT: dict[str, Any] = {"verdict": "reject", "claim_id": CLAIM, "rejection_reason": "contradicted_by_source"}

FLAG_COMBINATIONS = [
    pytest.param(False, False, id="both-off"),
    pytest.param(True, False, id="research-only"),
    pytest.param(False, True, id="critic-only"),
    pytest.param(True, True, id="both-on"),
]


@dataclass
class Closed:
    flow_id: str
    created: dict[str, Any]  # the create response body
    status: int
    body: Any  # the close response body
    callbacks: int  # on_commit callbacks the close registered (and that ran)

    @property
    def flow(self) -> ReasoningFlow:
        return ReasoningFlow.objects.get(pk=self.flow_id)


RunFlow = Callable[..., Closed]


def open_flow_with_a_step(
    client: APIClient,
    by: str,
    *,
    trigger_ref: str = TRIGGER_REF,
    trigger_summary: str = PLAIN_TRIGGER,
    **fields: Any,
) -> dict[str, Any]:
    """Open a flow run by agent ``by`` (the producer that reads it depends on who ran it) with one
    retrieval step of its own, ready to close; return the create body."""
    created = open_flow(client, agent=by, trigger_ref=trigger_ref, trigger_summary=trigger_summary, **fields)
    add_step(client, created["id"], agent=by, summary_text="Searched the guideline library")
    return created


@pytest.fixture
def run_flow(agent: APIClient, django_capture_on_commit_callbacks: Any) -> RunFlow:
    """Open a flow run by agent ``by``, add a step and close it; ``metrics`` goes in as ``outcome_metrics``."""

    def run(
        by: str = "researcher",
        *,
        metrics: Any = None,
        state: str = "completed",
        trigger_ref: str = TRIGGER_REF,
        trigger_summary: str = PLAIN_TRIGGER,
        dispatched_from_backlog: bool | None = None,
    ) -> Closed:
        fields: dict[str, Any] = {"trigger_ref": trigger_ref, "trigger_summary": trigger_summary}
        if dispatched_from_backlog is not None:
            fields["dispatched_from_backlog"] = dispatched_from_backlog
        created = open_flow_with_a_step(agent, by, **fields)
        close: dict[str, Any] = {"flow_state": state}
        if state == "completed":
            close["outcome_type"] = "research_delivered"
        else:
            close["abort_reason"] = "tool_error"
        if metrics is not None:
            close["outcome_metrics"] = metrics
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            response = agent.patch(f"{FLOWS}/{created['id']}", close, format="json")
        return Closed(created["id"], created, response.status_code, response.json(), len(callbacks))

    return run


def requests_for(closed: Closed) -> list[ResearchRequest]:
    return list(ResearchRequest.objects.filter(source_flow_id=uuid.UUID(closed.flow_id)))


def assert_nothing_produced() -> None:
    assert list(ResearchRequest.objects.values_list("reason", "source")) == []
    assert list(ClaimReview.objects.values_list("claim_id", "source")) == []
    assert not AuditEvent.objects.filter(action__in=[DEEPER_CREATED, CLAIM_MARKED]).exists()


# --- Flags ------------------------------------------------------------------------------


@pytest.mark.parametrize(("research_on", "critic_on"), FLAG_COMBINATIONS)
def test_each_flag_turns_on_its_own_producer_only(run_flow: RunFlow, research_on: bool, critic_on: bool) -> None:
    with override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=research_on, CRITIC_AUTO_ENQUEUE_ENABLED=critic_on):
        researcher = run_flow("researcher", metrics=WEAK_RESEARCH)
        critic = run_flow("critic", metrics=CRITIC_REJECT)

    assert researcher.status == critic.status == 200
    assert len(requests_for(researcher)) == (1 if research_on else 0)
    # Under mark_for_review (the default) the Critic never enqueues research.
    assert requests_for(critic) == []
    assert ResearchRequest.objects.count() == (1 if research_on else 0)
    reviews = list(ClaimReview.objects.values_list("claim_id", "source_flow_id"))
    assert reviews == ([(CLAIM, critic.flow.pk)] if critic_on else [])
    assert AuditEvent.objects.filter(action=DEEPER_CREATED).count() == (1 if research_on else 0)
    assert AuditEvent.objects.filter(action=CLAIM_MARKED).count() == (1 if critic_on else 0)


@pytest.mark.parametrize(("research_on", "critic_on"), FLAG_COMBINATIONS)
def test_critic_re_research_is_governed_by_the_critic_flag_alone(
    run_flow: RunFlow, research_on: bool, critic_on: bool
) -> None:
    with override_settings(
        RESEARCH_AUTO_ENQUEUE_ENABLED=research_on,
        CRITIC_AUTO_ENQUEUE_ENABLED=critic_on,
        CRITIC_DISPATCH_STRATEGY="re_research",
    ):
        critic = run_flow("critic", metrics=CRITIC_REJECT)

    reasons = [row.reason for row in requests_for(critic)]
    assert reasons == (["claim_rejected"] if critic_on else [])
    assert not ClaimReview.objects.exists()


def test_flags_and_strategy_default_to_off_and_mark_for_review() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESEARCH_", "CRITIC_", "BACKLOG_"))}
    script = (
        "import django, json, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); django.setup(); "
        "from django.conf import settings as s; "
        "print(json.dumps([s.RESEARCH_AUTO_ENQUEUE_ENABLED, s.CRITIC_AUTO_ENQUEUE_ENABLED, "
        "s.CRITIC_DISPATCH_STRATEGY, s.BACKLOG_CONSUMER_ENABLED, s.RESEARCH_DISPATCHER_URL]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, False, "mark_for_review", False, ""]


# --- Researcher ---------------------------------------------------------------------------


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_zero_evidence_hits_enqueues_no_evidence_hits(run_flow: RunFlow) -> None:
    closed = run_flow("researcher", metrics={"evidence_hits": 0, "composite_k": 0.9})

    assert closed.status == 200
    (row,) = ResearchRequest.objects.all()
    assert row.status == ResearchRequest.Status.PENDING
    assert row.reason == ResearchRequest.Reason.NO_EVIDENCE_HITS
    assert row.source == "researcher_auto_enqueue"
    assert row.source_flow_id == closed.flow.pk
    assert row.trigger_type == "user_question"
    assert row.trigger_ref == TRIGGER_REF
    assert PLAIN_TRIGGER in row.question
    assert "no evidence" in row.question
    assert row.dispatched_from_backlog is True  # the run it asks for must not enqueue again
    assert row.retry_count == 0
    assert row.dispatched_at is None
    assert row.completed_flow_id is None
    (event,) = AuditEvent.objects.filter(action=DEEPER_CREATED)
    assert event.payload["reason"] == "no_evidence_hits"
    assert event.payload["source"] == "researcher_auto_enqueue"
    assert event.payload["source_flow_id"] == closed.flow_id
    assert event.actor == "system:backlog_producer"
    # Ids and labels only: the question stays out of the audit trail.
    assert PLAIN_TRIGGER not in json.dumps(event.payload)


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_composite_k_below_the_threshold_enqueues_weak_composite_k(run_flow: RunFlow) -> None:
    closed = run_flow("researcher", metrics={"composite_k": 0.59, "evidence_hits": 4})

    (row,) = requests_for(closed)
    assert row.reason == ResearchRequest.Reason.WEAK_COMPOSITE_K
    assert row.source == "researcher_auto_enqueue"
    assert row.status == ResearchRequest.Status.PENDING
    assert PLAIN_TRIGGER in row.question
    assert "0.59" in row.question


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_composite_k_alone_without_evidence_hits_still_counts(run_flow: RunFlow) -> None:
    closed = run_flow("researcher", metrics={"composite_k": 0.1})

    assert [row.reason for row in requests_for(closed)] == ["weak_composite_k"]


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
@pytest.mark.parametrize(
    "metrics",
    [
        pytest.param({"composite_k": 0.6, "evidence_hits": 1}, id="k-at-threshold"),
        pytest.param({"composite_k": 0.95, "evidence_hits": 12}, id="strong"),
        pytest.param({"composite_k": 0.6}, id="k-at-threshold-no-hits-field"),
        pytest.param({"evidence_hits": 3}, id="hits-only"),
        pytest.param({"composite_k": None, "evidence_hits": None}, id="nulls"),
        pytest.param({}, id="empty-metrics"),
        pytest.param(None, id="no-metrics"),
    ],
)
def test_good_or_absent_results_enqueue_nothing(run_flow: RunFlow, metrics: dict[str, Any] | None) -> None:
    closed = run_flow("researcher", metrics=metrics)

    assert closed.status == 200
    assert_nothing_produced()


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True, CRITIC_AUTO_ENQUEUE_ENABLED=True)
@pytest.mark.parametrize(
    ("by", "metrics"), [("researcher", WEAK_RESEARCH), ("critic", CRITIC_REJECT)], ids=["researcher", "critic"]
)
def test_an_aborted_flow_produces_nothing(run_flow: RunFlow, by: str, metrics: dict[str, Any]) -> None:
    closed = run_flow(by, metrics=metrics, state="aborted")

    assert closed.status == 200
    assert closed.body["flow_state"] == "aborted"
    assert_nothing_produced()


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_a_trigger_summary_the_guard_rejects_is_not_copied_into_the_question(run_flow: RunFlow) -> None:
    closed = run_flow("researcher", metrics=WEAK_RESEARCH, trigger_summary=DOSE_TRIGGER)

    assert closed.body["patient_safe_summary"] is False  # the guard did reject it
    (row,) = requests_for(closed)
    for fragment in (DOSE_TRIGGER, "metformin", "500mg"):
        assert fragment not in row.question
    # The question falls back to the trigger's labels.
    assert f"user_question {TRIGGER_REF}" in row.question


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_a_researcher_flow_with_a_critic_verdict_is_not_a_critic(run_flow: RunFlow) -> None:
    with override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True):
        closed = run_flow("researcher", metrics={"verdict": "reject", "claim_id": CLAIM, "evidence_hits": 5})

    assert closed.status == 200
    assert_nothing_produced()


# --- Critic -------------------------------------------------------------------------------


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True)
def test_reject_marks_the_claim_for_review_by_default(run_flow: RunFlow) -> None:
    closed = run_flow("critic", metrics=CRITIC_REJECT)

    (entry,) = ClaimReview.objects.all()
    assert entry.claim_id == CLAIM
    assert entry.status == ClaimReview.Status.PENDING
    assert entry.reason == "claim_rejected"
    assert entry.source == "critic_auto_enqueue"
    assert entry.source_flow_id == closed.flow.pk
    assert entry.trigger_type == "user_question"
    assert entry.marked_by == "system:backlog_producer"
    assert not ResearchRequest.objects.exists()
    (event,) = AuditEvent.objects.filter(action=CLAIM_MARKED)
    assert event.payload["claim_id"] == CLAIM
    assert event.payload["source_flow_id"] == closed.flow_id


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True, CRITIC_DISPATCH_STRATEGY="mark_for_review")
def test_reject_without_claim_id_marks_the_trigger_ref(run_flow: RunFlow) -> None:
    run_flow("critic", metrics={"verdict": "reject"}, trigger_ref="claim/from-trigger")

    assert list(ClaimReview.objects.values_list("claim_id", flat=True)) == ["claim/from-trigger"]


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True)
def test_reject_naming_no_claim_at_all_marks_nothing_and_still_closes(run_flow: RunFlow) -> None:
    closed = run_flow("critic", metrics={"verdict": "reject"}, trigger_ref="")

    assert closed.status == 200
    assert_nothing_produced()


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True, RESEARCH_AUTO_ENQUEUE_ENABLED=True)
@pytest.mark.parametrize("strategy", ["mark_for_review", "re_research"])
@pytest.mark.parametrize(
    "metrics",
    [
        pytest.param({"verdict": "promote", "claim_id": CLAIM}, id="promote"),
        pytest.param({"claim_id": CLAIM}, id="no-verdict"),
        pytest.param(None, id="no-metrics"),
    ],
)
def test_a_critic_verdict_other_than_reject_produces_nothing(
    run_flow: RunFlow, strategy: str, metrics: dict[str, Any] | None
) -> None:
    with override_settings(CRITIC_DISPATCH_STRATEGY=strategy):
        closed = run_flow("critic", metrics=metrics)

    assert closed.status == 200
    assert_nothing_produced()


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True, CRITIC_DISPATCH_STRATEGY="re_research")
def test_re_research_enqueues_a_claim_rejected_request_with_the_reason_in_the_question(run_flow: RunFlow) -> None:
    closed = run_flow("critic", metrics=CRITIC_REJECT)

    (row,) = ResearchRequest.objects.all()
    assert row.reason == ResearchRequest.Reason.CLAIM_REJECTED
    assert row.source == "critic_auto_enqueue"
    assert row.source_flow_id == closed.flow.pk
    assert row.status == ResearchRequest.Status.PENDING
    assert row.dispatched_from_backlog is True
    assert row.trigger_type == "user_question"
    assert row.trigger_ref == CLAIM
    assert "contradicted_by_source" in row.question
    assert CLAIM in row.question
    assert not ClaimReview.objects.exists()
    assert not AuditEvent.objects.filter(action=CLAIM_MARKED).exists()
    assert AuditEvent.objects.filter(action=DEEPER_CREATED).count() == 1


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True, CRITIC_DISPATCH_STRATEGY="re_research")
def test_re_research_without_a_rejection_reason_still_enqueues(run_flow: RunFlow) -> None:
    closed = run_flow("critic", metrics={"verdict": "reject", "claim_id": CLAIM})

    (row,) = requests_for(closed)
    assert row.reason == "claim_rejected"
    assert CLAIM in row.question


# --- The loop-break marker ------------------------------------------------------------------


@pytest.mark.parametrize(("research_on", "critic_on"), FLAG_COMBINATIONS)
@pytest.mark.parametrize("strategy", ["mark_for_review", "re_research"])
def test_flows_dispatched_from_backlog_never_produce(
    run_flow: RunFlow, research_on: bool, critic_on: bool, strategy: str
) -> None:
    with override_settings(
        RESEARCH_AUTO_ENQUEUE_ENABLED=research_on,
        CRITIC_AUTO_ENQUEUE_ENABLED=critic_on,
        CRITIC_DISPATCH_STRATEGY=strategy,
    ):
        closed = [
            run_flow("researcher", metrics=WEAK_RESEARCH, dispatched_from_backlog=True),
            run_flow("researcher", metrics={"composite_k": 0.1}, dispatched_from_backlog=True),
            run_flow("critic", metrics=CRITIC_REJECT, dispatched_from_backlog=True),
        ]

    for item in closed:
        assert item.status == 200
        assert item.created["dispatched_from_backlog"] is True
        assert item.body["dispatched_from_backlog"] is True
        assert item.flow.dispatched_from_backlog is True
        # Calling the producer directly is refused as well.
        with override_settings(
            RESEARCH_AUTO_ENQUEUE_ENABLED=research_on,
            CRITIC_AUTO_ENQUEUE_ENABLED=critic_on,
            CRITIC_DISPATCH_STRATEGY=strategy,
        ):
            assert produce(item.flow) is None
    assert_nothing_produced()


def test_dispatched_from_backlog_defaults_to_false_in_the_flow_json(agent: APIClient) -> None:
    created = open_flow(agent)

    assert created["dispatched_from_backlog"] is False
    assert ReasoningFlow.objects.get(pk=created["id"]).dispatched_from_backlog is False


@pytest.mark.parametrize("value", ["true", 1, None])
def test_dispatched_from_backlog_must_be_a_json_boolean(agent: APIClient, value: Any) -> None:
    response = agent.post(
        FLOWS, {"trigger_type": "user_question", "agent": "researcher", "dispatched_from_backlog": value}, format="json"
    )

    assert response.status_code == 400, response.content
    assert "dispatched_from_backlog" in response.json()
    assert not ReasoningFlow.objects.exists()


# --- Idempotency and failure isolation ---------------------------------------------------


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True, CRITIC_AUTO_ENQUEUE_ENABLED=True)
@pytest.mark.parametrize(
    ("by", "metrics", "strategy", "action"),
    [
        pytest.param("researcher", WEAK_RESEARCH, "mark_for_review", DEEPER_CREATED, id="researcher"),
        pytest.param("critic", CRITIC_REJECT, "mark_for_review", CLAIM_MARKED, id="critic-mark"),
        pytest.param("critic", CRITIC_REJECT, "re_research", DEEPER_CREATED, id="critic-re-research"),
    ],
)
def test_producing_twice_for_one_flow_leaves_one_entry_and_one_audit_event(
    run_flow: RunFlow, by: str, metrics: dict[str, Any], strategy: str, action: str
) -> None:
    with override_settings(CRITIC_DISPATCH_STRATEGY=strategy):
        closed = run_flow(by, metrics=metrics)  # the close produced once already
        flow = closed.flow
        produce(flow)
        produce(flow)

    assert ResearchRequest.objects.count() + ClaimReview.objects.count() == 1
    assert AuditEvent.objects.filter(action__in=[DEEPER_CREATED, CLAIM_MARKED]).count() == 1
    assert AuditEvent.objects.filter(action=action).count() == 1


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_produce_twice_without_a_close_signal_enqueues_once(agent: APIClient) -> None:
    created = open_flow_with_a_step(agent, "researcher")
    with override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=False):
        closed = agent.patch(
            f"{FLOWS}/{created['id']}",
            {"flow_state": "completed", "outcome_type": "research_delivered", "outcome_metrics": WEAK_RESEARCH},
            format="json",
        )
    assert closed.status_code == 200
    flow = ReasoningFlow.objects.get(pk=created["id"])

    assert produce(flow) == "enqueued:no_evidence_hits"
    produce(flow)

    assert ResearchRequest.objects.filter(source_flow=flow).count() == 1
    assert AuditEvent.objects.filter(action=DEEPER_CREATED).count() == 1


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True, CRITIC_AUTO_ENQUEUE_ENABLED=True)
@pytest.mark.parametrize(
    ("by", "metrics", "broken"),
    [("researcher", WEAK_RESEARCH, "enqueue"), ("critic", CRITIC_REJECT, "mark_claim_for_review")],
    ids=["enqueue", "mark"],
)
def test_a_producer_failure_never_fails_the_close(
    run_flow: RunFlow,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    by: str,
    metrics: dict[str, Any],
    broken: str,
) -> None:
    calls: list[dict[str, Any]] = []

    def boom(**kwargs: Any) -> Any:
        calls.append(kwargs)
        raise RuntimeError("backlog is down")

    monkeypatch.setattr(services, broken, boom)

    closed = run_flow(by, metrics=metrics)

    assert calls, "the producer did not run"
    assert closed.status == 200, closed.body
    assert closed.body["flow_state"] == "completed"
    assert closed.flow.flow_state == ReasoningFlow.State.COMPLETED
    assert AuditEvent.objects.filter(action="reasoning.flow.completed", target_id=closed.flow_id).exists()
    assert_nothing_produced()
    assert f"close work research_backlog.produce for flow {closed.flow_id} failed" in caplog.text

    # Still owed, and done once by the job when the backlog is back.
    (owed,) = CloseWork.objects.filter(flow_id=uuid.UUID(closed.flow_id))
    monkeypatch.undo()
    close_work.perform_due(owed.next_attempt_at)
    close_work.perform_due(owed.next_attempt_at)
    assert ResearchRequest.objects.count() + ClaimReview.objects.count() == 1
    assert AuditEvent.objects.filter(action__in=[DEEPER_CREATED, CLAIM_MARKED]).count() == 1
    assert not CloseWork.objects.exists()


# --- Bad outcome_metrics ----------------------------------------------------------------------


@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True, CRITIC_AUTO_ENQUEUE_ENABLED=True)
@pytest.mark.parametrize(
    ("metrics", "field"),
    [
        pytest.param({"composite_k": 1.5}, "composite_k", id="composite_k-above-1"),
        pytest.param({"composite_k": -0.01}, "composite_k", id="composite_k-below-0"),
        pytest.param({"composite_k": "high"}, "composite_k", id="composite_k-text"),
        pytest.param({"evidence_hits": -1}, "evidence_hits", id="evidence_hits-negative"),
        pytest.param({"evidence_hits": 2.5}, "evidence_hits", id="evidence_hits-fraction"),
        pytest.param({"verdict": "not a label"}, "verdict", id="verdict-sentence"),
        pytest.param({"verdict": 1}, "verdict", id="verdict-number"),
        pytest.param({"rejection_reason": "the source said otherwise"}, "rejection_reason", id="reason-sentence"),
        pytest.param({"claim_id": 77}, "claim_id", id="claim_id-number"),
        pytest.param({"evidence_hits": 0, "patient_name": "Jane Roe"}, "patient_name", id="unknown-key"),
        pytest.param(["evidence_hits", 0], None, id="list"),
        pytest.param("evidence_hits=0", None, id="string"),
    ],
)
def test_bad_outcome_metrics_are_400_naming_the_field_and_leave_the_flow_active(
    run_flow: RunFlow, metrics: Any, field: str | None
) -> None:
    closed = run_flow("researcher", metrics=metrics)

    assert closed.status == 400, closed.body
    assert "outcome_metrics" in closed.body, closed.body
    if field is not None:
        assert field in closed.body["outcome_metrics"], closed.body
    flow = closed.flow
    assert flow.flow_state == ReasoningFlow.State.ACTIVE
    assert flow.closed_at is None
    assert flow.outcome_metrics == {}
    assert closed.callbacks == 0
    assert not AuditEvent.objects.filter(action="reasoning.flow.completed").exists()
    assert_nothing_produced()


# --- The real commit path ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@override_settings(RESEARCH_AUTO_ENQUEUE_ENABLED=True)
def test_the_producer_runs_after_a_real_commit(agent: APIClient) -> None:
    created = open_flow_with_a_step(agent, "researcher")

    response = agent.patch(
        f"{FLOWS}/{created['id']}",
        {"flow_state": "completed", "outcome_type": "research_delivered", "outcome_metrics": {"composite_k": 0.3}},
        format="json",
    )

    assert response.status_code == 200, response.content
    assert response.json()["outcome_metrics"] == {"composite_k": 0.3}
    (row,) = ResearchRequest.objects.filter(source_flow_id=uuid.UUID(created["id"]))
    assert row.reason == "weak_composite_k"


# --- Start-up checks --------------------------------------------------------------------------

SETUP = "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE','config.settings'); django.setup()"
SECRET = "s" * 40


def start(**overrides: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESEARCH_", "CRITIC_", "BACKLOG_"))}
    env.update(overrides)
    return subprocess.run(
        [sys.executable, "-c", SETUP], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        pytest.param({"CRITIC_DISPATCH_STRATEGY": "bogus"}, "CRITIC_DISPATCH_STRATEGY", id="unknown-strategy"),
        pytest.param(
            {"RESEARCH_DISPATCHER_URL": "http://127.0.0.1:9/hook"}, "RESEARCH_DISPATCHER_SECRET", id="url-no-secret"
        ),
        pytest.param(
            {"RESEARCH_DISPATCHER_URL": "http://127.0.0.1:9/hook", "RESEARCH_DISPATCHER_SECRET": "short"},
            "RESEARCH_DISPATCHER_SECRET",
            id="short-secret",
        ),
        pytest.param(
            {"RESEARCH_DISPATCHER_URL": "ftp://127.0.0.1/hook", "RESEARCH_DISPATCHER_SECRET": SECRET},
            "RESEARCH_DISPATCHER_URL",
            id="non-http-url",
        ),
        pytest.param(
            {"RESEARCH_DISPATCHER_URL": "127.0.0.1:8000/hook", "RESEARCH_DISPATCHER_SECRET": SECRET},
            "RESEARCH_DISPATCHER_URL",
            id="url-without-scheme",
        ),
        pytest.param({"RESEARCH_AUTO_ENQUEUE_ENABLED": "maybe"}, "RESEARCH_AUTO_ENQUEUE_ENABLED", id="bad-flag"),
    ],
)
def test_bad_loop_settings_fail_at_start_up_naming_the_variable(env: dict[str, str], variable: str) -> None:
    done = start(**env)

    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert variable in done.stderr


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"CRITIC_DISPATCH_STRATEGY": "re_research"}, id="re-research"),
        pytest.param(
            {"RESEARCH_DISPATCHER_URL": "https://dispatcher.example/hook", "RESEARCH_DISPATCHER_SECRET": SECRET},
            id="url-and-secret",
        ),
    ],
)
def test_good_loop_settings_start(env: dict[str, str]) -> None:
    done = start(**env)

    assert done.returncode == 0, done.stderr


# --- A trigger_ref too long to be a claim id ---------------------------------------------


@override_settings(CRITIC_AUTO_ENQUEUE_ENABLED=True)
def test_reject_with_a_long_trigger_ref_and_no_claim_id_is_skipped_with_a_warning(
    run_flow: RunFlow, caplog: pytest.LogCaptureFixture
) -> None:
    trigger_ref = "claim/" + "x" * 294  # 300 characters: a valid flow trigger_ref, too long for a claim id

    with caplog.at_level("WARNING", logger="research_backlog.producers"):
        closed = run_flow("critic", metrics={"verdict": "reject"}, trigger_ref=trigger_ref)

    assert closed.status == 200
    assert ClaimReview.objects.count() == 0
    assert "named no usable claim id" in caplog.text
    assert "backlog producer failed" not in caplog.text
