"""The replay invokers: ``stub`` (the corpus itself), ``reference`` (the SDK's reference agents)
and ``http`` (an agent service that records through the SDK).

``reference`` and ``http`` read the flow the agent recorded back from the server's admin API
(``GET /admin/v1/reasoning/flows[/{id}]``, which needs a token with ``reasoning.admin``; each read
of a flow is audited as ``admin.reasoning.flow.read``). Chain-of-thought is never requested.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from tempfile import TemporaryDirectory
from typing import TYPE_CHECKING, Any

import httpx

from core.http import RetriesExhausted, RetryPolicy, RetryWaitTooLong
from reasoning.evaluation.replay import InvokerError, ReplayCase, ReplayOutcome
from reasoning.evaluation.signatures import ABORTED, Corpus

if TYPE_CHECKING:
    from reasoning_flow_sdk import ReasoningFlowRecorder
    from reasoning_flow_sdk.agents import OfflineModel

FLOWS_PATH = "/admin/v1/reasoning/flows"
STATS_PATH = "/admin/v1/reasoning/stats"
DEFAULT_TIMEOUT = 10.0  # seconds to wait for a replayed flow to reach the server, closed
POLL_INTERVAL = 0.1
BENCHMARK_PREFIX = "benchmark/"


class StubInvoker:
    """Answers every case with its corpus signature: the canonical step kinds, and the case's
    outcome and verdict. It always matches, so a drift under it is a harness or fixture defect."""

    name = "stub"

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        signature = self.corpus.get(case.trigger_type)
        if signature is None:  # load_cases refuses such a case; a caller that skipped it gets this
            raise InvokerError(f"no signature for {case.trigger_type!r} in {self.corpus.path}")
        return ReplayOutcome(signature.step_kinds, case.expect.outcome, case.expect.verdict)

    def close(self) -> None:
        return None


def outcome_of(flow: Mapping[str, Any]) -> ReplayOutcome:
    """A flow as ``GET /admin/v1/reasoning/flows/{id}`` returns it, as a replay outcome."""
    steps = sorted(flow.get("steps") or [], key=lambda step: step["position"])
    metrics = flow.get("outcome_metrics") or {}
    verdict = metrics.get("verdict") if isinstance(metrics, Mapping) else None
    return ReplayOutcome(
        step_kinds=tuple(str(step["kind"]) for step in steps),
        outcome=ABORTED if flow.get("flow_state") == "aborted" else str(flow.get("outcome_type") or ""),
        verdict=str(verdict) if verdict is not None else None,
        flow_id=str(flow.get("id") or ""),
        trace_id=str(flow.get("trace_id") or ""),
    )


class FlowReader:
    """Reads replayed flows from the admin API, waiting (up to ``timeout``) until they are closed."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.sleep = sleep
        self._client = client or httpx.Client(timeout=10.0)
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._retry = RetryPolicy("replay flow read", max_attempts=3, backoff_base=0.2, max_retry_wait=5.0)

    def check(self) -> str | None:
        """None when the server answers and takes the token for admin reads, else why not."""
        try:
            response = self._get(STATS_PATH)
        except InvokerError as exc:
            return str(exc)
        if response.status_code in (401, 403):
            return f"the server refused the token (HTTP {response.status_code}): it needs the reasoning.admin scope"
        if response.status_code != 200:
            return f"{STATS_PATH} answered HTTP {response.status_code}"
        return None

    def flow(self, flow_id: str) -> dict[str, Any]:
        """The closed flow with its steps; a 404 or an active flow is asked again until the deadline."""
        deadline = time.monotonic() + self.timeout
        while True:
            response = self._get(f"{FLOWS_PATH}/{flow_id}")
            if response.status_code == 200:
                flow: dict[str, Any] = response.json()
                if flow.get("flow_state") != "active":
                    return flow
                state = "still active"
            elif response.status_code == 404:
                state = "not on the server"
            else:
                raise InvokerError(f"GET {FLOWS_PATH}/{flow_id} answered HTTP {response.status_code}")
            if time.monotonic() >= deadline:
                raise InvokerError(f"flow {flow_id} was {state} after {self.timeout:g}s")
            self.sleep(POLL_INTERVAL)

    def flow_of_trace(self, trace_id: str, trigger_type: str) -> dict[str, Any]:
        """The one flow of ``trigger_type`` recorded under ``trace_id``, once it is closed."""
        deadline = time.monotonic() + self.timeout
        params = {"trace_id": trace_id, "trigger_type": trigger_type}
        while True:
            response = self._get(FLOWS_PATH, params)
            if response.status_code != 200:
                raise InvokerError(f"GET {FLOWS_PATH}?trace_id=… answered HTTP {response.status_code}")
            flows = response.json()
            if len(flows) > 1:
                raise InvokerError(f"{len(flows)} {trigger_type} flows under trace {trace_id}; a case records one")
            if flows and flows[0].get("flow_state") != "active":
                return self.flow(str(flows[0]["id"]))
            if time.monotonic() >= deadline:
                found = "no flow was recorded" if not flows else "its flow was still active"
                raise InvokerError(f"{found} under trace {trace_id} ({trigger_type}) after {self.timeout:g}s")
            self.sleep(POLL_INTERVAL)

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> httpx.Response:
        url = self.server + path
        try:
            return self._retry.send(lambda: self._client.get(url, params=params, headers=self._headers))
        except (RetriesExhausted, RetryWaitTooLong) as exc:
            raise InvokerError(f"GET {path} failed: {exc.failure}") from None

    def close(self) -> None:
        self._client.close()


