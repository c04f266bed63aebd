"""Rate limits (core.throttling, reasoning.access): the write limit per token on every write
route, the narrative limit per caller and per patient, exact under concurrent bursts against a
real multi-process server; a large limit counted in leases, never past the limit across worker
processes; and the SDK waiting out a 429.

Limits are lowered per test (``settings``, or the server's environment); the suite's
default is the production one (10,000 writes a minute per token), which no test comes near.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from cryptography.fernet import Fernet
from django.db import connection
from django.test.utils import CaptureQueriesContext
from google.rpc.status_pb2 import Status
from psycopg import sql
from pytest_django.fixtures import Settings
from reasoning_flow_sdk import ReasoningFlowRecorder
from rest_framework.test import APIClient

from audit.privileges import application_role
from core.throttling import Rate, hit, lease_size, parse_rate
from patients.models import Patient
from reasoning.models import ReasoningFlow
from tests import otlp
from tests.factories import FLOWS, SAFE_STEPS, logged_in, make_flow, open_flow
from tests.servers import Gunicorn, Server

INGEST = "/api/reasoning/ingest"
TRACES = "/v1/traces"
# Windows are aligned to the clock; the frozen tests start at a window's start.
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def narrative_url(flow_id: object) -> str:
    return f"{FLOWS}/{flow_id}"


def page_url(flow_id: object) -> str:
    return f"/dashboard/reasoning/{flow_id}"


def ingest_item() -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "trigger_type": "user_question", "trigger_ref": "q/1", "agent": "researcher"}


# --- The rate setting -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rate"),
    [("100/1m", Rate(100, 60)), ("30/5m", Rate(30, 300)), ("5/s", Rate(5, 1)), ("2/1d", Rate(2, 86400))],
)
def test_a_rate_is_a_count_per_period(text: str, rate: Rate) -> None:
    assert parse_rate(text, "X") == rate


@pytest.mark.parametrize("text", ["off", "0", "", None])
def test_off_or_zero_is_no_limit(text: str | None) -> None:
    assert parse_rate(text, "X") is None


@pytest.mark.parametrize("text", ["100", "100/minute", "-1/1m", "1/0m", "ten/1m"])
def test_a_malformed_rate_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match="API_WRITE_RATE_LIMIT"):
        parse_rate(text, "API_WRITE_RATE_LIMIT")


def test_the_server_refuses_to_start_with_a_malformed_rate() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "RFT_", "DJANGO_", "FIELD_"))}
    environ.update(
        DATABASE_URL="postgres://app@db.invalid/rft",
        DJANGO_SECRET_KEY="x" * 50,
        FIELD_ENCRYPTION_KEY=Fernet.generate_key().decode(),
        NARRATIVE_RATE_LIMIT="30/5 minutes",
    )
    done = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=Path(__file__).resolve().parents[1],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert "ImproperlyConfigured: NARRATIVE_RATE_LIMIT must be" in done.stderr


# --- The counter ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_counter_allows_the_limit_per_window_then_says_when_the_window_ends() -> None:
    rate = Rate(2, 60)
    start = 1_800_000_000.0 - 1_800_000_000.0 % 60  # a window's start

    assert hit(["k"], rate, now=start + 1).allowed
    assert hit(["k"], rate, now=start + 2).allowed
    refused = hit(["k"], rate, now=start + 20.5)
    other_key = hit(["other"], rate, now=start + 21)
    next_window = hit(["k"], rate, now=start + 60)

    assert (refused.allowed, refused.retry_after) == (False, 40)  # 39.5 s rounded up
    assert other_key.allowed
    assert next_window.allowed


@pytest.mark.django_db
def test_a_request_counts_against_every_key_and_any_one_refuses_it() -> None:
    rate = Rate(1, 60)

    assert hit(["caller-a", "patient"], rate, now=0).allowed
    assert not hit(["caller-b", "patient"], rate, now=1).allowed  # the shared key is spent
    assert hit(["caller-b"], rate, now=2).allowed is False  # and the refused request counted too


@pytest.mark.parametrize(
    ("rate", "size"), [(Rate(30, 300), 1), (Rate(199, 60), 1), (Rate(1000, 60), 10), (Rate(10000, 60), 25)]
)
def test_a_lease_is_a_hundredth_of_a_large_limit_and_at_most_25(rate: Rate, size: int) -> None:
    assert lease_size(rate) == size


@pytest.mark.django_db
def test_a_large_limit_is_counted_in_leases_and_still_lets_exactly_the_limit_through() -> None:
    rate = Rate(1000, 60)  # leases of 10
    start = 1_800_000_000.0 - 1_800_000_000.0 % 60
    with CaptureQueriesContext(connection) as counted:
        verdicts = [hit(["lease-key"], rate, now=start + 1 + n / 1000) for n in range(1005)]

    assert [v.allowed for v in verdicts] == [True] * 1000 + [False] * 5
    assert verdicts[-1].retry_after == 58  # the window ends 57.996 s after the last attempt
    # One statement a lease; the last lease reached the limit, so the refusals ask nothing.
    assert len(counted.captured_queries) == 100
    with connection.cursor() as cursor:
        cursor.execute("SELECT hits FROM rft_rate_limit WHERE key = 'lease-key@60'")
        assert cursor.fetchone() == (1000,)
    assert hit(["lease-key"], rate, now=start + 60).allowed  # a new window, a new lease


@pytest.mark.django_db
def test_several_keys_are_counted_one_by_one_whatever_the_limit() -> None:
    rate = Rate(1000, 60)
    with CaptureQueriesContext(connection) as counted:
        for n in range(5):
            assert hit(["caller", "patient"], rate, now=n).allowed

    assert len(counted.captured_queries) == 5


@pytest.mark.django_db
def test_the_application_role_may_count() -> None:
    # The suite connects as the owner; web processes as the application role (migrate's grants).
    role = application_role()
    if role is None:
        pytest.skip("one database role: nothing to separate")
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
    try:
        assert hit(["as-app"], Rate(1, 60), now=0).allowed
        assert not hit(["as-app"], Rate(1, 60), now=1).allowed
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


# --- The write limit ------------------------------------------------------------------------


@pytest.fixture
def low_write_limit(settings: Settings) -> Iterator[time_machine.Coordinates]:
    settings.API_WRITE_RATE_LIMIT = Rate(2, 60)
    with time_machine.travel(T0, tick=False) as clock:
        yield clock


def test_past_the_write_limit_is_429_with_retry_after_and_the_error_shape(
    agent: APIClient, make_token: Callable[..., str], low_write_limit: time_machine.Coordinates
) -> None:
    flow = open_flow(agent, trigger_ref="q/1")
    open_flow(agent, trigger_ref="q/2")
    low_write_limit.shift(timedelta(seconds=15))

    refused = agent.post(FLOWS, {"trigger_type": "user_question", "trigger_ref": "q/3"}, format="json")
    step = agent.post(f"{FLOWS}/{flow['id']}/steps", {"kind": "retrieval", "summary_text": "x"}, format="json")
    close = agent.patch(f"{FLOWS}/{flow['id']}", {"flow_state": "aborted", "abort_reason": "x"}, format="json")

    assert refused.status_code == 429, refused.content
    assert refused["Retry-After"] == "45"
    assert set(refused.json()) == {"detail"}
    assert (step.status_code, close.status_code) == (429, 429)
    assert ReasoningFlow.objects.count() == 2  # nothing refused was written
    # Per token: another agent's token is not held back.
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('reasoning.write')}")
    assert other.post(FLOWS, {"trigger_type": "user_question", "trigger_ref": "q/4"}, format="json").status_code == 201


def test_the_write_limit_lifts_when_the_window_ends(
    agent: APIClient, low_write_limit: time_machine.Coordinates
) -> None:
    open_flow(agent, trigger_ref="q/1")
    open_flow(agent, trigger_ref="q/2")
    assert agent.post(FLOWS, {"trigger_type": "user_question"}, format="json").status_code == 429

    low_write_limit.shift(timedelta(seconds=60))

    open_flow(agent, trigger_ref="q/3")


def test_reads_are_not_counted_against_the_write_limit(
    agent: APIClient, operator: APIClient, low_write_limit: time_machine.Coordinates
) -> None:
    for _ in range(5):
        assert operator.get("/admin/v1/reasoning/flows").status_code == 200
        assert agent.get(f"{FLOWS}/{uuid.uuid4()}").status_code in (403, 404)

    open_flow(agent, trigger_ref="q/1")
    open_flow(agent, trigger_ref="q/2")


def test_the_ingest_route_is_limited(agent: APIClient, low_write_limit: time_machine.Coordinates) -> None:
    for _ in range(2):
        assert agent.post(INGEST, {"flows": [ingest_item()]}, format="json").status_code == 200

    refused = agent.post(INGEST, {"flows": [ingest_item()]}, format="json")

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) == 60
    assert ReasoningFlow.objects.count() == 2


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_otlp_past_the_limit_is_429_with_retry_after_and_an_otlp_status(
    agent: APIClient, low_write_limit: time_machine.Coordinates, encoding: str
) -> None:
    message = otlp.request(otlp.span("invoke_agent triage"))
    content_type = "application/x-protobuf" if encoding == "protobuf" else "application/json"
    body = otlp.protobuf_body(message) if encoding == "protobuf" else otlp.json_body(message)
    for _ in range(2):
        assert agent.post(TRACES, body, content_type=content_type).status_code == 200

    refused = agent.post(TRACES, body, content_type=content_type)

    assert refused.status_code == 429
    assert refused["Retry-After"] == "60"
    assert refused["Content-Type"] == content_type
    status = Status()
    if encoding == "protobuf":
        status.ParseFromString(refused.content)
    else:
        status.code, status.message = json.loads(refused.content)["code"], json.loads(refused.content)["message"]
    assert status.code == 8  # RESOURCE_EXHAUSTED
    assert "throttled" in status.message


def test_off_means_no_write_limit(agent: APIClient, settings: Settings) -> None:
    settings.API_WRITE_RATE_LIMIT = parse_rate("off", "API_WRITE_RATE_LIMIT")

    for n in range(5):
        open_flow(agent, trigger_ref=f"q/{n}")


def test_every_write_operation_documents_the_429() -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    writes = [
        (path, method, operation)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if method in ("post", "put", "patch", "delete")
    ]

    assert {(path, method) for path, method, _ in writes} >= {
        (FLOWS, "post"),
        (FLOWS + "/{flow_id}", "patch"),
        (INGEST, "post"),
        (TRACES, "post"),
    }
    for path, method, operation in writes:
        assert "429" in operation["responses"], (path, method)
    ingest_429 = schema["paths"][INGEST]["post"]["responses"]["429"]
    assert "Retry-After" in ingest_429["headers"]


# --- The narrative limit --------------------------------------------------------------------


@pytest.fixture
def low_narrative_limit(settings: Settings) -> Iterator[time_machine.Coordinates]:
    settings.NARRATIVE_RATE_LIMIT = Rate(3, 300)
    with time_machine.travel(T0, tick=False) as clock:
        yield clock


def test_a_patient_reads_at_most_the_limit_across_all_their_tokens_and_sessions(
    consenting_patient: Patient,
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
    low_narrative_limit: time_machine.Coordinates,
) -> None:
    flow_id = make_flow(consenting_patient)
    phone = client_for(make_token("reasoning.read", patient_id=consenting_patient.pk))
    tablet = client_for(make_token("reasoning.read", patient_id=consenting_patient.pk))
    browser = logged_in(consenting_patient)

    statuses = [
        phone.get(narrative_url(flow_id)).status_code,
        tablet.get(narrative_url(flow_id)).status_code,
        browser.get(page_url(flow_id)).status_code,
        tablet.get(narrative_url(flow_id)).status_code,
        browser.get(page_url(flow_id)).status_code,
    ]

    assert statuses == [200, 200, 200, 429, 429]


def test_the_narrative_limit_of_one_patient_leaves_another_patient_alone(
    consenting_patient: Patient,
    patient_app: APIClient,
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
    low_narrative_limit: time_machine.Coordinates,
) -> None:
    from patients.services import create_patient

    other = create_patient(username="bob.patient", password="x" * 12, consent=True, actor="system:test")
    other_app = client_for(make_token("reasoning.read", patient_id=other.pk))
    mine, theirs = make_flow(consenting_patient), make_flow(other)
    for _ in range(3):
        assert patient_app.get(narrative_url(mine)).status_code == 200
    # Reading someone else's flow spends the reader's budget (a 404), not theirs.
    assert patient_app.get(narrative_url(theirs)).status_code == 429

    assert [other_app.get(narrative_url(theirs)).status_code for _ in range(3)] == [200, 200, 200]


def test_the_narrative_page_past_the_limit_is_the_429_page_with_retry_after(
    consenting_patient: Patient, low_narrative_limit: time_machine.Coordinates
) -> None:
    flow_id = make_flow(consenting_patient)
    browser = logged_in(consenting_patient)
    for _ in range(3):
        assert browser.get(page_url(flow_id)).status_code == 200
    low_narrative_limit.shift(timedelta(seconds=100))

    refused = browser.get(page_url(flow_id))

    assert refused.status_code == 429
    assert refused["Retry-After"] == "200"
    assert SAFE_STEPS[0] not in refused.content.decode()


# --- Against a real server: two worker processes ---------------------------------------------

BURST_LIMIT = 30


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[Gunicorn]:
    """Narrative windows of a day, so a burst of a second or two never straddles a window's end
    (``burst`` makes sure); a write limit of 2 per 3 seconds, for the SDK to wait out."""
    env = {"NARRATIVE_RATE_LIMIT": f"{BURST_LIMIT}/1d", "API_WRITE_RATE_LIMIT": "2/3s"}
    with django_db_blocker.unblock(), Gunicorn(env, workers=2) as gunicorn:
        yield gunicorn


def burst(server: Server, path: str, headers: dict[str, str]) -> Counter[int]:
    """64 GETs from 16 threads at once; the statuses they got."""
    to_day_end = 86400 - time.time() % 86400
    if to_day_end < 60:
        time.sleep(to_day_end + 1)  # once a day at most: start in a fresh window
    with ThreadPoolExecutor(max_workers=16) as pool:
        return Counter(pool.map(lambda _: server.request("GET", path, None, headers).status, range(64)))


def test_a_concurrent_burst_of_narrative_reads_gets_exactly_the_limit_through(
    server: Gunicorn, transactional_db: None, consenting_patient: Patient, make_token: Callable[..., str]
) -> None:
    flow_id = make_flow(consenting_patient)
    token = make_token("reasoning.read", patient_id=consenting_patient.pk)

    statuses = burst(Server("127.0.0.1", server.port), narrative_url(flow_id), {"Authorization": f"Bearer {token}"})

    assert statuses == Counter({200: BURST_LIMIT, 429: 64 - BURST_LIMIT})


def test_the_sdk_waits_out_a_429_and_delivers_everything(
    server: Gunicorn, transactional_db: None, make_token: Callable[..., str], tmp_path: Path
) -> None:
    token = make_token("reasoning.write")
    probe = Server("127.0.0.1", server.port)
    if time.time() % 3 > 1.5:
        time.sleep(3 - time.time() % 3)  # spend the budget early in a window, so the SDK meets the 429
    spent = [probe.request("POST", INGEST, b"{}", {"Authorization": f"Bearer {token}"}).status for _ in range(3)]
    assert spent[-1] == 429, spent
    recorder = ReasoningFlowRecorder(
        server.url, token, tmp_path / "spool", enabled=True, flush_interval=0.01, timeout=30
    )
    ids = []
    try:
        for n in range(3):
            with recorder.flow("user_question", f"sdk/{n}", agent="researcher") as flow:
                flow.step("retrieval", "Reviewed the guideline")
            ids.append(uuid.UUID(flow.id))
        assert recorder.flush(timeout=60)
    finally:
        recorder.close(timeout=5)

    stats = recorder.stats()
    assert stats["retried"] >= 1
    assert (stats["sent"], stats["sent_flows"], stats["dropped"], stats["rejected"]) == (3, 3, 0, 0)
    assert ReasoningFlow.objects.filter(pk__in=ids, flow_state="completed").count() == 3


# --- Leases across processes -------------------------------------------------------------------

LEASED_LIMIT = 400  # leases of 4


@pytest.fixture(scope="module")
def leasing_server(django_db_setup: None, django_db_blocker: Any) -> Iterator[Gunicorn]:
    """Three workers, each leasing 4 of the token's 400 writes a day."""
    with django_db_blocker.unblock(), Gunicorn({"API_WRITE_RATE_LIMIT": f"{LEASED_LIMIT}/1d"}, workers=3) as gunicorn:
        yield gunicorn


def test_a_burst_across_worker_processes_never_gets_more_than_a_leased_limit_through(
    leasing_server: Gunicorn, transactional_db: None, make_token: Callable[..., str]
) -> None:
    to_day_end = 86400 - time.time() % 86400
    if to_day_end < 60:
        time.sleep(to_day_end + 1)  # once a day at most: start in a fresh window
    server = Server("127.0.0.1", leasing_server.port)
    headers = {"Authorization": f"Bearer {make_token('reasoning.write')}", "Content-Type": "application/x-protobuf"}
    empty = otlp.request().SerializeToString()

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = Counter(pool.map(lambda _: server.request("POST", TRACES, empty, headers).status, range(480)))

    assert set(statuses) == {200, 429}
    # What each worker leased and had not handed out when the window was spent is lost: 3 at most each.
    assert LEASED_LIMIT - 3 * 3 <= statuses[200] <= LEASED_LIMIT
