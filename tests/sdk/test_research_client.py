"""``ResearchLoopClient``'s six calls against the real server, and its fail-soft promise: an
unreachable server or a 4xx answer gives None (and a log line), never an exception.

The client is async; each test drives it with ``asyncio.run`` (in a thread: ``run_async``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from reasoning_flow_sdk import ReasoningFlowRecorder, ResearchLoopClient
from reasoning_flow_sdk.agents import Researcher

from research_backlog.models import ClaimReview, ResearchRequest
from tests.sdk.support import run_async
from tests.servers import Gunicorn, free_port

QUESTION = "Which guideline covers statins for adults over 75?"
T = TypeVar("T")


def call(awaitable: Awaitable[T]) -> T:
    async def wait() -> T:
        return await awaitable

    return run_async(wait)


@pytest.fixture
def client(sdk_server: Gunicorn, sdk_token: str) -> ResearchLoopClient:
    """A dispatcher's client: reasoning.write + reasoning.admin."""
    return ResearchLoopClient(sdk_server.url, sdk_token)


# --- The backlog: enqueue → pull → complete ----------------------------------------------


def test_enqueue_pull_complete_with_a_flow(
    client: ResearchLoopClient, recorder_for: Callable[..., ReasoningFlowRecorder]
) -> None:
    queued = call(client.enqueue_deeper_research("user_question", QUESTION, trigger_ref="chat/7"))
    assert queued is not None
    assert (queued["status"], queued["question"], queued["trigger_ref"]) == ("pending", QUESTION, "chat/7")

    pulled = call(client.pull_next_research_request())
    assert pulled is not None
    assert (pulled["id"], pulled["status"]) == (queued["id"], "dispatched")
    assert call(client.pull_next_research_request()) is None  # nothing else is pending

    recorder = recorder_for()
    flow_id = Researcher(recorder).run(pulled["question"], trigger_ref="chat/7", dispatched_from_backlog=True).flow_id
    assert recorder.flush(10)
    done = call(client.complete_research_request(pulled["id"], flow_id=flow_id))

    assert done is not None
    assert (done["status"], done["completed_flow_id"]) == ("completed", flow_id)
    row = ResearchRequest.objects.get(pk=queued["id"])
    assert (row.status, row.completed_flow_id) == (ResearchRequest.Status.COMPLETED, uuid.UUID(flow_id))


def test_pull_by_trigger_type_and_complete_with_an_error(client: ResearchLoopClient) -> None:
    call(client.enqueue_deeper_research("user_question", QUESTION))
    claim = call(client.enqueue_deeper_research("claim_review", "Find independent sources for claim 4471."))
    assert claim is not None

    pulled = call(client.pull_next_research_request("claim_review"))
    assert pulled is not None
    assert pulled["id"] == claim["id"]
    failed = call(client.complete_research_request(pulled["id"], error="dispatcher_gave_up"))

    assert failed is not None
    assert (failed["status"], failed["failure_reason"]) == ("failed_voluntary", "dispatcher_gave_up")
    assert ResearchRequest.objects.get(status=ResearchRequest.Status.PENDING).trigger_type == "user_question"


# --- The review queue: mark → list → resolve ----------------------------------------------


def test_mark_list_resolve_a_claim(client: ResearchLoopClient) -> None:
    marked = call(client.mark_claim_for_review("claim/4471", trigger_type="claim_review", source="critic"))
    assert marked is not None
    assert (marked["claim_id"], marked["status"], marked["source"]) == ("claim/4471", "pending", "critic")
    again = call(client.mark_claim_for_review("claim/4471"))
    assert again is not None
    assert again["id"] == marked["id"]  # idempotent on claim_id

    queue = call(client.list_claims_pending_review(limit=10))
    assert queue is not None
    assert ([entry["id"] for entry in queue["pending"]], queue["pending_count"]) == ([marked["id"]], 1)

    resolved = call(client.resolve_claim_review(marked["id"], "dismissed", note="Duplicate of claim/4468."))
    assert resolved is not None
    assert (resolved["status"], resolved["resolution_note"]) == ("dismissed", "Duplicate of claim/4468.")
    after = call(client.list_claims_pending_review())
    assert after is not None
    assert after["pending_count"] == 0
    assert [entry["id"] for entry in after["recent_resolutions"]] == [marked["id"]]
    assert ClaimReview.objects.get().status == ClaimReview.Status.DISMISSED


# --- Fail-soft ------------------------------------------------------------------------------

SOME_ID = "0d9b6f0e-7c1a-4f7e-9a51-3e6a1b2c4d5f"
SIX_CALLS: dict[str, Callable[[ResearchLoopClient], Awaitable[Any]]] = {
    "enqueue": lambda client: client.enqueue_deeper_research("user_question", QUESTION),
    "pull": lambda client: client.pull_next_research_request(),
    "complete": lambda client: client.complete_research_request(SOME_ID, flow_id=SOME_ID),
    "mark": lambda client: client.mark_claim_for_review("claim/4471"),
    "list": lambda client: client.list_claims_pending_review(),
    "resolve": lambda client: client.resolve_claim_review(SOME_ID),
}


@pytest.mark.parametrize("name", SIX_CALLS)
def test_unreachable_server_is_none(name: str, caplog: pytest.LogCaptureFixture) -> None:
    client = ResearchLoopClient(f"http://127.0.0.1:{free_port()}", "any-token", timeout=2)

    assert call(SIX_CALLS[name](client)) is None
    assert "ConnectError" in caplog.text


def test_missing_configuration_is_none(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for variable in ("REASONING_FLOW_URL", "REASONING_FLOW_ADMIN_TOKEN", "REASONING_FLOW_TOKEN"):
        monkeypatch.delenv(variable, raising=False)

    assert call(ResearchLoopClient().pull_next_research_request()) is None
    assert "REASONING_FLOW_URL or a token is not set" in caplog.text


def test_bad_label_is_none_and_enqueues_nothing(client: ResearchLoopClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="reasoning_flow_sdk")

    assert call(client.enqueue_deeper_research("user question", QUESTION)) is None
    assert "→ 400" in caplog.text
    assert not ResearchRequest.objects.exists()


def test_completing_a_request_never_pulled_is_none(
    client: ResearchLoopClient, caplog: pytest.LogCaptureFixture
) -> None:
    queued = call(client.enqueue_deeper_research("user_question", QUESTION))
    assert queued is not None

    assert call(client.complete_research_request(queued["id"], error="dispatcher_gave_up")) is None
    assert "→ 409" in caplog.text
    assert ResearchRequest.objects.get().status == ResearchRequest.Status.PENDING


def test_resolving_twice_is_none(client: ResearchLoopClient) -> None:
    marked = call(client.mark_claim_for_review("claim/4471"))
    assert marked is not None
    assert call(client.resolve_claim_review(marked["id"])) is not None

    assert call(client.resolve_claim_review(marked["id"], "dismissed")) is None  # 409: already resolved
    assert ClaimReview.objects.get().status == ClaimReview.Status.RESOLVED


def test_a_token_without_the_admin_scope_is_none(
    sdk_server: Gunicorn, make_token: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    client = ResearchLoopClient(sdk_server.url, make_token("reasoning.write"))

    assert call(client.enqueue_deeper_research("user_question", QUESTION)) is None
    assert "→ 403" in caplog.text
    assert not ResearchRequest.objects.exists()
