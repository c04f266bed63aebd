"""The webhook dispatcher and the backlog consumer against a real HTTP server on 127.0.0.1.

Each test scripts the server's answers (status, body, headers, a hook run before answering)
and drives the real ``WebhookDispatcher`` through ``jobs.consume``. Back-off waits are
recorded, not slept; a slow server is one that holds its answer, never a timed sleep.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from django.db import connections, transaction
from django.test import override_settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from processors.services import set_status
from research_backlog import jobs, services
from research_backlog.dispatcher import DispatchResult, NoDispatcher, WebhookDispatcher, build_dispatcher
from research_backlog.models import ResearchRequest
from tests.fakes import FakeServer, Received, Reply, Sleeps, serve_fake

pytestmark = pytest.mark.django_db

SECRET = "test-dispatcher-secret-0123456789abcdef"
QUESTION = "Which guideline covers statins for adults over 75?"
HOOK_PATH = "/hooks/research"
Status = ResearchRequest.Status


@pytest.fixture(autouse=True)
def _dispatcher_active() -> None:
    """The dispatcher as a signed agreement leaves it: active in the processor registry
    (tests/processors covers the refusals)."""
    set_status("research_dispatcher", "active", actor="system:test", reason="test agreement")


# --- The fake dispatcher ------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    """The dispatcher's webhook on 127.0.0.1: records each request, answers from a script."""
    yield from serve_fake(FakeServer(), HOOK_PATH)


MakeDispatcher = Callable[..., WebhookDispatcher]


@pytest.fixture
def make_dispatcher(fake: FakeServer, sleeps: Sleeps) -> Iterator[MakeDispatcher]:
    made: list[WebhookDispatcher] = []

    def make(url: str | None = None, **kwargs: Any) -> WebhookDispatcher:
        kwargs.setdefault("sleep", sleeps)
        dispatcher = WebhookDispatcher(fake.url if url is None else url, SECRET, **kwargs)
        made.append(dispatcher)
        return dispatcher

    yield make
    for dispatcher in made:
        dispatcher.close()


def enqueue(question: str = QUESTION, **overrides: Any) -> ResearchRequest:
    fields: dict[str, Any] = {
        "trigger_type": "user_question",
        "trigger_ref": "q/7",
        "question": question,
        "reason": "operator_requested",
        "source": "operator",
        "actor": "system:test",
        **overrides,
    }
    row, created = services.enqueue(**fields)
    assert created
    return row


def expected_signature(timestamp: str, body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def assert_signed(received: Received, secret: str = SECRET) -> None:
    timestamp = received.headers["x-rft-timestamp"]
    assert timestamp.isdigit()
    assert hmac.compare_digest(
        received.headers["x-rft-signature"], expected_signature(timestamp, received.body, secret)
    )


def reload(row: ResearchRequest) -> ResearchRequest:
    return ResearchRequest.objects.get(pk=row.pk)


def ok(flow_id: str) -> Reply:
    return Reply(200, {"flow_id": flow_id})


# --- The request on the wire ----------------------------------------------------------------


def test_the_request_is_a_signed_json_post_of_the_request_document(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any]
) -> None:
    row = enqueue()
    fake.script(ok(flow["id"]))

    jobs.consume(dispatcher=make_dispatcher(clock=lambda: 1_700_000_000.75))

    (received,) = fake.received
    assert received.method == "POST"
    assert received.path == HOOK_PATH
    assert received.headers["content-type"] == "application/json"
    document = received.json
    stored = reload(row)
    # JSON carries milliseconds.
    created_at = stored.created_at.replace(microsecond=stored.created_at.microsecond // 1000 * 1000)
    assert datetime.fromisoformat(document.pop("created_at")) == created_at
    assert document == {
        "id": str(row.pk),
        "trigger_type": "user_question",
        "trigger_ref": "q/7",
        "question": QUESTION,
        "reason": "operator_requested",
        "source": "operator",
        "retry_count": 0,
        "dispatched_from_backlog": True,
        "complete_path": f"/admin/v1/reasoning/research/backlog/{row.pk}/complete",
    }
    assert received.headers["x-rft-timestamp"] == "1700000000"
    assert received.headers["x-rft-signature"] == expected_signature("1700000000", received.body)
    assert received.headers["x-rft-signature"] != expected_signature("1700000000", received.body, SECRET + "x")
    assert received.headers["idempotency-key"] == f"{row.pk}.0"


def test_the_timestamp_is_the_current_time_by_default(fake: FakeServer, make_dispatcher: MakeDispatcher) -> None:
    enqueue()
    fake.script(Reply(200, {"error": "no_sources"}))

    now = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)

    with time_machine.travel(now, tick=False):
        jobs.consume(dispatcher=make_dispatcher())

    (received,) = fake.received
    assert received.headers["x-rft-timestamp"] == str(int(now.timestamp()))
    assert_signed(received)


