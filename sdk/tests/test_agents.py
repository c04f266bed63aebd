"""The offline model and the reference agents, checked on the ingest bodies a fake server receives."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeIngest
from reasoning_flow_sdk import ReasoningFlowRecorder, extract_reasoning, turn
from reasoning_flow_sdk.agents import (
    CANONICAL,
    NO_EVIDENCE,
    SHAPES,
    Correlator,
    Critic,
    OfflineModel,
    Researcher,
    run_benchmark_case,
)

BEARER = "sdk-test-secret"
# A question as a clinician might type it: it names a patient, so it may go only into the
# encrypted inputs, never into a summary.
QUESTION = "Should Jane Roe (born 1961-04-02) stop warfarin before her dental extraction?"


def received_flows(ingest: FakeIngest) -> dict[str, dict[str, Any]]:
    """The flows the fake server stored, each put back together from its pieces (a flow may span
    batches)."""
    flows: dict[str, dict[str, Any]] = {}
    with ingest.lock:
        items = [item for body in ingest.bodies for item in body["flows"]]
    for item in items:
        flow = flows.setdefault(item["id"], {"steps": []})
        flow.update({name: value for name, value in item.items() if name != "steps"})
        flow["steps"].extend(item.get("steps", []))
    return flows


@pytest.fixture
def recorder(ingest: FakeIngest, spool_dir: Path) -> Iterator[ReasoningFlowRecorder]:
    made = ReasoningFlowRecorder(
        base_url=ingest.url, token=BEARER, spool_dir=spool_dir, enabled=True, flush_interval=0.01
    )
    yield made
    made.close(timeout=1)


def delivered(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> dict[str, dict[str, Any]]:
    assert recorder.flush(timeout=10), recorder.stats()
    return received_flows(ingest)


def kinds(flow: dict[str, Any]) -> list[str]:
    return [step["kind"] for step in flow["steps"]]


def assert_a_chain(flow: dict[str, Any]) -> None:
    """Each step's parent is the step before it."""
    steps = flow["steps"]
    assert "parent_step_id" not in steps[0]
    for previous, step in itertools.pairwise(steps):
        assert step["parent_step_id"] == previous["id"]


def assert_the_question_only_in_inputs(flow: dict[str, Any]) -> None:
    first, *rest = flow["steps"]
    assert first["inputs"] == {"question": QUESTION}
    assert first["pii_fields"] == ["question"]
    assert all("inputs" not in step for step in rest)
    without_inputs = {**flow, "steps": [{k: v for k, v in s.items() if k != "inputs"} for s in flow["steps"]]}
    assert "Jane Roe" not in json.dumps(without_inputs)
    assert all(QUESTION not in step["summary_text"] for step in flow["steps"])


def prompt_with(agent: str, verdict: str) -> str:
    """A prompt the default offline model answers with ``verdict`` (the model is deterministic)."""
    model = OfflineModel()
    return next(p for p in (f"{QUESTION} #{n}" for n in range(500)) if model.complete(agent, p).verdict == verdict)


# --- the offline model ------------------------------------------------------------------------------
def reasoning_place(response: dict[str, Any]) -> str:
    message = response["choices"][0]["message"]
    places = [
        place
        for place, present in (
            ("message.reasoning_content", "reasoning_content" in message),
            ("message.reasoning", "reasoning" in message),
            ("reasoning_content", "reasoning_content" in response),
        )
        if present
    ]
    assert len(places) == 1, response
    return places[0]


def test_the_offline_model_is_deterministic() -> None:
    first = OfflineModel(seed=7).complete("researcher", QUESTION)
    again = OfflineModel(seed=7).complete("researcher", QUESTION)
    assert first == again


