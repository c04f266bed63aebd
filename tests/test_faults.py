"""Fault injection, nothing lost: a load of real writes (the ingest route, the single routes and
the SDK) while the processes of ``make run`` are killed, PostgreSQL restarts, and the SDK's server
refuses connections (tests/faults_support.py has the load and the invariants).

After each fault: every write that got a 2xx (and every flow the SDK recorded) is stored exactly
once; nothing else is half-written (each flow's ``step_count`` is its steps; each flow and step has
exactly its audit events, and no event names a missing row); the audit chain and its Merkle tree
verify; and the chainer catches up on its own, within a bound.

``make test`` runs the short version. ``make faults`` (``RFT_FAULTS_LONG=1``) runs the long one: a
bigger load, repeated kills, a 30 s refusal; it prints each figure as a ``key=value`` line, which
docs/operations.md's "Reliability" section quotes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django_q.tasks import async_task

from audit.verify import verify_chain
from tests import faults_support as faults
from tests.faults_support import INGEST
from tests.servers import Gunicorn

pytestmark = pytest.mark.django_db(transaction=True)

LONG = os.environ.get("RFT_FAULTS_LONG", "") in ("1", "true", "yes")
# Acknowledged requests between two faults, and how often each kill is repeated.
WRITES_BETWEEN = 150 if LONG else 20
# Writer threads of each kind (ingest, single routes); the SDK records from one more.
THREADS = 2 if LONG else 1
ROUNDS = 3 if LONG else 1
# How long the SDK's server refuses connections.
REFUSED_S = 30.0 if LONG else 3.0
# The bounds of recovery (a write acknowledged again, the chainer caught up): liveness, not
# speed. Both include a process's start-up (Django's import, ~2 s), which takes 25 s and more on
# two cores shared by a dozen busy processes.
RECOVERY_BOUND_S = 120.0
CATCH_UP_BOUND_S = 120.0


Figures = faults.Figures


@pytest.fixture(autouse=True)
def _quiet_http_log() -> Iterator[None]:
    # The SDK's HTTP client logs every request at INFO: thousands of lines.
    logger = logging.getLogger("httpx")
    level = logger.level
    logger.setLevel(logging.WARNING)
    yield
    logger.setLevel(level)


@pytest.fixture
def token(make_token: Callable[..., str]) -> str:
    return make_token("reasoning.write", name="faults-agent")


@pytest.fixture
def start_load(token: str, tmp_path: Path) -> Iterator[Callable[[str], faults.Load]]:
    """``start_load(url)``: the writers against ``url``; stopped after the test if it failed first."""
    loads: list[faults.Load] = []

    def start(url: str) -> faults.Load:
        loads.append(faults.Load(url, token, tmp_path / "spool", threads=THREADS).start())
        return loads[-1]

    yield start
    for load in loads:
        load.abandon()


@pytest.fixture
def processes() -> Iterator[list[Gunicorn | faults.Command]]:
    """Whatever a test starts, stopped after it."""
    started: list[Gunicorn | faults.Command] = []
    yield started
    for process in reversed(started):
        # Everything was checked: no graceful shutdown to wait for (gunicorn's is quick anyway).
        process.kill() if isinstance(process, faults.Command) else process.stop()


def _verify_here() -> None:
    result = verify_chain()
    assert result.ok, result.broken.describe() if result.broken else ""
    assert result.pending == 0


def _check(load: faults.Load, cursor_of: Callable[[], Any], figures: Figures) -> None:
    """The invariants after the load stopped: what a user would check in the database."""
    ledger = load.ledger
    assert ledger.unexpected == [], ledger.unexpected[:5]
    assert ledger.gave_up == []
    assert load.sdk_delivered, f"the SDK did not deliver everything it recorded: {load.sdk_stats()}"
    stats = load.sdk_stats()
    assert (stats["dropped"], stats["rejected"]) == (0, 0), stats
    with cursor_of() as cursor:
        caught_up = faults.wait_until(
            lambda: faults.pending_events(cursor) == 0, CATCH_UP_BOUND_S, "the chainer catching up after the load"
        )
        assert faults.problems(cursor, ledger) == {}
        counted = faults.tally(cursor, ledger)
    assert (counted["lost"], counted["duplicated"]) == (0, 0), counted
    assert ledger.answers_5xx == 0, "a 5xx other than 503"
    figures.row.update(
        sent=ledger.sent_requests + len(load.sdk.flows),
        acknowledged=ledger.acknowledged_requests + len(load.sdk.flows),
        stored=counted["stored"],
        lost=counted["lost"],
        duplicated=counted["duplicated"],
        **{"503": ledger.answers_503, "other_5xx": ledger.answers_5xx},
    )
    figures["acknowledged_writes"] = ledger.writes()
    figures["acknowledged_requests"] = ledger.acknowledged_requests
    figures["sdk_flows"] = len(load.sdk.flows)
    figures["retried_requests"] = ledger.retried_requests
    figures["lost"] = 0
    figures["final_catch_up_s"] = caught_up


def _no_server_error(gunicorn: Gunicorn) -> None:
    assert gunicorn.log is not None
    log = gunicorn.log.read_text(errors="replace")
    assert "Internal Server Error" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def _settle(
    load: faults.Load,
    gunicorn: Gunicorn,
    figures: Figures,
    cursor_of: Callable[[], Any] | None = None,
    verify: Callable[[], None] = _verify_here,
) -> None:
    """Stop the load, then check: the invariants (``_check``), the chain and tree verify, and the
    server logged no error. ``cursor_of``: this process's database unless given."""
    load.stop()
    _check(load, cursor_of or connection.cursor, figures)
    verify()
    _no_server_error(gunicorn)