def test_the_idempotency_key_carries_the_retry_count(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any]
) -> None:
    row = enqueue()
    ResearchRequest.objects.filter(pk=row.pk).update(retry_count=2)
    fake.script(ok(flow["id"]))

    jobs.consume(dispatcher=make_dispatcher())

    (received,) = fake.received
    assert received.headers["idempotency-key"] == f"{row.pk}.2"
    assert received.json["retry_count"] == 2


# --- The answers --------------------------------------------------------------------------


def test_a_flow_id_completes_the_row_with_that_flow(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any]
) -> None:
    row = enqueue()
    fake.script(ok(flow["id"]))

    counts = jobs.consume(dispatcher=make_dispatcher())

    stored = reload(row)
    assert stored.status == Status.COMPLETED
    assert str(stored.completed_flow_id) == flow["id"]
    assert stored.completed_at is not None
    assert stored.failure_reason == ""
    assert counts == {"pulled": 1, "completed": 1, "failed": 0, "accepted": 0, "lost": 0}
    (event,) = AuditEvent.objects.filter(action="reasoning.research.backlog.completed")
    assert event.payload["flow_id"] == flow["id"]
    assert event.actor == "system:backlog_consumer"


def test_an_error_label_fails_the_row_voluntarily_with_that_label(
    fake: FakeServer, make_dispatcher: MakeDispatcher
) -> None:
    row = enqueue()
    fake.script(Reply(200, {"error": "no_sources"}))

    counts = jobs.consume(dispatcher=make_dispatcher())

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "no_sources"
    assert stored.completed_flow_id is None
    assert counts["failed"] == 1
    assert counts["completed"] == 0
    (event,) = AuditEvent.objects.filter(action="reasoning.research.backlog.failed_voluntary")
    assert event.payload["error"] == "no_sources"


@pytest.mark.parametrize(
    "error",
    [
        pytest.param("The sources were down, sorry!", id="sentence"),
        pytest.param("Jane Roe 1962-04-01", id="phi-like-text"),
        pytest.param("x" * 201, id="label-too-long"),
        pytest.param("", id="empty"),
        pytest.param(42, id="number"),
        pytest.param({"code": "no_sources"}, id="object"),
    ],
)
def test_an_error_that_is_not_a_label_is_recorded_as_dispatcher_error(
    fake: FakeServer, make_dispatcher: MakeDispatcher, error: Any
) -> None:
    row = enqueue()
    fake.script(Reply(200, {"error": error}))

    jobs.consume(dispatcher=make_dispatcher())

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "dispatcher_error"
    trail = json.dumps(list(AuditEvent.objects.values_list("payload", flat=True)))
    if isinstance(error, str) and error:
        assert error not in trail


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json{", id="malformed-json"),
        pytest.param(b"", id="empty-body"),
        pytest.param([], id="list"),
        pytest.param({}, id="empty-object"),
        pytest.param({"status": "ok"}, id="missing-flow_id"),
        pytest.param({"flow_id": "not-a-uuid"}, id="flow_id-not-a-uuid"),
        pytest.param({"flow_id": None}, id="flow_id-null"),
    ],
)
def test_a_bad_success_body_is_recorded_as_dispatcher_bad_response(
    fake: FakeServer, make_dispatcher: MakeDispatcher, body: Any
) -> None:
    row = enqueue()
    fake.script(Reply(200, body))

    counts = jobs.consume(dispatcher=make_dispatcher())

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "dispatcher_bad_response"
    assert counts["failed"] == 1
    assert len(fake.received) == 1


def test_a_flow_id_this_service_never_recorded_fails_the_row(fake: FakeServer, make_dispatcher: MakeDispatcher) -> None:
    row = enqueue()
    fake.script(ok(str(uuid.uuid4())))

    counts = jobs.consume(dispatcher=make_dispatcher())

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "dispatcher_unknown_flow"
    assert stored.completed_flow_id is None
    assert counts == {"pulled": 1, "completed": 0, "failed": 1, "accepted": 0, "lost": 0}