def test_another_seed_gives_other_replies() -> None:
    prompts = [f"question {n}" for n in range(20)]
    one, two = OfflineModel(seed=1), OfflineModel(seed=2)
    assert any(one.complete("researcher", p) != two.complete("researcher", p) for p in prompts)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_puts_the_reasoning_where_documented(shape: str) -> None:
    reply = OfflineModel(shape=shape).complete("researcher", QUESTION)
    assert reasoning_place(reply.response) == shape
    answer, reasoning = extract_reasoning(reply.response, thinking=True)
    assert answer and answer.startswith(reply.verdict)
    assert reasoning and f"{reply.composite_k:.3f}" in reasoning
    assert reply.response["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0


def test_alternate_covers_all_three_shapes() -> None:
    model = OfflineModel(shape="alternate")
    places = {reasoning_place(model.complete("critic", f"claim {n}").response) for n in range(30)}
    assert places == set(SHAPES)


# --- the reference agents ----------------------------------------------------------------------------
def test_researcher_records_retrieval_llm_prompt_verdict(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    result = Researcher(recorder).run(QUESTION, trigger_ref="chat/42", session_id="session-1")

    flow = delivered(recorder, ingest)[result.flow_id]
    assert (flow["agent"], flow["trigger_type"], flow["trigger_ref"]) == ("researcher", "user_question", "chat/42")
    assert flow["session_id"] == "session-1"
    assert kinds(flow) == ["retrieval", "llm_prompt", "verdict"] == list(CANONICAL["researcher"][1])
    assert_a_chain(flow)
    close = flow["close"]
    assert (close["flow_state"], close["outcome_type"]) == ("completed", "claim_created")
    assert close["outcome_metrics"] == {"composite_k": result.composite_k, "evidence_hits": result.evidence_hits}


def test_the_llm_prompt_step_carries_the_reasoning_model_and_tokens(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    result = Researcher(recorder).run(QUESTION)

    llm = delivered(recorder, ingest)[result.flow_id]["steps"][1]
    assert llm["kind"] == "llm_prompt"
    assert llm["summary_text"] == "Model call to offline-reasoner-1"
    assert len(llm["reasoning_content"]) == result.reasoning_chars > 0
    assert llm["reasoning_content"] not in llm["summary_text"]
    assert llm["model"] == "offline-reasoner-1"
    assert llm["input_tokens"] > 0 and llm["output_tokens"] > 0 and llm["reasoning_tokens"] > 0
    assert llm["llm_call_log_ref"].startswith("chatcmpl-")


@pytest.mark.parametrize("verdict", ["promote", "reject"])
def test_critic_records_graph_walk_llm_prompt_verdict(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest, verdict: str
) -> None:
    question = prompt_with("critic", verdict)
    result = Critic(recorder).run(question, claim_id="claim-9")

    flow = delivered(recorder, ingest)[result.flow_id]
    assert (flow["agent"], flow["trigger_type"]) == ("critic", "claim_review")
    assert kinds(flow) == ["graph_walk", "llm_prompt", "verdict"]
    assert_a_chain(flow)
    assert all(step["memory_claim_ref"] == "claim-9" for step in flow["steps"])
    expected = {"verdict": verdict, "claim_id": "claim-9"}
    if verdict == "reject":
        expected["rejection_reason"] = "insufficient_support"
    assert flow["close"]["outcome_type"] == "claim_created"
    assert flow["close"]["outcome_metrics"] == expected


def test_correlator_records_aggregation_llm_prompt_verdict(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    result = Correlator(recorder).run(QUESTION)

    flow = delivered(recorder, ingest)[result.flow_id]
    assert (flow["agent"], flow["trigger_type"]) == ("correlator", "correlation_request")
    assert kinds(flow) == ["aggregation", "llm_prompt", "verdict"]
    assert_a_chain(flow)
    assert flow["close"]["outcome_type"] == "recommendation_delivered"
    assert flow["close"]["outcome_metrics"] == {"composite_k": result.composite_k}


def test_benchmark_case_records_the_five_step_pipeline(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    result = run_benchmark_case(recorder, "run-3", "case-17", QUESTION)

    flow = delivered(recorder, ingest)[result.flow_id]
    assert (flow["agent"], flow["trigger_ref"]) == ("benchmark", "benchmark/run-3/case-17")
    assert kinds(flow) == ["retrieval", "evidence_assembly", "summary", "provenance_check", "verdict"]
    assert_a_chain(flow)
    by_kind = {step["kind"]: step for step in flow["steps"]}
    assert by_kind["retrieval"]["outputs"] == {"hits": result.evidence_hits}
    assert by_kind["verdict"]["outputs"] == {"verdict": result.verdict}
    assert len(by_kind["summary"]["reasoning_content"]) == result.reasoning_chars > 0
    assert flow["close"]["outcome_type"] == "recommendation_delivered"
    assert flow["close"]["outcome_metrics"] == {
        "composite_k": result.composite_k,
        "evidence_hits": result.evidence_hits,
    }


def test_no_agent_puts_the_question_outside_the_encrypted_inputs(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    ids = [agent(recorder).run(QUESTION).flow_id for agent in (Researcher, Critic, Correlator)]
    ids.append(run_benchmark_case(recorder, "run-1", "case-1", QUESTION).flow_id)

    flows = delivered(recorder, ingest)
    assert sorted(flows) == sorted(ids)
    for flow_id in ids:
        assert_the_question_only_in_inputs(flows[flow_id])


def test_agents_in_one_turn_share_its_trace_id(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    with turn() as turn_id:
        researched = Researcher(recorder).run(QUESTION)
        criticised = Critic(recorder).run(QUESTION)
    alone = Correlator(recorder).run(QUESTION)

    flows = delivered(recorder, ingest)
    assert flows[researched.flow_id]["trace_id"] == flows[criticised.flow_id]["trace_id"] == turn_id
    assert flows[alone.flow_id]["trace_id"] != turn_id


# --- giving up without evidence ------------------------------------------------------------------------
def prompt_without_evidence(agent: str) -> str:
    """A prompt for which the default offline model finds no supporting source."""
    model = OfflineModel()
    return next(p for p in (f"{QUESTION} #{n}" for n in range(500)) if model.complete(agent, p).evidence_hits == 0)


def test_an_agent_without_evidence_aborts_before_its_verdict_when_asked_to(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    question = prompt_without_evidence("researcher")
    result = Researcher(recorder, abort_without_evidence=True).run(question, trace_id="a" * 32)

    flow = delivered(recorder, ingest)[result.flow_id]
    assert result.aborted and result.evidence_hits == 0
    assert kinds(flow) == ["retrieval", "llm_prompt"]  # the canonical steps but the verdict
    assert_a_chain(flow)
    assert flow["trace_id"] == "a" * 32
    assert flow["close"]["flow_state"] == "aborted"
    assert flow["close"]["abort_reason"] == NO_EVIDENCE
    assert "outcome_type" not in flow["close"]


def test_an_agent_with_evidence_completes_even_when_it_may_give_up(
    recorder: ReasoningFlowRecorder, ingest: FakeIngest
) -> None:
    model = OfflineModel()
    prompts = (f"{QUESTION} #{n}" for n in range(500))
    question = next(
        p
        for p in prompts
        if model.complete("critic", p).verdict == "reject" and model.complete("critic", p).evidence_hits
    )

    result = Critic(recorder, abort_without_evidence=True).run(question)

    flow = delivered(recorder, ingest)[result.flow_id]
    assert not result.aborted
    assert kinds(flow) == ["graph_walk", "llm_prompt", "verdict"]
    assert flow["close"]["flow_state"] == "completed"
    assert flow["close"]["outcome_metrics"]["verdict"] == "reject"  # weak, but with evidence: a verdict


def test_by_default_an_agent_without_evidence_completes(recorder: ReasoningFlowRecorder, ingest: FakeIngest) -> None:
    result = Researcher(recorder).run(prompt_without_evidence("researcher"))

    flow = delivered(recorder, ingest)[result.flow_id]
    assert not result.aborted
    assert kinds(flow) == ["retrieval", "llm_prompt", "verdict"]
    assert (flow["close"]["flow_state"], flow["close"]["outcome_type"]) == ("completed", "claim_created")
    assert flow["close"]["outcome_metrics"]["evidence_hits"] == 0
