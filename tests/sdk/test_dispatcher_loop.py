"""The self-improvement loop end to end, on the real server.

A weak Researcher flow recorded through the SDK makes the server's producer enqueue a backlog
request; the built-in consumer (in this process) signs it over to the SDK's dispatcher (a thread
here), whose own flow completes the request and, carrying ``dispatched_from_backlog``, enqueues
nothing more even though its result is weak too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings
from reasoning_flow_sdk import ReasoningFlowRecorder
from reasoning_flow_sdk.agents import OfflineModel, Researcher
from reasoning_flow_sdk.dispatcher import Dispatcher, serving

from processors.services import set_status
from reasoning.models import ReasoningFlow
from research_backlog import jobs
from research_backlog.models import ResearchRequest
from tests.servers import Gunicorn

SECRET = "loop-test-dispatcher-secret-0123456789abcdef"
QUESTION = "Which guideline covers blood pressure targets for adults over 80?"
Status = ResearchRequest.Status


@pytest.fixture
def server_env() -> dict[str, str]:
    """The server's research producer runs at flow close."""
    return {"RESEARCH_AUTO_ENQUEUE_ENABLED": "1"}


@pytest.fixture
def dispatcher_url(sdk_server: Gunicorn, sdk_token: str, tmp_path: Path) -> Iterator[str]:
    """The SDK's dispatcher, recording on the test server. Its model answers weakly every time, so
    only the loop-break marker keeps its flow from enqueueing again."""
    with (
        Dispatcher(
            SECRET,
            base_url=sdk_server.url,
            token=sdk_token,
            spool_dir=tmp_path / "dispatcher-spool",
            model=OfflineModel(weak_share=1.0),
            flush_interval=0.05,
        ) as dispatcher,
        serving(dispatcher) as server,
    ):
        yield server.url


@pytest.fixture
def consumer_settings(settings: Settings, dispatcher_url: str) -> Settings:
    """The built-in consumer on, pointed at the dispatcher (active in the processor registry)."""
    set_status("research_dispatcher", "active", actor="system:test", reason="test agreement")
    settings.BACKLOG_CONSUMER_ENABLED = True
    settings.RESEARCH_DISPATCHER_URL = dispatcher_url
    settings.RESEARCH_DISPATCHER_SECRET = SECRET
    return settings


def record_weak_research(recorder_for: Callable[..., ReasoningFlowRecorder]) -> uuid.UUID:
    recorder = recorder_for()
    weak = Researcher(recorder, OfflineModel(weak_share=1.0)).run(QUESTION, trigger_ref="chat/42")
    assert weak.composite_k < 0.6
    assert recorder.flush(10)
    return uuid.UUID(weak.flow_id)


def test_weak_flow_is_researched_again_once(
    recorder_for: Callable[..., ReasoningFlowRecorder], consumer_settings: Settings
) -> None:
    weak_flow_id = record_weak_research(recorder_for)

    request = ResearchRequest.objects.get()
    assert request.status == Status.PENDING
    assert request.source_flow_id == weak_flow_id
    assert request.reason in (ResearchRequest.Reason.WEAK_COMPOSITE_K, ResearchRequest.Reason.NO_EVIDENCE_HITS)

    counts = jobs.consume_if_enabled()

    assert counts is not None
    assert (counts["pulled"], counts["completed"], counts["failed"]) == (1, 1, 0)
    request.refresh_from_db()
    assert request.status == Status.COMPLETED
    # The dispatcher's flow: the one flow on the server with the loop-break marker.
    answer = ReasoningFlow.objects.get(dispatched_from_backlog=True)
    assert request.completed_flow_id == answer.pk
    assert answer.pk != weak_flow_id
    assert answer.flow_state == ReasoningFlow.State.COMPLETED
    assert (answer.agent, answer.trigger_ref) == ("researcher", "chat/42")
    assert answer.outcome_metrics is not None
    assert answer.outcome_metrics["composite_k"] < 0.6  # weak as well, yet:
    assert ResearchRequest.objects.count() == 1


def test_consumer_with_the_wrong_secret_fails_the_request_without_research(
    recorder_for: Callable[..., ReasoningFlowRecorder], consumer_settings: Settings
) -> None:
    record_weak_research(recorder_for)
    consumer_settings.RESEARCH_DISPATCHER_SECRET = "not-the-dispatcher-secret-0123456789abcdef"

    counts = jobs.consume_if_enabled()

    assert counts is not None
    assert (counts["pulled"], counts["completed"], counts["failed"]) == (1, 0, 1)
    request = ResearchRequest.objects.get()
    assert (request.status, request.failure_reason) == (Status.FAILED_VOLUNTARY, "dispatcher_http_401")
    assert not ReasoningFlow.objects.filter(dispatched_from_backlog=True).exists()
