"""Shared fixtures: the personas (tokens with scopes and logged-in users), audit and metric readers.

Each persona says what it may do. A module that needs a variant (another username, PHI on the
record, made under a frozen clock) overrides the fixture of the same name next to its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import Client
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from rest_framework.test import APIClient

from audit.models import AuditEvent
from patients.models import Patient
from tests.factories import NOW, PASSWORD, logged_in, open_flow
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


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> Iterator[None]:
    """Passwords hashed at one PBKDF2 iteration in tests (tests.fakes.FastPBKDF2PasswordHasher)."""
    from django.test.utils import override_settings

    with override_settings(PASSWORD_HASHERS=["tests.fakes.FastPBKDF2PasswordHasher"]):
        yield


@pytest.fixture(autouse=True)
def _fresh_token_cache() -> None:
    """Each test starts with no API token cached (reasoning.auth.token_cache)."""
    from reasoning.auth import token_cache

    token_cache.clear()


@pytest.fixture(autouse=True)
def _no_recent_flows() -> None:
    """Each test starts with no flow known from an earlier test's writes (reasoning.recording.ingest._RecentFlows)."""
    from reasoning.recording.ingest import recent_flows

    recent_flows.clear()


@pytest.fixture
def metric_snapshot() -> Callable[[], MetricSnapshot]:
    return MetricSnapshot


@pytest.fixture
def make_token(db: None) -> Callable[..., str]:
    """Create a token with the given scopes; return the raw bearer secret."""
    from reasoning.tokens import create_api_token

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


# Olive is an operator (a staff user): she may open every /dashboard/admin page and the Research
# Console, and her page actions are audited as ``user:<pk>``.
@pytest.fixture
def operator_user(db: None) -> User:
    from reasoning.tokens import create_operator

    user = create_operator(username="olive.operator", password=PASSWORD, actor="system:test")
    assert isinstance(user, User)
    return user


@pytest.fixture
def operator_client(operator_user: User) -> Client:
    return logged_in(operator_user)


# Ada is a patient who consented: she may read the narratives of her own flows, no one else's,
# and never an operator page (403). Her name, MRN and username must never reach a page.
@pytest.fixture
def consenting_patient(db: None) -> Patient:
    from patients.services import create_patient

    return create_patient(
        username="ada.patient",
        password=PASSWORD,
        consent=True,
        actor="system:test",
        name="Ada Lovelace",
        mrn="MRN-4455",
    )


@pytest.fixture
def patient_client(consenting_patient: Patient) -> Client:
    return logged_in(consenting_patient)


# Grace is a patient without consent: her narratives are 403 (with a link to her profile, where
# she may opt in), and operator pages are 403 too.
@pytest.fixture
def non_consenting_patient(db: None) -> Patient:
    from patients.services import create_patient

    return create_patient(username="grace.patient", password=PASSWORD, consent=False, actor="system:test")


@pytest.fixture
def non_consenting_client(non_consenting_patient: Patient) -> Client:
    return logged_in(non_consenting_patient)


# Ada's app: a reasoning.read token bound to her; it may read her own flows (their narratives and
# dimensions) over the API, and no one else's.
@pytest.fixture
def patient_app(consenting_patient: Patient, make_token: Callable[..., str]) -> APIClient:
    return _client(make_token("reasoning.read", name="ada-app", patient_id=consenting_patient.pk))


# Grace's app: bound to her, but she has not consented, so her narratives are 403.
@pytest.fixture
def non_consenting_app(non_consenting_patient: Patient, make_token: Callable[..., str]) -> APIClient:
    return _client(make_token("reasoning.read", name="grace-app", patient_id=non_consenting_patient.pk))


# Carl the clerk is logged in but is neither an operator nor a patient: operator pages are 403, patient
# pages tell him politely that he has no patient record, and he can read no one's narrative.
@pytest.fixture
def outsider_client(db: None) -> Client:
    return logged_in(get_user_model().objects.create_user(username="clerk", password=PASSWORD))


