"""Shared fixtures: personas (tokens with scopes), an API client, audit and metric readers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tests.fakes import Sleeps

# Installed before any instrument records: reasoning.metrics' proxy instruments bind to it.
METRIC_READER = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[METRIC_READER]))


class MetricSnapshot:
    """Sums of counters / counts of histograms, keyed by (metric name, attribute items)."""

    def __init__(self) -> None:
        self.points: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}
        data = METRIC_READER.get_metrics_data()
        for resource_metric in data.resource_metrics if data else []:
            for scope_metric in resource_metric.scope_metrics:
                for metric in scope_metric.metrics:
                    for point in metric.data.data_points:
                        # Counters carry a value; histograms a count of recordings.
                        value = point.value if isinstance(point, NumberDataPoint) else point.count
                        self.points[(metric.name, frozenset((point.attributes or {}).items()))] = value

    def value(self, name: str, **attributes: Any) -> float:
        """Total over points of ``name`` whose attributes include ``attributes``."""
        wanted = set(attributes.items())
        return sum(v for (metric, attrs), v in self.points.items() if metric == name and wanted <= attrs)


@pytest.fixture
def metric_snapshot() -> Callable[[], MetricSnapshot]:
    return MetricSnapshot


@pytest.fixture
def make_token(db: None) -> Callable[..., str]:
    """Create a token with the given scopes; return the raw bearer secret."""
    from reasoning.services import create_api_token

    counter = iter(range(1_000_000))

    def make(*scopes: str, name: str | None = None, **kwargs: Any) -> str:
        _, raw = create_api_token(
            name=name or f"test-token-{next(counter)}", scopes=scopes, actor="system:test", **kwargs
        )
        return raw

    return make


def _client(raw: str | None) -> APIClient:
    client = APIClient()
    if raw:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def anonymous() -> APIClient:
    return _client(None)


@pytest.fixture
def agent(make_token: Callable[..., str]) -> APIClient:
    """An agent: may write flows and steps."""
    return _client(make_token("reasoning.write", name="agent"))


@pytest.fixture
def operator(make_token: Callable[..., str]) -> APIClient:
    """An operator tool: admin reads."""
    return _client(make_token("reasoning.admin", name="operator"))


@pytest.fixture
def reader(make_token: Callable[..., str]) -> APIClient:
    """A token with only reasoning.read: must not write or use admin routes."""
    return _client(make_token("reasoning.read", name="reader"))


@pytest.fixture
def client_for() -> Callable[[str | None], APIClient]:
    return _client


@pytest.fixture
def audit_actions() -> Callable[[], list[str]]:
    def actions() -> list[str]:
        return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))

    return actions


@pytest.fixture
def flow(agent: APIClient) -> Iterator[dict[str, Any]]:
    """An active flow opened by the agent."""
    response = agent.post(
        "/api/reasoning/flows",
        {"trigger_type": "user_question", "trigger_ref": "q/1", "agent": "researcher"},
        format="json",
    )
    assert response.status_code == 201, response.content
    yield response.json()


@pytest.fixture
def sleeps() -> Sleeps:
    """Pass as a retrying client's ``sleep``: records the waits instead of sleeping."""
    return Sleeps()
