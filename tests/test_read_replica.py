"""DATABASE_REPLICA_URL against a real streaming replica of the test server (core.replica).

The replica is a hot standby on 127.0.0.1 (tests.servers.StreamingReplica) and the web server
is the real one. Pausing the replica's WAL replay makes it lag as long as we like: a flow
written meanwhile is missing from the pages that read the replica, present everywhere that
must read the primary, and the write itself succeeds (a standby refuses every write).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.db import connection

from audit.models import AuditEvent
from reasoning.recording.services import close_flow, start_flow
from tests.servers import Gunicorn, Server, StreamingReplica, environment_for_test_database

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not settings.EMBEDDED_DATABASE, reason="the replica is built from the embedded server"),
]


@pytest.fixture
def replica() -> Iterator[StreamingReplica]:
    with StreamingReplica() as standby:
        yield standby


def replica_url(replica: StreamingReplica) -> str:
    return replica.url(str(connection.settings_dict["NAME"]), str(connection.settings_dict["USER"]))


@pytest.fixture
def web(replica: StreamingReplica) -> Iterator[Server]:
    with Gunicorn({"DATABASE_REPLICA_URL": replica_url(replica)}) as gunicorn:
        yield gunicorn.server


def open_flow(web: Server, token: str, trace_id: str) -> str:
    flow_id = str(uuid.uuid4())
    body = {"id": flow_id, "trigger_type": "user_question", "trace_id": trace_id}
    answer = web.request("POST", "/api/reasoning/flows", json.dumps(body).encode(), headers(token))
    assert answer.status == 201, answer.body
    assert answer.json()["id"] == flow_id  # read back in the same request: from the primary
    return flow_id


def headers(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **extra}


def listed(web: Server, token: str, trace_id: str, **extra: str) -> set[str]:
    """The flow ids the admin flow list (a replica view) shows for ``trace_id``."""
    answer = web.request("GET", f"/admin/v1/reasoning/flows?trace_id={trace_id}", None, headers(token, **extra))
    assert answer.status == 200, answer.body
    return {row["id"] for row in answer.json()}


def flow_on_both(web: Server, replica: StreamingReplica, token: str) -> tuple[str, str]:
    """A new trace with one flow, replicated and listed; returns the trace id and the flow id."""
    trace = f"replica-{uuid.uuid4().hex[:8]}"
    first = open_flow(web, token, trace)
    replica.caught_up()
    assert listed(web, token, trace) == {first}
    return trace, first


def test_replica_views_read_the_replica_and_everything_else_the_primary(
    web: Server, replica: StreamingReplica, make_token: Callable[..., str]
) -> None:
    token = make_token("reasoning.write", "reasoning.admin")
    trace, first = flow_on_both(web, replica, token)

    replica.pause()  # from here on the replica lags
    second = open_flow(web, token, trace)  # the write succeeds: it went to the primary
    assert listed(web, token, trace) == {first}  # the list reads the (lagging) replica
    detail = web.request("GET", f"/admin/v1/reasoning/flows/{second}", None, headers(token))
    assert detail.status == 200 and detail.json()["id"] == second  # a flow's detail reads the primary
    stats = web.request("GET", "/admin/v1/reasoning/stats", None, headers(token))
    assert stats.status == 200
    # A browser that just wrote carries the pin cookie: it reads the primary.
    assert listed(web, token, trace, Cookie="rft_primary=1") == {first, second}

    replica.resume()
    replica.caught_up()
    assert listed(web, token, trace) == {first, second}
    sessions = replica.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = "
        f"'{connection.settings_dict['USER']}'"
    )
    assert sessions[0][0] >= 1  # the web server holds a connection to the replica


def test_a_replica_that_goes_away_costs_at_most_one_answer_then_reads_come_from_the_primary(
    web: Server, replica: StreamingReplica, make_token: Callable[..., str]
) -> None:
    token = make_token("reasoning.write", "reasoning.admin")
    trace, first = flow_on_both(web, replica, token)  # the worker now holds a replica connection
    replica.stop()
    second = open_flow(web, token, trace)
    answers = [
        web.request("GET", f"/admin/v1/reasoning/flows?trace_id={trace}", None, headers(token)) for _ in range(3)
    ]
    # The request on the dead connection may fail as an outage does; the next ones read the primary.
    assert answers[0].status in (200, 503)
    for answer in answers[1:]:
        assert answer.status == 200, answer.body
        assert {row["id"] for row in answer.json()} == {first, second}


def test_a_write_request_pins_the_browser_to_the_primary(web: Server, make_token: Callable[..., str]) -> None:
    token = make_token("reasoning.write")
    body = json.dumps({"trigger_type": "user_question"}).encode()
    answer = web.request("POST", "/api/reasoning/flows", body, headers(token))
    assert answer.status == 201
    cookie = answer.headers.get("set-cookie") or answer.headers.get("Set-Cookie") or ""
    assert cookie.startswith("rft_primary=1") and f"Max-Age={settings.DATABASE_REPLICA_PIN_SECONDS}" in cookie
    refused = web.request("POST", "/api/reasoning/flows", b"{}", headers(token))
    assert refused.status == 400 and "rft_primary" not in json.dumps(refused.headers)


def completed_flow(trigger_ref: str) -> str:
    flow, _ = start_flow({"trigger_type": "user_question", "trigger_ref": trigger_ref}, actor="system:test")
    close_flow(flow.pk, actor="system:test", state="completed", outcome_type="answered", outcome_summary="Answered")
    return str(flow.pk)


def test_reasoning_export_reads_one_snapshot_of_the_replica_and_audits_on_the_primary(
    replica: StreamingReplica,
) -> None:
    before = completed_flow("replica/export/1")
    replica.caught_up()
    replica.pause()
    after = completed_flow("replica/export/2")  # not on the replica yet
    env = {**environment_for_test_database(), "DATABASE_REPLICA_URL": replica_url(replica)}
    command = [sys.executable, "manage.py", "reasoning_export", "--no-progress"]
    done = subprocess.run(command, cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    exported = {json.loads(line)["flow_id"] for line in done.stdout.splitlines()}
    assert before in exported and after not in exported
    # The export's own audit event is written on the primary (the standby is read-only).
    assert AuditEvent.objects.filter(action="reasoning.export.completed").count() == 1
