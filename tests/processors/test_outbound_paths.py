"""Every outbound path (OpenAI, Voyage, the research dispatcher) against a loopback fake:
refused when not active, sent when active, sent and audited under the dev override."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from audit.models import AuditEvent
from pathways.embeddings import EMBEDDING_DIMENSIONS, EmbeddingError, OpenAIEmbedding, VoyageEmbedding
from pathways.matcher import match
from processors.models import Processor
from research_backlog import jobs
from research_backlog.dispatcher import WebhookDispatcher
from research_backlog.models import ResearchRequest
from tests.conftest import events
from tests.factories import make_pathway, make_request
from tests.fakes import FakeServer, Received, Reply, Sleeps, serve_fake
from tests.processors.support import registered

pytestmark = pytest.mark.django_db

Status = Processor.Status
SECRET = "test-dispatcher-secret-0123456789abcdef"
OVERRIDE = "processor.text_sent_under_override"
REFUSED = "processor.outbound_refused"


def unit_vectors(received: Received) -> Reply:
    """OpenAI-style embeddings: one unit vector per input."""
    vector = [1.0] + [0.0] * (EMBEDDING_DIMENSIONS - 1)
    data = [{"index": i, "embedding": vector} for i, _ in enumerate(received.json["input"])]
    return Reply(200, {"data": data})


@pytest.fixture
def vendor() -> Iterator[FakeServer]:
    yield from serve_fake(FakeServer(fallback=unit_vectors), "/v1")


@pytest.fixture
def hook() -> Iterator[FakeServer]:
    yield from serve_fake(FakeServer(fallback=Reply(202, {})), "/hooks/research")


VENDORS = [pytest.param(OpenAIEmbedding, "openai", id="openai"), pytest.param(VoyageEmbedding, "voyage", id="voyage")]


def embed(client_class: Any, vendor: FakeServer, sleeps: Sleeps) -> list[list[float]]:
    client = client_class("sk-test", base_url=vendor.url, sleep=sleeps)
    try:
        vectors: list[list[float]] = client.embed(["user question: q/1", "user question: q/2"])
        return vectors
    finally:
        client.close()


# --- Embedding vendors ------------------------------------------------------------------


@pytest.mark.parametrize(("client_class", "key"), VENDORS)
def test_an_active_vendor_receives_the_texts(client_class: Any, key: str, vendor: FakeServer, sleeps: Sleeps) -> None:
    registered(key, Status.ACTIVE, agreement_ref="BAA-2026-001")

    vectors = embed(client_class, vendor, sleeps)

    assert len(vectors) == 2
    assert len(vendor.received) == 1
    assert not events(REFUSED) and not events(OVERRIDE)


@pytest.mark.parametrize(("client_class", "key"), VENDORS)
@pytest.mark.parametrize("status", [Status.PENDING_COMPLIANCE, Status.REVOKED, None])
def test_a_vendor_not_active_receives_nothing(
    client_class: Any, key: str, status: str | None, vendor: FakeServer, sleeps: Sleeps
) -> None:
    if status is not None:
        registered(key, status)

    with pytest.raises(EmbeddingError, match="may not receive text") as failure:
        embed(client_class, vendor, sleeps)

    assert vendor.received == []
    assert "user question" not in str(failure.value)  # names the processor, never the texts
    (event,) = events(REFUSED)
    assert event.payload["key"] == key
    assert event.payload["cause"] == (status or "not_registered")
    assert event.payload["count"] == 2


@pytest.mark.parametrize(("client_class", "key"), VENDORS)
def test_a_pending_vendor_receives_the_texts_under_the_override_audited(
    client_class: Any, key: str, vendor: FakeServer, sleeps: Sleeps, settings: Any
) -> None:
    settings.PROCESSOR_DEV_OVERRIDE = True
    registered(key, Status.PENDING_COMPLIANCE)

    embed(client_class, vendor, sleeps)
    embed(client_class, vendor, sleeps)

    assert len(vendor.received) == 2
    sent = events(OVERRIDE)
    assert len(sent) == 2  # every call, not once an hour
    assert sent[0].payload == {"key": key, "category": "pathway_text", "count": 2}
    assert sent[0].target_id == key


@pytest.mark.parametrize(("client_class", "key"), VENDORS)
def test_the_override_does_not_reach_a_revoked_vendor(
    client_class: Any, key: str, vendor: FakeServer, sleeps: Sleeps, settings: Any
) -> None:
    settings.PROCESSOR_DEV_OVERRIDE = True
    registered(key, Status.REVOKED)

    with pytest.raises(EmbeddingError):
        embed(client_class, vendor, sleeps)

    assert vendor.received == []
    assert not events(OVERRIDE)


def test_a_refused_query_embedding_matches_structurally_as_in_an_outage(vendor: FakeServer, sleeps: Sleeps) -> None:
    pathway = make_pathway("user_question", "q/1")
    registered("voyage", Status.PENDING_COMPLIANCE)
    client = VoyageEmbedding("pa-test", base_url=vendor.url, sleep=sleeps)

    candidates = match("user_question", "q/1", client=client)

    assert [c.pathway.pk for c in candidates] == [pathway.pk]
    assert candidates[0].reason == "exact_ref"
    assert candidates[0].semantic is None
    assert vendor.received == []
    client.close()


# --- The research dispatcher ---------------------------------------------------------------


def consume(hook: FakeServer, sleeps: Sleeps) -> dict[str, Any]:
    dispatcher = WebhookDispatcher(hook.url, SECRET, sleep=sleeps)
    try:
        return jobs.consume(dispatcher=dispatcher)
    finally:
        dispatcher.close()


def test_an_active_dispatcher_receives_the_request(hook: FakeServer, sleeps: Sleeps) -> None:
    registered("research_dispatcher", Status.ACTIVE)
    row = make_request()

    counts = consume(hook, sleeps)

    assert counts["accepted"] == 1
    assert len(hook.received) == 1
    assert ResearchRequest.objects.get(pk=row.pk).status == ResearchRequest.Status.DISPATCHED


@pytest.mark.parametrize("status", [Status.PENDING_COMPLIANCE, Status.REVOKED, None])
def test_a_dispatcher_not_active_fails_the_row_with_processor_not_active(
    status: str | None, hook: FakeServer, sleeps: Sleeps
) -> None:
    if status is not None:
        registered("research_dispatcher", status)
    row = make_request()

    counts = consume(hook, sleeps)

    assert hook.received == []
    stored = ResearchRequest.objects.get(pk=row.pk)
    assert stored.status == ResearchRequest.Status.FAILED_VOLUNTARY
    assert stored.failure_reason == "processor_not_active"
    assert counts["failed"] == 1
    (failed,) = AuditEvent.objects.filter(action="reasoning.research.backlog.failed_voluntary")
    assert failed.payload["error"] == "processor_not_active"
    (refused,) = events(REFUSED)
    assert refused.payload["category"] == "research_question"


def test_a_pending_dispatcher_receives_the_request_under_the_override(
    hook: FakeServer, sleeps: Sleeps, settings: Any
) -> None:
    settings.PROCESSOR_DEV_OVERRIDE = True
    registered("research_dispatcher", Status.PENDING_COMPLIANCE)
    make_request()

    consume(hook, sleeps)

    assert len(hook.received) == 1
    (sent,) = events(OVERRIDE)
    assert sent.payload == {"key": "research_dispatcher", "category": "research_question", "count": 1}