def test_202_leaves_the_row_dispatched_until_the_dispatcher_completes_it_through_the_api(
    fake: FakeServer,
    make_dispatcher: MakeDispatcher,
    flow: dict[str, Any],
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
) -> None:
    row = enqueue()
    fake.script(Reply(202, {"status": "accepted"}))

    counts = jobs.consume(dispatcher=make_dispatcher())

    assert counts == {"pulled": 1, "completed": 0, "failed": 0, "accepted": 1, "lost": 0}
    stored = reload(row)
    assert stored.status == Status.DISPATCHED
    assert stored.completed_at is None
    assert not AuditEvent.objects.filter(action="reasoning.research.backlog.completed").exists()

    dispatcher_client = client_for(make_token("reasoning.admin", name="research-dispatcher"))
    complete_path = fake.received[0].json["complete_path"]
    response = dispatcher_client.post(complete_path, {"flow_id": flow["id"]}, format="json")

    assert response.status_code == 200, response.content
    stored = reload(row)
    assert stored.status == Status.COMPLETED
    assert str(stored.completed_flow_id) == flow["id"]
    again = dispatcher_client.post(complete_path, {"flow_id": flow["id"]}, format="json")
    assert again.status_code == 409, again.content


def test_complete_path_needs_reasoning_admin(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any], agent: APIClient
) -> None:
    row = enqueue()
    fake.script(Reply(202))
    jobs.consume(dispatcher=make_dispatcher())

    # The agent may write flows, not complete the backlog's requests.
    response = agent.post(fake.received[0].json["complete_path"], {"flow_id": flow["id"]}, format="json")

    assert response.status_code == 403, response.content
    assert reload(row).status == Status.DISPATCHED


# --- Retries ----------------------------------------------------------------------------------


def test_503_twice_then_200_completes_after_three_freshly_signed_attempts_honouring_retry_after(
    fake: FakeServer, make_dispatcher: MakeDispatcher, sleeps: Sleeps, flow: dict[str, Any]
) -> None:
    row = enqueue()
    fake.script(
        Reply(503, {"detail": "busy"}, headers={"Retry-After": "7"}),
        Reply(503, {"detail": "busy"}, headers={"Retry-After": "3"}),
        ok(flow["id"]),
    )
    ticks = itertools.count(1_700_000_000)

    counts = jobs.consume(dispatcher=make_dispatcher(clock=lambda: float(next(ticks))))

    assert reload(row).status == Status.COMPLETED
    assert str(reload(row).completed_flow_id) == flow["id"]
    assert counts["completed"] == 1
    assert len(fake.received) == 3
    assert sleeps.waits == [7.0, 3.0]
    timestamps = [item.headers["x-rft-timestamp"] for item in fake.received]
    assert timestamps == ["1700000000", "1700000001", "1700000002"]
    for item in fake.received:
        assert_signed(item)
        assert item.body == fake.received[0].body
        assert item.headers["idempotency-key"] == f"{row.pk}.0"


def test_without_retry_after_the_waits_back_off_exponentially(
    fake: FakeServer, make_dispatcher: MakeDispatcher, sleeps: Sleeps, flow: dict[str, Any]
) -> None:
    row = enqueue()
    fake.script(Reply(429), Reply(502), Reply(503), ok(flow["id"]))

    jobs.consume(dispatcher=make_dispatcher(max_attempts=4, backoff_base=2.0))

    assert reload(row).status == Status.COMPLETED
    assert len(fake.received) == 4
    first, second, third = sleeps.waits
    # Equal jitter: between half and all of backoff_base * 2**(n-1).
    assert 1.0 <= first <= 2.0
    assert 2.0 <= second <= 4.0
    assert 4.0 <= third <= 8.0


@pytest.mark.parametrize("max_attempts", [1, 3, 4])
def test_503_always_fails_with_dispatcher_http_503_after_max_attempts(
    fake: FakeServer, make_dispatcher: MakeDispatcher, sleeps: Sleeps, max_attempts: int
) -> None:
    row = enqueue()
    fake.fallback = Reply(503, {"detail": "down"}, headers={"Retry-After": "1"})

    counts = jobs.consume(dispatcher=make_dispatcher(max_attempts=max_attempts))

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "dispatcher_http_503"
    assert len(fake.received) == max_attempts
    assert sleeps.waits == [1.0] * (max_attempts - 1)
    assert counts["failed"] == 1


