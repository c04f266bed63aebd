"""The golden-signature corpus: it loads, it agrees with the SDK's reference agents, and each
schema error names the file and the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from reasoning_flow_sdk.agents import CANONICAL, Correlator, Critic, Researcher

from reasoning.evaluation import InputError
from reasoning.evaluation.signatures import ABORTED, DEFAULT_CORPUS, load_corpus


def test_the_default_corpus_loads() -> None:
    corpus = load_corpus()
    assert corpus.path == DEFAULT_CORPUS
    assert sorted(corpus.signatures) == ["benchmark_case", "claim_review", "correlation_request", "user_question"]
    user_question = corpus.get("user_question")
    assert user_question is not None and ABORTED in user_question.allowed_outcomes
    assert corpus.get("agent_run") is None


def test_every_signature_is_a_reference_agents_canonical_sequence() -> None:
    # CANONICAL: agent → (trigger type, kinds). Both directions, so neither side can gain a trigger alone.
    corpus = load_corpus()
    by_trigger = {trigger: (agent, kinds) for agent, (trigger, kinds) in CANONICAL.items()}
    assert sorted(by_trigger) == sorted(corpus.signatures)
    for trigger, signature in corpus.signatures.items():
        assert (signature.agent, signature.step_kinds) == by_trigger[trigger], trigger


@pytest.mark.parametrize("agent", [Researcher, Critic, Correlator])
def test_each_reference_agents_outcome_is_allowed(agent: Any) -> None:
    trigger, _ = CANONICAL[agent.name]
    signature = load_corpus().get(trigger)
    assert signature is not None
    assert agent.outcome_type in signature.allowed_outcomes


def test_the_benchmark_outcome_is_allowed() -> None:
    # run_benchmark_case completes every case as recommendation_delivered.
    signature = load_corpus().get("benchmark_case")
    assert signature is not None and signature.allowed_outcomes == {"recommendation_delivered"}


GOOD_ENTRY = {"agent": "critic", "step_kinds": ["graph_walk", "verdict"], "allowed_outcomes": ["claim_created"]}
TWICE = f'{{"version": 1, "signatures": {{"a": {json.dumps(GOOD_ENTRY)}, "a": {json.dumps(GOOD_ENTRY)}}}}}'


def _corpus(**entry_changes: Any) -> dict[str, Any]:
    entry = {**GOOD_ENTRY, **entry_changes}
    return {"version": 1, "signatures": {"claim_review": {k: v for k, v in entry.items() if v is not None}}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "the corpus is not valid JSON"),
        ("[]", "the corpus must be a JSON object"),
        ({**_corpus(), "version": 2}, "version: expected 1, got 2"),
        ({"signatures": _corpus()["signatures"]}, "version: missing"),
        ({**_corpus(), "extra": 1}, "unknown key 'extra'"),
        ({"version": 1, "signatures": {}}, "signatures: expected a non-empty object of trigger types"),
        (_corpus(step_kinds=None), "signatures.claim_review.step_kinds: missing"),
        (_corpus(agent=None), "signatures.claim_review.agent: missing"),
        (_corpus(allowed_outcomes=None), "signatures.claim_review.allowed_outcomes: missing"),
        (_corpus(step_kind=["verdict"]), "signatures.claim_review: unknown key 'step_kind'"),
        (_corpus(step_kinds=["graph_walk", "walk the graph"]), "signatures.claim_review.step_kinds[1]: not a label"),
        (_corpus(step_kinds=[]), "signatures.claim_review.step_kinds: expected a non-empty list of step kinds"),
        (_corpus(allowed_outcomes=["claim_created", 3]), "signatures.claim_review.allowed_outcomes[1]: not a label"),
        (_corpus(agent=""), "signatures.claim_review.agent: expected an agent label"),
        (_corpus(description=["no"]), "signatures.claim_review.description: expected a string"),
        (
            {"version": 1, "signatures": {"claim review": GOOD_ENTRY}},
            "signatures.claim review: the trigger type is not",
        ),
        (TWICE, "duplicate key 'a'"),
    ],
)
def test_a_schema_error_names_the_file_and_the_key(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "corpus.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    with pytest.raises(InputError) as raised:
        load_corpus(path)
    assert str(raised.value).startswith(f"{path}: {message}")


def test_a_missing_corpus_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"absent\.json: cannot read the corpus: No such file or directory"):
        load_corpus(tmp_path / "absent.json")


def test_a_corpus_with_a_description_loads(tmp_path: Path) -> None:
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({**_corpus(description="Critic, short"), "description": "A small corpus"}))
    signature = load_corpus(path).get("claim_review")
    assert signature is not None and signature.step_kinds == ("graph_walk", "verdict")
