"""The ``reference`` and ``http`` replay invokers against a real server (gunicorn on the test
database), with the SDK's agents recording to it; ``http`` through a loopback agent service.

The data must be committed for the server process to see it, hence ``transactional_db``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from reasoning_flow_sdk import ReasoningFlowRecorder, turn
from reasoning_flow_sdk.agents import (
    NO_EVIDENCE,
    Correlator,
    Critic,
    OfflineModel,
    Researcher,
    emit_agent_flow,
    run_benchmark_case,
)

from reasoning.evaluation import EXIT_FAILED, EXIT_USAGE
from reasoning.evaluation.invokers import FlowReader, HttpInvoker, ReferenceInvoker
from reasoning.evaluation.replay import ReplayCase, ReplayReport, Status, load_cases, run_replay
from reasoning.evaluation.signatures import load_corpus
from reasoning.models import ReasoningFlow
from tests.fakes import FakeServer, Received, Reply, serve_fake
from tests.servers import Gunicorn, free_port

CASES = load_cases(None, load_corpus())
BY_ID = {case.id: case for case in CASES}
AGENTS = {"researcher": Researcher, "critic": Critic, "correlator": Correlator}


@pytest.fixture
def server(transactional_db: None) -> Iterator[Gunicorn]:
    with Gunicorn() as gunicorn:
        yield gunicorn


@pytest.fixture
def replay_token(make_token: Callable[..., str]) -> str:
    """The harness's token: records (reference) and reads flows back (reasoning.admin)."""
    return make_token("reasoning.write", "reasoning.admin")


@pytest.fixture
def agent_token(make_token: Callable[..., str]) -> str:
    """The agent service's token: it may only record."""
    return make_token("reasoning.write")


def statuses(report: ReplayReport) -> dict[str, Status]:
    return {result.case_id: result.status for result in report.results}


def reasoning_of(case: ReplayCase, model: OfflineModel) -> str:
    """The chain-of-thought the offline model writes for ``case``."""
    reply = model.complete(case.agent, case.input)
    message = reply.response["choices"][0]["message"]
    text: str = message.get("reasoning_content") or message.get("reasoning") or reply.response["reasoning_content"]
    return text


# --- reference ------------------------------------------------------------------------------------
def test_the_reference_agents_replay_every_fixture_case_as_matched(server: Gunicorn, replay_token: str) -> None:
    invoker = ReferenceInvoker(server.url, replay_token, timeout=20)
    try:
        report = run_replay(CASES, invoker)
    finally:
        invoker.close()

    assert {result.case_id: result.error for result in report.results if result.error} == {}
    assert statuses(report) == dict.fromkeys(BY_ID, Status.MATCHED)
    # What the harness read back is what the server holds.
    for result in report.results:
        assert result.actual is not None
        flow = ReasoningFlow.objects.get(pk=result.actual.flow_id)
        assert (flow.trigger_type, flow.trace_id) == (BY_ID[result.case_id].trigger_type, result.actual.trace_id)
        assert tuple(flow.steps.order_by("position").values_list("kind", flat=True)) == result.actual.step_kinds
    gave_up = next(result.actual for result in report.results if result.case_id == "researcher-gives-up")
    assert gave_up is not None and gave_up.step_kinds == ("retrieval", "llm_prompt")
    aborted = ReasoningFlow.objects.get(pk=gave_up.flow_id)
    assert (aborted.flow_state, aborted.abort_reason) == (ReasoningFlow.State.ABORTED, NO_EVIDENCE)
    rejected = ReasoningFlow.objects.get(trigger_ref="replay/critic-rejects")
    assert rejected.outcome_metrics["verdict"] == "reject"
    assert ReasoningFlow.objects.get(trigger_type="benchmark_case").trigger_ref == "benchmark/replay/benchmark-case"