def _verify_by_command(env: dict[str, str]) -> None:
    """``manage.py audit_verify`` against the database ``env`` names (not this process's)."""
    verified = subprocess.run(
        [sys.executable, "manage.py", "audit_verify", "--no-progress"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "awaiting chaining" not in verified.stdout


def test_killed_web_workers_and_a_killed_server_lose_nothing(
    start_load: Callable[[str], faults.Load], tmp_path: Path, processes: list[Gunicorn | faults.Command]
) -> None:
    """A web worker is SIGKILLed (its master starts another); then the whole server is (the
    master, then its workers, as config.gunicorn's parent-death signal does under ``make run``),
    and its port refuses connections for REFUSED_S while the agent keeps recording (the SDK
    spools), until it is started again as scripts/run.py's supervisor does."""
    web, refused = Figures("web_sigkill"), Figures("sdk_refused")
    gunicorn = Gunicorn(workers=2, log=tmp_path / "gunicorn.log")
    processes.append(gunicorn)
    gunicorn.start()
    chainer = faults.Command(["audit_chainer"], gunicorn.env, tmp_path / "chainer.log").start()
    processes.append(chainer)
    load = start_load(gunicorn.url)
    load.wait_for_writes(WRITES_BETWEEN)

    worker_recovery, restart_recovery, recorded_while_refused = [], [], []
    for _ in range(ROUNDS):
        assert gunicorn.process is not None
        victim = faults.children(gunicorn.process.pid)[0]
        killed_at = time.monotonic()
        faults.kill_process(victim)
        load.wait_for_writes(WRITES_BETWEEN)
        worker_recovery.append(_recovered(load, killed_at))

        assert gunicorn.process is not None
        master = gunicorn.process
        workers = faults.children(master.pid)
        faults.kill_process(master.pid)
        for pid in workers:
            faults.kill_process(pid)
        master.wait(timeout=10)
        gunicorn.process = None
        flows_before, spooled_before = len(load.sdk.flows), load.sdk_stats()["spooled"]
        time.sleep(REFUSED_S)
        recorded_while_refused.append(len(load.sdk.flows) - flows_before)
        assert load.sdk_stats()["spooled"] > spooled_before, "the SDK spooled nothing while refused"
        started_at = time.monotonic()
        gunicorn.start()
        load.wait_for_writes(WRITES_BETWEEN)
        restart_recovery.append(_recovered(load, started_at))

    _settle(load, gunicorn, web)
    assert min(recorded_while_refused) > 0
    web["worker_kills"] = ROUNDS
    web["server_kills"] = ROUNDS
    web["worker_kill_to_write_max_s"] = max(worker_recovery)
    web["server_start_to_write_max_s"] = max(restart_recovery)
    web.row["recovery_s"] = max(worker_recovery + restart_recovery)
    refused["refused_s"] = REFUSED_S
    refused["refusals"] = ROUNDS
    refused["sdk_flows_recorded_while_refused"] = sum(recorded_while_refused)
    refused["sdk_steps_spooled"] = load.sdk_stats()["spooled"]
    refused["sdk_lost"] = 0
    web.report()
    refused.report()


def _recovered(load: faults.Load, since: float) -> float:
    """Seconds from the fault to the first acknowledged request sent after it."""
    answered = load.ledger.first_success_after(since)
    assert answered is not None, "no write was acknowledged after the fault"
    recovery = answered - since
    assert recovery < RECOVERY_BOUND_S
    return recovery


def _kill_mid_batch(command: faults.Command, cursor: Any) -> None:
    """SIGKILL ``command`` while a session holds the chainer's lock (inside a batch's transaction)."""
    faults.wait_until(lambda: faults.chaining_now(cursor), 60, "a chainer starting a batch", step=0.002)
    command.kill()


def test_a_job_worker_and_a_chainer_killed_mid_batch_lose_nothing(
    start_load: Callable[[str], faults.Load], tmp_path: Path, processes: list[Gunicorn | faults.Command]
) -> None:
    """No dedicated chainer at first: a backlog builds up; the job worker's chainer job (the same
    job the schedule runs every minute) is killed inside a batch, then ``audit_chainer`` is, and
    both are started again as ``make run``'s supervisor does: the chainer catches up."""
    figures = Figures("chainer_sigkill")
    gunicorn = Gunicorn(log=tmp_path / "gunicorn.log")
    processes.append(gunicorn)
    gunicorn.start()
    # Started with the server: it idles (no task queued) until the backlog is there.
    worker = faults.Command(["qcluster"], gunicorn.env, tmp_path / "worker.log").start()
    processes.append(worker)
    chainer = faults.Command(["audit_chainer", "--batch-size", "100"], gunicorn.env, tmp_path / "chainer.log")
    processes.append(chainer)
    load = start_load(gunicorn.url)
    catch_up = []
    with connection.cursor() as cursor:
        for round_ in range(ROUNDS):
            load.wait_for_writes(WRITES_BETWEEN)
            assert faults.pending_events(cursor) > 0
            if round_:
                worker.start()
            async_task("audit.jobs.run_chainer")
            _kill_mid_batch(worker, cursor)
            linked_by_job = faults.chain_length(cursor)

            load.wait_for_writes(WRITES_BETWEEN)
            chainer.start()
            faults.wait_until(partial(faults.chain_longer_than, cursor, linked_by_job), 60, "the chainer linking")
            _kill_mid_batch(chainer, cursor)
            assert faults.pending_events(cursor) > 0, "the batch killed was the last one: nothing left to catch up"
            result = verify_chain()
            assert result.ok, result.broken.describe() if result.broken else ""

            # Started again, as the supervisor does: the chainer catches up under the load.
            chainer.start()
            restarted_at_event = faults.last_event_id(cursor)
            catch_up.append(
                faults.wait_until(
                    partial(faults.caught_up, cursor, restarted_at_event),
                    CATCH_UP_BOUND_S,
                    "the restarted chainer catching up",
                )
            )
            if round_ < ROUNDS - 1:
                chainer.kill()
    _settle(load, gunicorn, figures)
    figures["job_worker_kills"] = ROUNDS
    figures["chainer_kills"] = ROUNDS
    figures["chainer_catch_up_max_s"] = max(catch_up)
    figures.row["recovery_s"] = max(catch_up)
    figures.report()


@pytest.fixture
def own_postgres(token: str, tmp_path: Path) -> Iterator[faults.OwnPostgres]:
    """A PostgreSQL of this test's own (the shared test server must not restart), with a copy of
    the test database: its schema and its rows, so the token exists there too."""
    server = faults.OwnPostgres(tmp_path / "own-pg", connection.settings_dict)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("how", ["fast_stop", "kill_9"])
def test_a_postgres_restart_mid_load_loses_nothing(
    start_load: Callable[[str], faults.Load],
    tmp_path: Path,
    own_postgres: faults.OwnPostgres,
    processes: list[Gunicorn | faults.Command],
    how: str,
) -> None:
    """PostgreSQL goes away under the load and comes back: a fast shutdown (every session ended,
    open transactions rolled back) or kill -9 of all its processes (recovery from the write-ahead
    log). Clients get 503 + Retry-After meanwhile and retry; every acknowledged write is there."""
    figures = Figures(f"postgres_{how}")
    gunicorn = Gunicorn(own_postgres.env, workers=2, log=tmp_path / "gunicorn.log")
    processes.append(gunicorn)
    gunicorn.start()
    chainer = faults.Command(["audit_chainer"], gunicorn.env, tmp_path / "chainer.log")
    with own_postgres.cursor() as cursor:
        linked = faults.chain_length(cursor)
    processes.append(chainer.start())
    load = start_load(gunicorn.url)
    # The chainer up and linking before the first restart: what is tested is its reconnecting (a
    # chainer still starting when PostgreSQL is shutting down exits, as any command would).
    with own_postgres.cursor() as cursor:
        faults.wait_until(partial(faults.chain_longer_than, cursor, linked), 60, "the chainer linking")
    recovery, catch_up = [], []
    for _ in range(ROUNDS):
        load.wait_for_writes(WRITES_BETWEEN)
        restarted_at = time.monotonic()
        if how == "kill_9":
            own_postgres.crash()
            own_postgres.start()
        else:
            own_postgres.restart()
        with own_postgres.cursor() as cursor:
            up_to = faults.last_event_id(cursor)
        load.wait_for_writes(WRITES_BETWEEN)
        recovery.append(_recovered(load, restarted_at))
        with own_postgres.cursor() as cursor:
            faults.wait_until(
                partial(faults.caught_up, cursor, up_to),
                CATCH_UP_BOUND_S,
                "the chainer reconnecting",
            )
        catch_up.append(time.monotonic() - restarted_at)
    _settle(load, gunicorn, figures, own_postgres.cursor, partial(_verify_by_command, gunicorn.env))
    figures["restarts"] = ROUNDS
    figures["write_recovery_max_s"] = max(recovery)
    figures["chainer_catch_up_max_s"] = max(catch_up)
    figures.row["recovery_s"] = max(recovery)
    figures.report()


def _closing_flow() -> tuple[str, bytes]:
    """A whole flow, closed, that owes both receivers: a pathway (completed, claim_created, every
    step confident, a summary the guard passes) and a backlog request (a Researcher that found
    no evidence)."""
    flow_id = str(uuid.uuid4())
    body = {
        "flows": [
            {
                "id": flow_id,
                "trigger_type": "user_question",
                "trigger_ref": f"faults/close-work/{flow_id}",
                "agent": "researcher",
                "steps": [
                    {
                        "id": str(uuid.uuid4()),
                        "kind": "retrieval",
                        "agent": "researcher",
                        "summary_text": "Read the guideline",
                        "confidence": 0.95,
                    }
                ],
                "close": {
                    "flow_state": "completed",
                    "outcome_type": "claim_created",
                    "outcome_summary": "Created a claim",
                    "outcome_metrics": {"evidence_hits": 0},
                },
            }
        ]
    }
    return flow_id, json.dumps(body).encode()


def _post(gunicorn: Gunicorn, body: bytes, headers: dict[str, str], answers: list[int]) -> None:
    answers.append(gunicorn.server.request("POST", INGEST, body, headers).status)


def _receiver_waiting(cursor: Any, flow_id: str) -> bool:
    """The close of ``flow_id`` committed, and a session waits for a lock (the receiver's write)."""
    committed = "SELECT count(*) FROM reasoning_flow WHERE id = %s AND flow_state = 'completed'"
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    return _count(cursor, committed, flow_id) == 1 and _count(cursor, waiting) > 0


def _count(cursor: Any, sql: str, *params: Any) -> int:
    cursor.execute(sql, list(params))
    (value,) = cursor.fetchone()
    return int(value)


def test_a_database_stop_between_a_close_and_its_receivers_loses_no_derived_work(
    token: str, tmp_path: Path, own_postgres: faults.OwnPostgres, processes: list[Gunicorn | faults.Command]
) -> None:
    """The close commits; the receiver it owes (the backlog producer) is held at its first write by
    a table lock; PostgreSQL stops (fast) right then, and starts again. The client was told 200; the
    pathway was extracted by the close's own statement (``CloseReceiver.in_close``), and the
    producer's work is still owed (``reasoning.recording.close_work``) and the job does it: one
    pathway and one backlog request per flow, each audited once."""
    figures = Figures("postgres_stop_after_close")
    env = {**own_postgres.env, "RESEARCH_AUTO_ENQUEUE_ENABLED": "1"}
    gunicorn = Gunicorn(env, workers=1, log=tmp_path / "gunicorn.log")
    processes.append(gunicorn)
    gunicorn.start()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    import psycopg

    flows, sent, acknowledged, recovery = [], 0, 0, []
    for _ in range(ROUNDS):
        flow_id, body = _closing_flow()
        flows.append(flow_id)
        # Reads of the table go on; writes wait for the lock.
        holder = psycopg.connect(own_postgres.owner_url)
        holder.execute("LOCK TABLE research_request IN EXCLUSIVE MODE")
        answers: list[int] = []
        closing = threading.Thread(target=partial(_post, gunicorn, body, headers, answers))
        sent += 1
        closing.start()
        with own_postgres.cursor() as cursor:
            faults.wait_until(
                partial(_receiver_waiting, cursor, flow_id), 30, "the close committed, a receiver waiting"
            )
            assert _count(cursor, "SELECT count(*) FROM reasoning_close_work WHERE flow_id = %s", flow_id) == 1
        own_postgres.stop()
        closing.join(timeout=30)
        with contextlib.suppress(psycopg.Error):
            holder.close()
        stopped_at = time.monotonic()
        own_postgres.start()
        # Committed before the stop: acknowledged (the receivers' failure is not the client's).
        assert answers == [200], answers
        acknowledged += 1
        with own_postgres.cursor() as cursor:
            owed = _count(
                cursor, "SELECT count(*) FROM reasoning_close_work WHERE flow_id = %s AND attempts = 0", flow_id
            )
            assert owed == 1, "the work the close owed is gone, or an outage used up an attempt"
            assert _count(cursor, "SELECT count(*) FROM pathways_pathway WHERE seed_flow_id = %s", flow_id) == 1
        # The job, as the worker runs it every minute (twice: the second finds nothing).
        for _ in range(2):
            ran = subprocess.run(
                [sys.executable, "manage.py", "close_work"],
                cwd=settings.BASE_DIR,
                env=gunicorn.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert ran.returncode == 0, ran.stdout + ran.stderr
        recovery.append(time.monotonic() - stopped_at)
        assert "owed: 0 (none); failed: 0" in ran.stdout

    with own_postgres.cursor() as cursor:
        pathways = _count(cursor, "SELECT count(*) FROM pathways_pathway WHERE seed_flow_id = ANY(%s::uuid[])", flows)
        requests = _count(cursor, "SELECT count(*) FROM research_request WHERE source_flow_id = ANY(%s::uuid[])", flows)
        extracted = _count(cursor, "SELECT count(*) FROM audit_event WHERE action = 'reasoning.pathway.extracted'")
        enqueued = _count(
            cursor, "SELECT count(*) FROM audit_event WHERE action = 'reasoning.research.deeper_request_created'"
        )
        assert _count(cursor, "SELECT count(*) FROM reasoning_close_work") == 0
    owed_work = 2 * len(flows)  # derived work: the pathway (in the close) and the request (owed)
    assert (pathways, requests) == (len(flows), len(flows))
    assert (extracted, enqueued) == (len(flows), len(flows))
    chainer = faults.Command(["audit_chainer"], gunicorn.env, tmp_path / "chainer.log")
    processes.append(chainer.start())
    with own_postgres.cursor() as cursor:
        faults.wait_until(lambda: faults.pending_events(cursor) == 0, CATCH_UP_BOUND_S, "the chainer catching up")
    _verify_by_command(gunicorn.env)
    _no_server_error(gunicorn)
    figures["closes"] = len(flows)
    figures["owed_work_done"] = pathways + requests
    figures["recovery_max_s"] = max(recovery)
    figures.row.update(
        sent=sent,
        acknowledged=acknowledged,
        stored=pathways + requests,
        lost=owed_work - min(pathways, len(flows)) - min(requests, len(flows)),
        duplicated=max(pathways - len(flows), 0) + max(requests - len(flows), 0),
        **{"503": 0, "other_5xx": 0},
        recovery_s=max(recovery),
    )
    figures.report()