def test_a_retry_after_beyond_the_longest_wait_fails_at_once(
    fake: FakeServer, make_dispatcher: MakeDispatcher, sleeps: Sleeps
) -> None:
    row = enqueue()
    fake.fallback = Reply(429, headers={"Retry-After": "120"})

    jobs.consume(dispatcher=make_dispatcher(max_retry_wait=60.0))

    assert reload(row).failure_reason == "dispatcher_http_429"
    assert len(fake.received) == 1
    assert sleeps.waits == []


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_client_error_fails_at_once_with_its_status(
    fake: FakeServer, make_dispatcher: MakeDispatcher, sleeps: Sleeps, status: int
) -> None:
    row = enqueue()
    fake.fallback = Reply(status, {"detail": "bad signature"})

    jobs.consume(dispatcher=make_dispatcher())

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == f"dispatcher_http_{status}"
    assert len(fake.received) == 1
    assert sleeps.waits == []


def test_a_refused_connection_fails_with_dispatcher_unreachable_after_retries(
    make_dispatcher: MakeDispatcher, sleeps: Sleeps
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    row = enqueue()

    counts = jobs.consume(dispatcher=make_dispatcher(url=f"http://127.0.0.1:{port}{HOOK_PATH}", max_attempts=3))

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "dispatcher_unreachable"
    assert len(sleeps.waits) == 2
    assert counts["failed"] == 1


def test_a_server_slower_than_the_timeout_is_unreachable(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any]
) -> None:
    # The server holds its (successful) answer until the consumer has returned. Had the
    # dispatcher ignored its 0.2 s timeout, it would still be waiting when the hold ends
    # (after 10 s), receive the flow id and complete the row: the status assertions
    # fail. No sleep and no stopwatch.
    release = threading.Event()

    def hold(_: Received) -> None:
        release.wait(timeout=10)

    fake.script(Reply(200, {"flow_id": flow["id"]}, before=hold))
    row = enqueue()

    try:
        counts = jobs.consume(dispatcher=make_dispatcher(timeout=0.2, max_attempts=1))
    finally:
        release.set()

    assert len(fake.received) == 1
    assert counts["failed"] == 1
    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "dispatcher_unreachable"


# --- build_dispatcher and the consumer ----------------------------------------------------------


@override_settings(RESEARCH_DISPATCHER_URL="")
def test_build_dispatcher_is_no_dispatcher_without_a_url() -> None:
    dispatcher = build_dispatcher()

    assert isinstance(dispatcher, NoDispatcher)
    assert dispatcher.name == "none"


@override_settings(RESEARCH_DISPATCHER_URL="")
def test_the_consumer_without_a_dispatcher_fails_rows_with_no_dispatcher_configured() -> None:
    row = enqueue()

    counts = jobs.consume()

    stored = reload(row)
    assert stored.status == Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "no_dispatcher_configured"
    assert counts["failed"] == 1
    (started,) = AuditEvent.objects.filter(action="memory.job.backlog_consumer.started")
    assert started.payload == {"dispatcher": "none"}


def test_build_dispatcher_is_the_webhook_configured_in_settings(
    fake: FakeServer, flow: dict[str, Any], settings: Any
) -> None:
    settings.RESEARCH_DISPATCHER_URL = fake.url
    settings.RESEARCH_DISPATCHER_SECRET = SECRET + "-from-settings"
    settings.RESEARCH_DISPATCHER_MAX_ATTEMPTS = 2
    row = enqueue()
    # Retry-After 0: the real sleep of a settings-built dispatcher waits for nothing.
    fake.script(Reply(503, headers={"Retry-After": "0"}), ok(flow["id"]))

    dispatcher = build_dispatcher()
    assert isinstance(dispatcher, WebhookDispatcher)
    assert dispatcher.name == "webhook"
    try:
        counts = jobs.consume(dispatcher=dispatcher)
    finally:
        dispatcher.close()

    assert counts["completed"] == 1
    assert reload(row).status == Status.COMPLETED
    assert len(fake.received) == 2
    for item in fake.received:
        assert_signed(item, SECRET + "-from-settings")