def test_a_model_that_changed_its_mind_is_outcome_drift(server: Gunicorn, replay_token: str) -> None:
    # A seed under which the rejected claim is promoted and the unanswerable question finds sources.
    seed = next(
        seed
        for seed in range(1, 500)
        if OfflineModel(seed=seed).complete("critic", BY_ID["critic-rejects"].input).verdict == "promote"
        and OfflineModel(seed=seed).complete("researcher", BY_ID["researcher-gives-up"].input).evidence_hits > 0
    )
    cases = [BY_ID["critic-rejects"], BY_ID["researcher-gives-up"]]
    invoker = ReferenceInvoker(server.url, replay_token, timeout=20, model=OfflineModel(seed=seed))
    try:
        report = run_replay(cases, invoker, threshold=0.5)
    finally:
        invoker.close()

    assert statuses(report) == {"critic-rejects": Status.OUTCOME_DRIFT, "researcher-gives-up": Status.OUTCOME_DRIFT}
    rejected, gave_up = (result.actual for result in report.results)
    assert rejected is not None and (rejected.outcome, rejected.verdict) == ("claim_created", "promote")
    assert gave_up is not None and gave_up.outcome == "claim_created"
    assert (report.drift_share, report.passed) == (1.0, False)


def test_the_command_replays_with_the_reference_agents(server: Gunicorn, replay_token: str) -> None:
    out = StringIO()
    call_command(
        "reasoning_replay", "--invoker", "reference", "--server", server.url, "--token", replay_token, "--json",
        stdout=out,
    )  # fmt: skip

    report = json.loads(out.getvalue())
    assert (report["invoker"], report["total"], report["drifting"], report["passed"]) == ("reference", 6, 0, True)
    assert all(result["actual"]["flow_id"] for result in report["results"])


def test_a_token_without_the_admin_scope_is_a_usage_error(server: Gunicorn, agent_token: str) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("reasoning_replay", "--invoker", "reference", "--server", server.url, "--token", agent_token)

    assert caught.value.returncode == EXIT_USAGE
    assert "the server refused the token (HTTP 403): it needs the reasoning.admin scope" in str(caught.value)
    assert not ReasoningFlow.objects.exists()  # nothing was replayed


def test_a_server_nobody_listens_on_is_a_usage_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CommandError) as caught:
        call_command("reasoning_replay", "--invoker", "reference", "--server", url, "--token", "rft_any")

    assert caught.value.returncode == EXIT_USAGE
    assert "--server/--token: GET /admin/v1/reasoning/stats failed: ConnectError" in str(caught.value)


# --- http -----------------------------------------------------------------------------------------
class AgentService(FakeServer):
    """An agent service as a team would run one: each POSTed case runs an SDK agent, which
    records through the SDK to the server; it answers 202 at once (the recorder sends later)."""

    recorder: ReasoningFlowRecorder | None = None
    drifted: bool = False  # record the researcher's steps without its model call

    def run(self, received: Received) -> Reply:
        body = received.json
        assert self.recorder is not None
        if body["agent"] == "benchmark":
            _, run_id, case_id = body["trigger_ref"].split("/")
            with turn(body["trace_id"]):
                flow_id = run_benchmark_case(self.recorder, run_id, case_id, body["input"]).flow_id
        elif self.drifted and body["agent"] == "researcher":
            steps = [{"kind": "retrieval"}, {"kind": "verdict"}]
            flow_id = emit_agent_flow(
                self.recorder, "researcher", steps=steps, trigger_ref=body["trigger_ref"], trace_id=body["trace_id"]
            )
        else:
            agent = AGENTS[body["agent"]](self.recorder, abort_without_evidence=True)
            flow_id = agent.run(
                body["input"],
                trigger_type=body["trigger_type"],
                trigger_ref=body["trigger_ref"],
                trace_id=body["trace_id"],
            ).flow_id
        return Reply(202, {"flow_id": flow_id})


@pytest.fixture
def service(server: Gunicorn, agent_token: str, tmp_path: Path) -> Iterator[AgentService]:
    state = AgentService()
    state.fallback = state.run
    state.recorder = ReasoningFlowRecorder(
        base_url=server.url, token=agent_token, spool_dir=tmp_path / "spool", enabled=True, flush_interval=0.05
    )
    try:
        yield from serve_fake(state, "/replay")
    finally:
        state.recorder.close(timeout=1)


