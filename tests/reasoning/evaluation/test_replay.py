"""The replay harness without a server: the case corpus, its loader, the comparison, the stub
invoker and ``manage.py reasoning_replay``'s flags (the live invokers: test_replay_invokers.py)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from reasoning_flow_sdk.agents import OfflineModel

from reasoning.evaluation import EXIT_USAGE, InputError
from reasoning.evaluation.invokers import StubInvoker
from reasoning.evaluation.replay import (
    DEFAULT_CASES,
    Expectation,
    InvokerError,
    ReplayCase,
    ReplayOutcome,
    Status,
    compare,
    load_cases,
    run_replay,
)
from reasoning.evaluation.signatures import ABORTED, DEFAULT_CORPUS, load_corpus

CORPUS = load_corpus()
RESEARCHER_KINDS = ("retrieval", "llm_prompt", "verdict")


def a_case(**changes: Any) -> dict[str, Any]:
    case: dict[str, Any] = {
        "version": 1,
        "id": "a-case",
        "trigger_type": "user_question",
        "trigger_ref": "replay/a-case",
        "agent": "researcher",
        "input": "Does vitamin D reduce fracture risk in adults?",
        "expect": {"outcome": "claim_created"},
    }
    case.update(changes)
    return {key: value for key, value in case.items() if value is not None}


def write_cases(directory: Path, *cases: dict[str, Any]) -> Path:
    directory.mkdir(exist_ok=True)
    for case in cases:
        (directory / f"{case.get('id', 'a-case')}.json").write_text(json.dumps(case), encoding="utf-8")
    return directory


def load_error(tmp_path: Path, case: dict[str, Any]) -> str:
    """The error of loading ``case`` from ``cases/a-case.json``."""
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "a-case.json").write_text(json.dumps(case), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_cases(directory, CORPUS)
    return str(caught.value)


# --- the fixture corpus ---------------------------------------------------------------------------
def test_every_fixture_case_has_a_signature_and_every_signature_a_case() -> None:
    cases = load_cases(None, CORPUS)

    assert {case.trigger_type for case in cases} == set(CORPUS.signatures)
    for case in cases:
        signature = CORPUS.signatures[case.trigger_type]
        assert case.agent == signature.agent
        assert case.expect.step_kinds == signature.step_kinds
        assert case.expect.outcome in signature.allowed_outcomes


def test_the_fixture_cases_cover_the_outcomes_the_issue_names() -> None:
    expected = {(case.agent, case.expect.outcome, case.expect.verdict) for case in load_cases(DEFAULT_CASES, CORPUS)}
    assert expected == {
        ("researcher", "claim_created", None),
        ("researcher", ABORTED, None),
        ("critic", "claim_created", "promote"),
        ("critic", "claim_created", "reject"),
        ("correlator", "recommendation_delivered", None),
        ("benchmark", "recommendation_delivered", None),
    }


def test_no_case_input_holds_reasoning_content_or_the_agents_reasoning() -> None:
    model = OfflineModel()
    for path in sorted(DEFAULT_CASES.glob("*.json")):
        assert "reasoning_content" not in path.read_text(encoding="utf-8"), path
    for case in load_cases(None, CORPUS):
        request = case.request("0" * 32)
        reply = model.complete(case.agent, case.input)
        message = reply.response["choices"][0]["message"]
        reasoning = message.get("reasoning_content") or message.get("reasoning") or reply.response["reasoning_content"]
        assert "reasoning_content" not in request
        assert reasoning not in json.dumps(request)
        assert set(request) == {"case_id", "trigger_type", "trigger_ref", "agent", "input", "trace_id"}


def test_the_stub_invoker_matches_every_fixture_case() -> None:
    report = run_replay(load_cases(None, CORPUS), StubInvoker(CORPUS))

    assert report.total == 6
    assert [result.status for result in report.results] == [Status.MATCHED] * 6
    assert report.drift_share == 0.0 and report.passed


def test_the_stub_invoker_answers_with_the_corpus_not_the_case(tmp_path: Path) -> None:
    # A case loaded against one corpus, replayed by a stub of a corpus whose sequence moved on.
    cases = load_cases(write_cases(tmp_path / "cases", a_case()), CORPUS)
    moved = json.loads(DEFAULT_CORPUS.read_text(encoding="utf-8"))
    moved["signatures"]["user_question"]["step_kinds"] = ["retrieval", "verdict"]
    (tmp_path / "corpus.json").write_text(json.dumps(moved), encoding="utf-8")

    report = run_replay(cases, StubInvoker(load_corpus(tmp_path / "corpus.json")))

    assert [result.status for result in report.results] == [Status.SEQUENCE_DRIFT]


# --- loading a case -------------------------------------------------------------------------------
def test_a_valid_case_loads_with_the_corpus_step_kinds(tmp_path: Path) -> None:
    [case] = load_cases(write_cases(tmp_path / "cases", a_case(expect={"outcome": "aborted"})), CORPUS)

    assert case.id == "a-case"
    assert case.expect == Expectation(RESEARCHER_KINDS, ABORTED, None)


@pytest.mark.parametrize(
    ("case", "where"),
    [
        (a_case(reasoning_content="Step 1: gather sources"), "a-case.json: reasoning_content: a replay case never"),
        (a_case(expect={"outcome": "claim_created", "reasoning_content": "x"}), "expect.reasoning_content: a replay"),
        (a_case(input={"question": "q", "reasoning_content": "x"}), "input.reasoning_content: a replay case never"),
    ],
)
def test_reasoning_content_anywhere_in_a_case_is_refused(tmp_path: Path, case: dict[str, Any], where: str) -> None:
    assert where in load_error(tmp_path, case)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"trigger_type": "tea_time"}, "trigger_type: 'tea_time' has no signature in"),
        ({"agent": "critic"}, "agent: 'critic', but the corpus's user_question agent is 'researcher'"),
        ({"expect": {"outcome": "recommendation_delivered"}}, "expect.outcome: 'recommendation_delivered' is not an"),
        ({"expect": {"outcome": "claim_created", "step_kinds": ["verdict"]}}, "'step_kinds' (the step kinds are the"),
        ({"expect": {"outcome": "claim_created", "verdict": "a sentence"}}, "expect.verdict: expected a label"),
        ({"expect": None}, "expect: expected an object with an outcome"),
        ({"id": "another-name"}, "id: 'another-name' is not the file's name ('a-case')"),
        ({"version": 2}, "version: expected 1, got 2"),
        ({"trigger_ref": "free text"}, "trigger_ref: expected a label"),
        ({"input": ""}, "input: expected the question or claim"),
        ({"input": "x" * 281}, "input: at most 280 characters"),
        (
            {"input": "Ask jane.roe@example.org about statins"},
            "input: looks like it holds PHI (summary guard rule email)",
        ),
        ({"patient": "jane"}, "unknown key 'patient'"),
    ],
)
def test_an_invalid_case_names_its_file_and_key(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    error = load_error(tmp_path, a_case(**changes))
    assert message in error
    assert error.startswith(str(tmp_path / "cases"))
    assert "jane.roe" not in error  # the guard names its rule, never the text


def test_a_case_that_is_not_json_names_its_file(tmp_path: Path) -> None:
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "broken.json").write_text("{not json", encoding="utf-8")

    with pytest.raises(InputError, match=r"broken\.json: the case is not valid JSON"):
        load_cases(directory, CORPUS)


def test_a_missing_or_empty_case_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a directory of replay cases"):
        load_cases(tmp_path / "nowhere", CORPUS)
    with pytest.raises(InputError, match=r"no replay cases \(\*\.json files\)"):
        load_cases(tmp_path, CORPUS)


# --- comparing ------------------------------------------------------------------------------------
COMPLETED = Expectation(RESEARCHER_KINDS, "claim_created")
ABORTS = Expectation(RESEARCHER_KINDS, ABORTED)


@pytest.mark.parametrize(
    ("expected", "actual", "status"),
    [
        (COMPLETED, ReplayOutcome(RESEARCHER_KINDS, "claim_created"), Status.MATCHED),
        (COMPLETED, ReplayOutcome(("retrieval", "verdict"), "claim_created"), Status.SEQUENCE_DRIFT),
        (COMPLETED, ReplayOutcome((*RESEARCHER_KINDS, "verdict"), "claim_created"), Status.SEQUENCE_DRIFT),
        (COMPLETED, ReplayOutcome(RESEARCHER_KINDS, "recommendation_delivered"), Status.OUTCOME_DRIFT),
        # An aborted flow stops early: any prefix of the signature is in sequence …
        (ABORTS, ReplayOutcome(("retrieval", "llm_prompt"), ABORTED), Status.MATCHED),
        (ABORTS, ReplayOutcome((), ABORTED), Status.MATCHED),
        (ABORTS, ReplayOutcome(("llm_prompt",), ABORTED), Status.SEQUENCE_DRIFT),
        # … and when the case expected a completed flow, the abort is the drift.
        (COMPLETED, ReplayOutcome(("retrieval",), ABORTED), Status.OUTCOME_DRIFT),
        (ABORTS, ReplayOutcome(RESEARCHER_KINDS, "claim_created"), Status.OUTCOME_DRIFT),
        # A completed flow that stopped early is out of sequence, whatever it concluded.
        (COMPLETED, ReplayOutcome(("retrieval",), "claim_created"), Status.SEQUENCE_DRIFT),
    ],
)
def test_compare(expected: Expectation, actual: ReplayOutcome, status: Status) -> None:
    assert compare(expected, actual) is status


def test_a_verdict_is_compared_only_when_the_case_names_one() -> None:
    promote = Expectation(RESEARCHER_KINDS, "claim_created", "promote")
    assert compare(promote, ReplayOutcome(RESEARCHER_KINDS, "claim_created", "promote")) is Status.MATCHED
    assert compare(promote, ReplayOutcome(RESEARCHER_KINDS, "claim_created", "reject")) is Status.OUTCOME_DRIFT
    assert compare(promote, ReplayOutcome(RESEARCHER_KINDS, "claim_created")) is Status.OUTCOME_DRIFT
    assert compare(COMPLETED, ReplayOutcome(RESEARCHER_KINDS, "claim_created", "reject")) is Status.MATCHED


class FailingInvoker:
    name = "failing"

    def invoke(self, case: ReplayCase) -> ReplayOutcome:
        raise InvokerError("the agent service answered HTTP 503")

    def close(self) -> None:
        return None


def test_an_invoker_failure_is_an_error_result_that_counts_as_drift() -> None:
    cases = load_cases(None, CORPUS)
    report = run_replay(cases, FailingInvoker(), threshold=0.5)

    assert {result.status for result in report.results} == {Status.ERROR}
    assert report.results[0].error == "the agent service answered HTTP 503"
    assert report.results[0].actual is None
    assert (report.drifting, report.drift_share, report.passed) == (6, 1.0, False)


# --- the command ----------------------------------------------------------------------------------
def replay(*args: str) -> str:
    out = StringIO()
    call_command("reasoning_replay", *args, stdout=out)
    return out.getvalue()


def usage_error(*args: str) -> str:
    with pytest.raises(CommandError) as caught:
        replay(*args)
    assert caught.value.returncode == EXIT_USAGE
    return str(caught.value)


def test_the_command_replays_the_fixture_cases_with_the_stub_by_default() -> None:
    lines = replay().splitlines()

    assert lines[:6] == [
        "benchmark-case  benchmark_case  matched",
        "correlator-recommends  correlation_request  matched",
        "critic-promotes  claim_review  matched",
        "critic-rejects  claim_review  matched",
        "researcher-answers  user_question  matched",
        "researcher-gives-up  user_question  matched",
    ]
    assert lines[6] == "stub: 6 cases, 0 drifting (0.0%), threshold 0.0%: passed"


def test_the_command_writes_one_json_document() -> None:
    report = json.loads(replay("--json", "--threshold", "0.05"))

    assert (report["invoker"], report["total"], report["drifting"], report["passed"]) == ("stub", 6, 0, True)
    assert report["threshold"] == 0.05
    gives_up = next(result for result in report["results"] if result["case_id"] == "researcher-gives-up")
    assert gives_up["expected"] == {"step_kinds": list(RESEARCHER_KINDS), "outcome": "aborted", "verdict": None}
    assert gives_up["status"] == "matched"
    assert gives_up["error"] == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--threshold", "lots"), "--threshold: 'lots' is not a number"),
        (("--threshold", "1.5"), "--threshold: '1.5' is not between 0 and 1"),
        (("--timeout", "0"), "--timeout: '0' is not between 0.1 and 600"),
        (("--invoker", "magic"), "--invoker: 'magic' is not one of stub, reference, http"),
        (("--url", "http://127.0.0.1:9"), "--url: only the http invoker"),
        (("--invoker", "reference", "--token", "t"), "--server: the reference invoker reads the flows back"),
        (("--invoker", "http", "--server", "http://127.0.0.1:9"), "--token: the http invoker needs a token"),
        (("--invoker", "http", "--server", "http://127.0.0.1:9", "--token", "t"), "--url: the http invoker needs"),
        (("--invoker", "reference", "--server", "127.0.0.1:9", "--token", "t"), "--server: '127.0.0.1:9' is not an"),
        (("--corpus", "/nowhere/corpus.json"), "/nowhere/corpus.json: cannot read the corpus"),
    ],
)
def test_usage_errors_exit_2_naming_the_flag(args: tuple[str, ...], message: str, settings: Any) -> None:
    settings.REASONING_FLOW_URL = settings.REASONING_FLOW_TOKEN = ""
    assert message in usage_error(*args)


def test_a_case_of_an_unknown_trigger_type_exits_2_naming_the_file(tmp_path: Path) -> None:
    directory = write_cases(tmp_path / "cases", a_case(trigger_type="tea_time"))

    message = usage_error("--cases", str(directory))

    assert message.startswith(str(directory / "a-case.json"))
    assert "trigger_type: 'tea_time' has no signature" in message


def test_the_server_and_token_default_to_the_sdk_variables(settings: Any) -> None:
    # REASONING_FLOW_URL and REASONING_FLOW_TOKEN, as the settings read them.
    settings.REASONING_FLOW_URL = "http://127.0.0.1:9"  # the discard port: nothing answers
    settings.REASONING_FLOW_TOKEN = "rft_any"

    message = usage_error("--invoker", "http", "--url", "http://127.0.0.1:9/replay")

    assert message.startswith("--server/--token: GET /admin/v1/reasoning/stats failed: ConnectError")