def test_the_consumer_builds_the_webhook_from_settings_when_given_none(
    fake: FakeServer, flow: dict[str, Any], settings: Any
) -> None:
    settings.RESEARCH_DISPATCHER_URL = fake.url
    settings.RESEARCH_DISPATCHER_SECRET = SECRET
    row = enqueue()
    fake.script(ok(flow["id"]))

    jobs.consume()

    assert reload(row).status == Status.COMPLETED
    (started,) = AuditEvent.objects.filter(action="memory.job.backlog_consumer.started")
    assert started.payload == {"dispatcher": "webhook"}


def test_a_webhook_dispatcher_needs_a_secret(fake: FakeServer) -> None:
    with pytest.raises(ValueError, match="secret"):
        WebhookDispatcher(fake.url, "")


def test_the_consumer_audits_its_run_with_the_dispatcher_and_counts(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any]
) -> None:
    first = enqueue("First question")
    second = enqueue("Second question")
    third = enqueue("Third question")
    fourth = enqueue("Fourth question")
    fake.script(ok(flow["id"]), Reply(200, {"error": "no_sources"}), Reply(202))

    counts = jobs.consume(dispatcher=make_dispatcher(), limit=3)

    # FIFO: the oldest three went out, in order; the fourth waits for the next run.
    assert [item.json["id"] for item in fake.received] == [str(first.pk), str(second.pk), str(third.pk)]
    assert [reload(row).status for row in (first, second, third, fourth)] == [
        Status.COMPLETED,
        Status.FAILED_VOLUNTARY,
        Status.DISPATCHED,
        Status.PENDING,
    ]
    expected = {"pulled": 3, "completed": 1, "failed": 1, "accepted": 1, "lost": 0}
    assert counts == expected
    (started,) = AuditEvent.objects.filter(action="memory.job.backlog_consumer.started")
    (completed,) = AuditEvent.objects.filter(action="memory.job.backlog_consumer.completed")
    assert started.payload == {"dispatcher": "webhook"}
    assert started.actor == completed.actor == "system:backlog_consumer"
    assert completed.payload == expected
    assert not AuditEvent.objects.filter(action="memory.job.backlog_consumer.error").exists()
    assert AuditEvent.objects.filter(action="reasoning.research.backlog.dispatched").count() == 3


def test_an_empty_backlog_makes_no_request(fake: FakeServer, make_dispatcher: MakeDispatcher) -> None:
    counts = jobs.consume(dispatcher=make_dispatcher())

    assert fake.received == []
    assert counts == {"pulled": 0, "completed": 0, "failed": 0, "accepted": 0, "lost": 0}
    assert AuditEvent.objects.filter(action="memory.job.backlog_consumer.completed").count() == 1


def test_a_row_the_sweep_took_back_during_dispatch_is_counted_lost(
    fake: FakeServer, make_dispatcher: MakeDispatcher, flow: dict[str, Any]
) -> None:
    row = enqueue()
    fake.script(ok(flow["id"]))
    webhook = make_dispatcher()

    class SweptDuringDispatch:
        name = "webhook"

        def dispatch(self, request: ResearchRequest) -> DispatchResult:
            result = webhook.dispatch(request)
            # What the stale sweep does to a row while the webhook is still running.
            ResearchRequest.objects.filter(pk=request.pk).update(
                status=Status.PENDING, dispatched_at=None, retry_count=1
            )
            return result

    counts = jobs.consume(dispatcher=SweptDuringDispatch(), limit=1)

    assert len(fake.received) == 1
    assert counts == {"pulled": 1, "completed": 0, "failed": 0, "accepted": 0, "lost": 1}
    stored = reload(row)
    assert stored.status == Status.PENDING
    assert stored.completed_flow_id is None


@pytest.mark.django_db(transaction=True)
def test_the_pull_commits_before_the_webhook_is_called_and_holds_no_lock(
    fake: FakeServer, make_dispatcher: MakeDispatcher
) -> None:
    row = enqueue()
    seen: list[str] = []

    def look_from_another_connection(received: Received) -> None:
        try:
            with transaction.atomic():
                locked = ResearchRequest.objects.select_for_update(nowait=True).get(pk=received.json["id"])
                seen.append(locked.status)
        finally:
            connections.close_all()

    fake.script(Reply(200, {"error": "no_sources"}, before=look_from_another_connection))

    jobs.consume(dispatcher=make_dispatcher())

    assert fake.errors == []
    assert seen == [Status.DISPATCHED]
    assert reload(row).status == Status.FAILED_VOLUNTARY