def http_replay(service: AgentService, server: Gunicorn, token: str, cases: list[ReplayCase]) -> ReplayReport:
    invoker = HttpInvoker(service.url, server.url, token, timeout=20)
    try:
        return run_replay(cases, invoker)
    finally:
        invoker.close()


def test_an_agent_service_replays_every_fixture_case_as_matched(
    service: AgentService, server: Gunicorn, replay_token: str
) -> None:
    report = http_replay(service, server, replay_token, CASES)

    assert service.errors == []
    assert {result.case_id: result.error for result in report.results if result.error} == {}
    assert statuses(report) == dict.fromkeys(BY_ID, Status.MATCHED)
    # One POST per case, under a trace id of its own, which the recorded flow carries.
    bodies = [received.json for received in service.received]
    assert [body["case_id"] for body in bodies] == [case.id for case in CASES]
    assert len({body["trace_id"] for body in bodies}) == len(CASES)
    for body, result in zip(bodies, report.results, strict=True):
        assert result.actual is not None and result.actual.trace_id == body["trace_id"]
        assert ReasoningFlow.objects.get(pk=result.actual.flow_id).trace_id == body["trace_id"]


def test_what_the_http_invoker_posts_holds_no_reasoning(
    service: AgentService, server: Gunicorn, replay_token: str
) -> None:
    http_replay(service, server, replay_token, CASES)

    model = OfflineModel()
    assert len(service.received) == len(CASES)
    for received, case in zip(service.received, CASES, strict=True):
        assert received.method == "POST" and received.path == "/replay"
        assert set(received.json) == {"case_id", "trigger_type", "trigger_ref", "agent", "input", "trace_id"}
        assert b"reasoning_content" not in received.body
        assert reasoning_of(case, model).encode() not in received.body
        assert received.json["input"] == case.input


def test_an_agent_that_skips_a_step_is_sequence_drift(
    service: AgentService, server: Gunicorn, replay_token: str
) -> None:
    service.drifted = True

    report = http_replay(service, server, replay_token, [BY_ID["researcher-answers"], BY_ID["critic-promotes"]])

    assert statuses(report) == {"researcher-answers": Status.SEQUENCE_DRIFT, "critic-promotes": Status.MATCHED}
    drifted = report.results[0]
    assert drifted.actual is not None and drifted.actual.step_kinds == ("retrieval", "verdict")
    assert drifted.expected.step_kinds == ("retrieval", "llm_prompt", "verdict")


def test_a_failing_agent_service_is_an_error_and_the_command_exits_1(
    service: AgentService, server: Gunicorn, replay_token: str
) -> None:
    service.fallback = Reply(503, {"detail": "down"})
    args = ["--invoker", "http", "--url", service.url, "--server", server.url, "--token", replay_token]

    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command("reasoning_replay", *args, stdout=out)

    assert caught.value.returncode == EXIT_FAILED
    assert str(caught.value) == "drift 100.0% is over the threshold 0.0%"
    lines = out.getvalue().splitlines()
    assert lines[0] == "benchmark-case  benchmark_case  error: the agent service answered HTTP 503"
    assert lines[-1] == "http: 6 cases, 6 drifting (100.0%), threshold 0.0%: FAILED"
    # At a threshold of 1 the same run passes.
    call_command("reasoning_replay", *args, "--threshold", "1", stdout=StringIO())


def test_a_service_that_records_nothing_is_an_error_after_the_timeout(server: Gunicorn, replay_token: str) -> None:
    quiet = FakeServer(fallback=Reply(202, {}))
    for running in serve_fake(quiet, "/replay"):
        reader = FlowReader(server.url, replay_token, timeout=0.3)
        invoker = HttpInvoker(running.url, server.url, replay_token, reader=reader)
        try:
            report = run_replay([BY_ID["critic-promotes"]], invoker)
        finally:
            invoker.close()

    [result] = report.results
    trace_id = quiet.received[0].json["trace_id"]
    assert result.status is Status.ERROR
    assert result.error == f"no flow was recorded under trace {trace_id} (claim_review) after 0.3s"