@pytest.fixture
def client_for() -> Callable[[str | None], APIClient]:
    return _client


@pytest.fixture
def audit_actions() -> Callable[[], list[str]]:
    def actions() -> list[str]:
        return list(AuditEvent.objects.order_by("id").values_list("action", flat=True))

    return actions


@pytest.fixture
def flow(agent: APIClient) -> dict[str, Any]:
    """An active flow opened by the agent."""
    return open_flow(agent, trigger_ref="q/1", agent="researcher")


@pytest.fixture
def sleeps() -> Sleeps:
    """Pass as a retrying client's ``sleep``: records the waits instead of sleeping."""
    return Sleeps()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """The suite connects as the owner role: it creates, migrates and flushes (TRUNCATE) test
    databases, which the application's role may not. tests/audit/test_least_privilege.py runs
    the code as the application role (``SET ROLE``), with the grants migrate gave it."""
    owner = settings.DATABASE_MIGRATION
    if owner:
        connections["default"].close()
        for databases in (settings.DATABASES["default"], connections["default"].settings_dict):
            databases.update(owner)


class DatabaseClock:
    """Python's clock, frozen, for tests of how old queued audit events are. The database
    stamps each event's time (trigger audit_event_stamp), so ``shift(d)`` sets Python's
    clock to the stamp of the oldest queued event (the database's time when none is
    queued) plus every shift so far: the event is then exactly that old."""

    def __init__(self, traveller: Any) -> None:
        self._traveller = traveller
        self._anchor: datetime | None = None
        self._offset = timedelta(0)

    def shift(self, delta: timedelta) -> None:
        if self._anchor is None:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT coalesce((SELECT min(e.created_at) FROM audit_pending p"
                    " JOIN audit_event e ON e.id = p.event_id), clock_timestamp())"
                )
                row = cursor.fetchone()
            assert row is not None
            self._anchor = row[0]
        self._offset += delta
        self._traveller.move_to(self._anchor + self._offset)


@pytest.fixture
def db_clock(db: None) -> Iterator[DatabaseClock]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    with time_machine.travel(row[0], tick=False) as traveller:
        yield DatabaseClock(traveller)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """``make faults``: the table of every fault run (tests/faults_support.py), under the results.
    Empty unless a fault ran in this process (under xdist each worker keeps its own)."""
    import sys

    faults = sys.modules.get("tests.faults_support")
    lines = faults.table_lines() if faults is not None else []
    if lines:
        terminalreporter.section("faults: nothing acknowledged may be lost or duplicated")
        for line in lines:
            terminalreporter.write_line(line)


# --- Shared helpers: audit events, a frozen clock ----------------------------------------------


def audit_trail_text() -> str:
    """Every audit event as its row and the canonical bytes that get hashed, one per line: what a
    leak into the trail would show up in."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT e::text || ' ' || convert_from(e.canonical, 'UTF8') FROM audit_event AS e")
        return "\n".join(str(row[0]) for row in cursor.fetchall())


def events(action: str, target_id: object | None = None) -> list[AuditEvent]:
    """The audit events of ``action`` (of one target when given), oldest first."""
    found = AuditEvent.objects.filter(action=action)
    if target_id is not None:
        found = found.filter(target_id=str(target_id))
    return list(found.order_by("id"))


@pytest.fixture
def clock_start() -> datetime:
    """When ``clock`` freezes time: ``tests.factories.NOW``. A module that needs another moment
    overrides this fixture."""
    return NOW


@pytest.fixture
def clock(clock_start: datetime) -> Iterator[time_machine.Coordinates]:
    """Time frozen at ``clock_start`` (``tick=False``); ``clock.move_to``/``shift`` move it."""
    with time_machine.travel(clock_start, tick=False) as traveller:
        yield traveller