def run_reference_agent(
    recorder: ReasoningFlowRecorder, case: ReplayCase, trace_id: str, model: OfflineModel | None = None
) -> str:
    """Run the SDK's reference agent of ``case.agent`` on the case's input; the flow's id.

    The agents give up without evidence (``abort_without_evidence``), so a question the model
    finds no source for records an aborted flow. A ``benchmark`` case's ``trigger_ref`` is
    ``benchmark/{run_id}/{case_id}``, as the pipeline records it.
    """
    from reasoning_flow_sdk import turn
    from reasoning_flow_sdk.agents import Correlator, Critic, OfflineModel, Researcher, run_benchmark_case

    model = model or OfflineModel()
    agents = {"researcher": Researcher, "critic": Critic, "correlator": Correlator}
    if case.agent == "benchmark":
        run_id, _, case_id = case.trigger_ref.removeprefix(BENCHMARK_PREFIX).partition("/")
        if not case.trigger_ref.startswith(BENCHMARK_PREFIX) or not run_id or not case_id or "/" in case_id:
            raise InvokerError("a benchmark case's trigger_ref is benchmark/{run_id}/{case_id}")
        with turn(trace_id):
            return run_benchmark_case(recorder, run_id, case_id, case.input, model=model).flow_id
    agent = agents.get(case.agent)
    if agent is None:
        raise InvokerError(f"the reference invoker has no agent {case.agent!r}")
    result = agent(recorder, model=model, abort_without_evidence=True).run(
        case.input, trigger_type=case.trigger_type, trigger_ref=case.trigger_ref, trace_id=trace_id
    )
    return result.flow_id


class ReferenceInvoker:
    """Runs the SDK's reference agents in this process, recording to ``server`` with ``token``
    (which needs ``reasoning.write`` to record and ``reasoning.admin`` to read back)."""

    name = "reference"

    def __init__(
        self,
        server: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        model: OfflineModel | None = None,
        reader: FlowReader | None = None,
    ) -> None:
        from reasoning_flow_sdk import ReasoningFlowRecorder

        self.timeout = timeout
        self.model = model
        self.reader = reader or FlowReader(server, token, timeout=timeout)
        # A spool of its own: what this run cannot deliver is dropped with it, not sent by a later one.
        self._spool = TemporaryDirectory(prefix="reasoning-replay-")
        self.recorder = ReasoningFlowRecorder(
            base_url=server, token=token, spool_dir=self._spool.name, enabled=True, flush_interval=0.05
        )

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        flow_id = run_reference_agent(self.recorder, case, uuid.uuid4().hex, self.model)
        if not self.recorder.flush(timeout=self.timeout):
            raise InvokerError(f"the recorder could not deliver flow {flow_id} within {self.timeout:g}s")
        if self.recorder.refused(flow_id):
            raise InvokerError(f"the server refused flow {flow_id} (does the token have reasoning.write?)")
        return outcome_of(self.reader.flow(flow_id))

    def close(self) -> None:
        self.recorder.close(timeout=1.0)
        self.reader.close()
        self._spool.cleanup()


class HttpInvoker:
    """POSTs each case (``ReplayCase.request``: the trigger, the input and a fresh ``trace_id``)
    to an agent service at ``url``, then reads the flow it recorded under that trace id."""

    name = "http"

    def __init__(
        self,
        url: str,
        server: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        client: httpx.Client | None = None,
        reader: FlowReader | None = None,
    ) -> None:
        self.url = url
        self._client = client or httpx.Client(timeout=timeout)
        self.reader = reader or FlowReader(server, token, timeout=timeout)

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        trace_id = uuid.uuid4().hex
        # Sent once: a retry could make the service record the case twice under one trace.
        try:
            response = self._client.post(self.url, json=case.request(trace_id))
        except httpx.HTTPError as exc:
            raise InvokerError(f"POST to the agent service failed: {type(exc).__name__}: {exc}") from None
        if not response.is_success:
            raise InvokerError(f"the agent service answered HTTP {response.status_code}")
        return outcome_of(self.reader.flow_of_trace(trace_id, case.trigger_type))

    def close(self) -> None:
        self._client.close()
        self.reader.close()
