"""Reference agents and the benchmark pipeline, each recording a flow per run.

The three agents of seed 000 (phase 1c) with their canonical step sequences:

| agent | trigger | steps |
|---|---|---|
| ``Researcher`` | ``user_question`` | retrieval → llm_prompt → verdict |
| ``Critic`` | ``claim_review`` | graph_walk → llm_prompt → verdict |
| ``Correlator`` | ``correlation_request`` | aggregation → llm_prompt → verdict |

and the benchmark pipeline (one ``benchmark_case`` flow per case, ``trigger_ref = benchmark/{run_id}/{case_id}``:
retrieval → evidence_assembly → summary → provenance_check → verdict).

Their model is ``OfflineModel``: a deterministic stand-in (seeded by the seed, the agent and the
question; no network, no weights) that answers in the OpenAI chat-completion shape with the
reasoning in either provider's place, and produces the numbers the research loop reads
(``composite_k``, ``evidence_hits``, ``verdict``). Summaries describe the step, never the
question: the question may hold PHI, so it goes only into the encrypted ``inputs`` field.

An agent made with ``abort_without_evidence=True`` gives up when the model finds no supporting
source: it records its steps up to the verdict and closes the flow ``aborted`` with the reason
``no_evidence`` (``NO_EVIDENCE``). Off by default: a weak result is normally completed, and the
server's research producer turns it into a backlog request. Replays use it to exercise aborts.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reasoning_flow_sdk._log import logger
from reasoning_flow_sdk.reasoning import extract_reasoning
from reasoning_flow_sdk.recorder import BaseRecorder

MODEL_NAME = "offline-reasoner-1"
NO_EVIDENCE = "no_evidence"  # the abort reason of an agent that gave up without evidence
SHAPES = ("message.reasoning_content", "message.reasoning", "reasoning_content")

# agent → (trigger type, canonical kinds, the summary of each kind)
CANONICAL: dict[str, tuple[str, tuple[str, ...]]] = {
    "researcher": ("user_question", ("retrieval", "llm_prompt", "verdict")),
    "critic": ("claim_review", ("graph_walk", "llm_prompt", "verdict")),
    "correlator": ("correlation_request", ("aggregation", "llm_prompt", "verdict")),
    "benchmark": ("benchmark_case", ("retrieval", "evidence_assembly", "summary", "provenance_check", "verdict")),
}
SUMMARIES = {
    "retrieval": "Retrieved candidate evidence for the question",
    "graph_walk": "Walked the knowledge graph around the claim",
    "aggregation": "Aggregated the related findings",
    "llm_prompt": "Asked the model to weigh the evidence",
    "evidence_assembly": "Checked that the evidence is sufficient",
    "summary": "Synthesized a summary of the evidence",
    "provenance_check": "Checked every statement against its source",
    "verdict": "Reached a verdict",
}


@dataclass(frozen=True)
class ModelReply:
    response: dict[str, Any]  # an OpenAI-style chat completion
    composite_k: float
    evidence_hits: int
    verdict: str


class OfflineModel:
    """Deterministic answers: the same (seed, agent, prompt) always gives the same reply.

    ``shape`` picks where the reasoning goes: ``message.reasoning_content`` (DashScope/DeepSeek),
    ``message.reasoning`` (OpenRouter), ``reasoning_content`` (top level, older DashScope), or
    ``alternate`` (by the prompt's hash, so a run exercises all of them).
    """

    def __init__(self, seed: int = 0, shape: str = "alternate", weak_share: float = 0.3) -> None:
        self.seed = seed
        self.shape = shape
        self.weak_share = weak_share

    def _rng(self, agent: str, prompt: str) -> random.Random:
        digest = hashlib.sha256(f"{self.seed}\x00{agent}\x00{prompt}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def complete(self, agent: str, prompt: str) -> ModelReply:
        rng = self._rng(agent, prompt)
        weak = rng.random() < self.weak_share
        hits = 0 if weak and rng.random() < 0.3 else rng.randint(1 if weak else 3, 4 if weak else 12)
        composite = round(rng.uniform(0.2, 0.59) if weak else rng.uniform(0.62, 0.99), 3)
        verdict = {"critic": "reject" if weak else "promote"}.get(agent, "weak" if weak else "supported")
        answer = f"{verdict}: {hits} supporting sources, composite {composite:.2f}"
        reasoning = (
            f"Step 1: gather sources ({hits} found). Step 2: weigh agreement between them. "
            f"Step 3: composite evidence strength {composite:.3f}, so the verdict is {verdict}."
        )
        shape = self.shape if self.shape != "alternate" else SHAPES[rng.randrange(len(SHAPES))]
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        response: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.UUID(int=rng.getrandbits(128)).hex[:24]}",
            "object": "chat.completion",
            "model": MODEL_NAME,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": 40 + len(prompt) // 4,
                "completion_tokens": 20 + len(reasoning) // 4,
                "completion_tokens_details": {"reasoning_tokens": len(reasoning) // 4},
            },
        }
        if shape == "message.reasoning_content":
            message["reasoning_content"] = reasoning
        elif shape == "message.reasoning":
            message["reasoning"] = reasoning
        else:
            response["reasoning_content"] = reasoning
        return ModelReply(response, composite, hits, verdict)


@dataclass(frozen=True)
class AgentResult:
    flow_id: str
    agent: str
    verdict: str
    composite_k: float
    evidence_hits: int
    answer: str | None
    reasoning_chars: int
    aborted: bool = False


def emit_agent_flow(
    recorder: BaseRecorder,
    agent: str,
    *,
    steps: Sequence[Mapping[str, Any]] | None = None,
    trigger_type: str | None = None,
    trigger_ref: str = "",
    outcome_type: str = "claim_created",
    outcome_metrics: Mapping[str, Any] | None = None,
    confidence: float | None = None,
    llm_response: Any = None,
    llm_call_log_ref: str | None = None,
    memory_claim_ref: str | None = None,
    inputs: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    trace_id: str | None = None,
    dispatched_from_backlog: bool | None = None,
    flow_id: str | None = None,
    abort_reason: str | None = None,
) -> str:
    """Record one run of ``agent`` as a flow, fire-and-forget; returns the flow's id at once.

    ``steps``: each a mapping of step fields (``kind``, ``summary_text``, …); by default the
    agent's canonical sequence with content-free summaries. The ``llm_prompt`` step carries
    ``llm_response`` (its reasoning, model and tokens), the first step ``inputs``, and every step
    the back-refs. ``abort_reason`` (a label): close the flow aborted with it after the steps
    instead of completing it. Never raises.
    """
    fid = flow_id or str(uuid.uuid4())
    try:
        default_trigger, kinds = CANONICAL.get(agent, ("agent_run", ("llm_prompt", "verdict")))
        sequence = list(steps) if steps is not None else [{"kind": kind} for kind in kinds]
        refs = {"llm_call_log_ref": llm_call_log_ref, "memory_claim_ref": memory_claim_ref}
        flow = recorder.flow(
            trigger_type or default_trigger,
            trigger_ref,
            agent=agent,
            session_id=session_id,
            trace_id=trace_id,
            dispatched_from_backlog=dispatched_from_backlog,
            flow_id=fid,
        )
        previous = None
        for index, given in enumerate(sequence):
            fields = {**{k: v for k, v in refs.items() if v}, **dict(given)}
            kind = fields.pop("kind")
            fields.setdefault("confidence", confidence)
            if index == 0 and inputs:
                fields.setdefault("inputs", dict(inputs))
                fields.setdefault("pii_fields", sorted(inputs))
            fields.setdefault("parent", previous)
            if kind == "llm_prompt" and llm_response is not None and "summary_text" not in fields:
                previous = flow.llm_step(llm_response, thinking=True, **fields)
            else:
                summary = fields.pop("summary_text", None) or SUMMARIES.get(kind, f"Ran the {kind} step")
                previous = flow.step(kind, summary, **fields)
        if abort_reason:
            flow.abort(abort_reason)
        else:
            flow.complete(outcome_type, outcome_metrics=outcome_metrics)
    except Exception:
        logger.exception("could not emit the %s flow", agent)
    return fid


@dataclass
class _Agent:
    recorder: BaseRecorder
    model: OfflineModel = field(default_factory=OfflineModel)
    abort_without_evidence: bool = False  # give up (abort, NO_EVIDENCE) when the model finds no source
    name = "agent"
    outcome_type = "claim_created"

    def run(
        self,
        question: str,
        *,
        trigger_type: str | None = None,
        trigger_ref: str = "",
        session_id: str | None = None,
        trace_id: str | None = None,
        dispatched_from_backlog: bool = False,
        claim_id: str | None = None,
    ) -> AgentResult:
        """Answer ``question`` with the offline model and record the run as one flow."""
        reply = self.model.complete(self.name, question)
        answer, reasoning = extract_reasoning(reply.response, thinking=True)
        confidence = round(min(0.99, 0.5 + reply.composite_k / 2), 3)
        aborted = self.abort_without_evidence and reply.evidence_hits == 0
        # Giving up: every canonical step but the verdict, then the abort.
        steps = [{"kind": kind} for kind in CANONICAL[self.name][1][:-1]] if aborted else None
        flow_id = emit_agent_flow(
            self.recorder,
            self.name,
            steps=steps,
            abort_reason=NO_EVIDENCE if aborted else None,
            trigger_type=trigger_type,
            trigger_ref=trigger_ref,
            outcome_type=self.outcome_type,
            outcome_metrics=self.metrics(reply, claim_id),
            confidence=confidence,
            llm_response=reply.response,
            llm_call_log_ref=reply.response["id"],
            memory_claim_ref=claim_id,
            inputs={"question": question},
            session_id=session_id,
            trace_id=trace_id,
            dispatched_from_backlog=dispatched_from_backlog or None,
        )
        return AgentResult(
            flow_id,
            self.name,
            reply.verdict,
            reply.composite_k,
            reply.evidence_hits,
            answer,
            len(reasoning or ""),
            aborted=aborted,
        )

    def metrics(self, reply: ModelReply, claim_id: str | None) -> dict[str, Any]:
        return {"composite_k": reply.composite_k, "evidence_hits": reply.evidence_hits}


class Researcher(_Agent):
    """Researches a question; a weak result (``composite_k`` < 0.6, or no hits) is what the
    server's research producer turns into a backlog request."""

    name = "researcher"


class Critic(_Agent):
    """Judges a claim: ``promote`` or ``reject`` (a rejected claim joins the review queue)."""

    name = "critic"

    def metrics(self, reply: ModelReply, claim_id: str | None) -> dict[str, Any]:
        metrics: dict[str, Any] = {"verdict": reply.verdict}
        if claim_id:
            metrics["claim_id"] = claim_id
        if reply.verdict == "reject":
            metrics["rejection_reason"] = "insufficient_support"
        return metrics


class Correlator(_Agent):
    """Correlates findings into a recommendation."""

    name = "correlator"
    outcome_type = "recommendation_delivered"

    def metrics(self, reply: ModelReply, claim_id: str | None) -> dict[str, Any]:
        return {"composite_k": reply.composite_k}


def run_benchmark_case(
    recorder: BaseRecorder,
    run_id: str,
    case_id: str,
    question: str,
    *,
    model: OfflineModel | None = None,
    session_id: str | None = None,
) -> AgentResult:
    """One benchmark case as one flow: retrieval → evidence_assembly → summary →
    provenance_check → verdict, ``trigger_ref = benchmark/{run_id}/{case_id}``."""
    reply = (model or OfflineModel()).complete("benchmark", question)
    answer, reasoning = extract_reasoning(reply.response, thinking=True)
    confidence = round(min(0.99, 0.5 + reply.composite_k / 2), 3)
    steps: list[dict[str, Any]] = [
        {"kind": "retrieval", "outputs": {"hits": reply.evidence_hits}},
        {"kind": "evidence_assembly", "outputs": {"sufficient": reply.evidence_hits >= 3}},
        {"kind": "summary", "summary_text": SUMMARIES["summary"], "reasoning_content": reasoning or ""},
        {"kind": "provenance_check", "outputs": {"unsupported_statements": 0 if reply.composite_k > 0.6 else 1}},
        {"kind": "verdict", "outputs": {"verdict": reply.verdict}},
    ]
    flow_id = emit_agent_flow(
        recorder,
        "benchmark",
        steps=steps,
        trigger_ref=f"benchmark/{run_id}/{case_id}",
        outcome_type="recommendation_delivered",
        outcome_metrics={"composite_k": reply.composite_k, "evidence_hits": reply.evidence_hits},
        confidence=confidence,
        llm_call_log_ref=reply.response["id"],
        inputs={"question": question},
        session_id=session_id,
    )
    return AgentResult(
        flow_id, "benchmark", reply.verdict, reply.composite_k, reply.evidence_hits, answer, len(reasoning or "")
    )


__all__ = [
    "CANONICAL",
    "NO_EVIDENCE",
    "AgentResult",
    "Correlator",
    "Critic",
    "ModelReply",
    "OfflineModel",
    "Researcher",
    "emit_agent_flow",
    "run_benchmark_case",
]
