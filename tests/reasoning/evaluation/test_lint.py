"""manage.py reasoning_lint: each rule firing and not firing, the verdict and exit codes, bad input."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from reasoning.evaluation import EXIT_FAILED, EXIT_OK, EXIT_USAGE, FIXTURES

REPO_ROOT = Path(__file__).resolve().parents[3]
CLEAN = FIXTURES / "sample-flows-clean.jsonl"
MARKER = "MARKER-7f3c-do-not-print"


def clean_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CLEAN.read_text(encoding="utf-8").splitlines()]


def flow(
    kinds: tuple[str, ...] | None = None, step_changes: dict[int, dict[str, Any]] | None = None, **changes: Any
) -> dict[str, Any]:
    """The clean fixture's first row (a Researcher flow), with ``kinds`` as its steps, step
    ``i`` updated by ``step_changes[i]``, and the flow's keys updated by ``changes``."""
    row: dict[str, Any] = copy.deepcopy(clean_rows()[0])
    if kinds is not None:
        template = row["steps"][0]
        row["steps"] = [
            {**template, "index": i, "position": i + 1, "kind": kind, "parent_positions": [i] if i else []}
            for i, kind in enumerate(kinds)
        ]
        row["step_count"] = len(kinds)
    for index, updates in (step_changes or {}).items():
        row["steps"][index].update(updates)
    row.update(changes)
    return row


def write(tmp_path: Path, *rows: dict[str, Any] | str) -> Path:
    path = tmp_path / "flows.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def lint(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, the error message) of ``reasoning_lint *args``."""
    out = StringIO()
    extra = {"stdin": StringIO(stdin)} if stdin is not None else {}
    try:
        call_command("reasoning_lint", *args, stdout=out, stderr=StringIO(), **extra)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return EXIT_OK, out.getvalue(), ""


def findings(tmp_path: Path, *rows: dict[str, Any]) -> list[tuple[str, int | None]]:
    _, out, _ = lint(str(write(tmp_path, *rows)), "--json")
    return [(f["rule"], f["step_index"]) for f in json.loads(out)["findings"]]


# --- the clean fixture ---------------------------------------------------------------


def test_clean_fixture_passes() -> None:
    code, out, _ = lint(str(CLEAN))
    assert code == EXIT_OK
    assert out.strip() == "PASS: 6 flow(s), 0 critical finding(s), 0 warning(s)"


# --- each rule, firing and not ------------------------------------------------------


def test_empty_steps_is_the_only_finding_of_a_flow_without_steps(tmp_path: Path) -> None:
    assert findings(tmp_path, flow(kinds=(), agent_set=[], aggregate_confidence=None)) == [("empty_steps", None)]


def test_verdict_before_the_first_retrieval_is_flagged_at_the_verdict(tmp_path: Path) -> None:
    assert findings(tmp_path, flow(kinds=("llm_prompt", "verdict", "retrieval"))) == [("verdict_before_retrieval", 1)]


@pytest.mark.parametrize(
    "kinds",
    [
        ("retrieval", "llm_prompt", "verdict"),  # the Researcher
        ("graph_walk", "llm_prompt", "verdict"),  # the Critic: no retrieval at all
        ("aggregation", "llm_prompt", "verdict"),  # the Correlator
        ("retrieval", "llm_prompt", "verdict", "retrieval", "verdict"),  # a follow-up retrieval after a verdict
    ],
)
def test_verdict_after_a_retrieval_or_without_any_is_not_flagged(tmp_path: Path, kinds: tuple[str, ...]) -> None:
    assert findings(tmp_path, flow(kinds=kinds)) == []


def test_no_step_with_an_llm_ref_is_flagged(tmp_path: Path) -> None:
    no_refs = {i: {"has_llm_call_log_ref": False} for i in range(3)}
    assert findings(tmp_path, flow(step_changes=no_refs)) == [("no_llm_ref", None)]


def test_one_step_with_an_llm_ref_is_enough(tmp_path: Path) -> None:
    refs_on_llm_prompt_only = {0: {"has_llm_call_log_ref": False}, 2: {"has_llm_call_log_ref": False}}
    assert findings(tmp_path, flow(step_changes=refs_on_llm_prompt_only)) == []


@pytest.mark.parametrize("agent_set", [[], [""]])
def test_an_agent_set_without_a_named_agent_is_a_warning(tmp_path: Path, agent_set: list[str]) -> None:
    assert findings(tmp_path, flow(agent_set=agent_set)) == [("empty_agent_set", None)]


def test_an_agent_set_with_a_named_agent_is_not_flagged(tmp_path: Path) -> None:
    assert findings(tmp_path, flow(agent_set=["", "researcher"])) == []


@pytest.mark.parametrize(("confidence", "fires"), [(1.0, True), (1, True), (0.999, False), (None, False)])
def test_confidence_exactly_one(tmp_path: Path, confidence: float | None, fires: bool) -> None:
    expected = [("confidence_exactly_one", None)] if fires else []
    assert findings(tmp_path, flow(aggregate_confidence=confidence)) == expected


def test_each_repeat_of_a_kind_is_flagged_at_its_second_step(tmp_path: Path) -> None:
    row = flow(kinds=("retrieval", "retrieval", "retrieval", "llm_prompt", "verdict"))
    assert findings(tmp_path, row) == [("duplicate_consecutive_kind", 1), ("duplicate_consecutive_kind", 2)]


def test_a_kind_repeated_with_a_step_between_is_not_flagged(tmp_path: Path) -> None:
    assert findings(tmp_path, flow(kinds=("retrieval", "llm_prompt", "retrieval", "llm_prompt", "verdict"))) == []


def hide_summaries(row: dict[str, Any], *indexes: int) -> dict[str, Any]:
    for index in indexes:
        del row["steps"][index]["summary_text"]
        row["steps"][index]["summary_hidden"] = True
    return row


def test_more_than_half_of_the_summaries_hidden_is_a_warning(tmp_path: Path) -> None:
    assert findings(tmp_path, hide_summaries(flow(), 0, 1)) == [("summaries_mostly_hidden", None)]


def test_exactly_half_of_the_summaries_hidden_is_not_flagged(tmp_path: Path) -> None:
    row = hide_summaries(flow(kinds=("retrieval", "llm_prompt", "summary", "verdict")), 0, 1)
    assert findings(tmp_path, row) == []


# --- the report -----------------------------------------------------------------------


def test_a_critical_finding_fails_with_exit_1(tmp_path: Path) -> None:
    rows = (flow(kinds=("verdict", "retrieval")), flow(agent_set=[]), clean_rows()[1])
    code, out, _ = lint(str(write(tmp_path, *rows)))
    assert code == EXIT_FAILED
    lines = out.strip().splitlines()
    assert lines[0].split() == ["critical", "verdict_before_retrieval", "flow", rows[0]["flow_id"], "step", "0"]
    assert lines[1].split() == ["warning", "empty_agent_set", "flow", rows[1]["flow_id"]]
    assert lines[-1] == "FAIL: 3 flow(s), 1 critical finding(s), 1 warning(s)"


def test_warnings_only_pass_with_notes_and_exit_0(tmp_path: Path) -> None:
    code, out, _ = lint(str(write(tmp_path, flow(aggregate_confidence=1.0))))
    assert code == EXIT_OK
    assert out.strip().splitlines()[-1] == "PASS-WITH-NOTES: 1 flow(s), 0 critical finding(s), 1 warning(s)"


def test_json_lists_the_findings(tmp_path: Path) -> None:
    row = flow(
        kinds=("retrieval", "retrieval", "verdict"), step_changes={i: {"has_llm_call_log_ref": False} for i in range(3)}
    )
    code, out, _ = lint(str(write(tmp_path, row, clean_rows()[2])), "--json")
    assert code == EXIT_FAILED
    assert json.loads(out) == {
        "verdict": "FAIL",
        "flows": 2,
        "findings": [
            {"rule": "no_llm_ref", "severity": "critical", "flow_id": row["flow_id"], "step_index": None},
            {"rule": "duplicate_consecutive_kind", "severity": "warning", "flow_id": row["flow_id"], "step_index": 1},
        ],
    }


def test_findings_never_quote_a_summary(tmp_path: Path) -> None:
    row = flow(kinds=("verdict", "verdict", "retrieval"), agent_set=[], aggregate_confidence=1.0)
    row["trigger_summary"] = row["outcome_summary"] = MARKER
    for step in row["steps"]:
        step["summary_text"] = MARKER
    path = write(tmp_path, row)
    for args in ((str(path),), (str(path), "--json")):
        code, out, message = lint(*args)
        assert code == EXIT_FAILED
        assert "verdict_before_retrieval" in out
        assert MARKER not in out + message


def test_an_empty_export_passes(tmp_path: Path) -> None:
    code, out, _ = lint(str(write(tmp_path)))
    assert code == EXIT_OK
    assert out.strip() == "PASS: 0 flow(s), 0 critical finding(s), 0 warning(s)"


def test_reads_stdin_when_the_file_is_omitted_or_a_dash() -> None:
    text = CLEAN.read_text(encoding="utf-8")
    assert lint(stdin=text)[:2] == (EXIT_OK, "PASS: 6 flow(s), 0 critical finding(s), 0 warning(s)\n")
    assert lint("-", stdin=text)[:2] == (EXIT_OK, "PASS: 6 flow(s), 0 critical finding(s), 0 warning(s)\n")


# --- bad input --------------------------------------------------------------------------


def _without(key: str) -> dict[str, Any]:
    row = flow()
    del row[key]
    return row


def _step_without_kind() -> dict[str, Any]:
    row = flow()
    del row["steps"][1]["kind"]
    return row


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", ":2: not JSON"),
        ("[1, 2]", ":2: expected a JSON object, got list"),
        (_without("steps"), ":2: steps: missing"),
        (flow(steps={"0": {}}), ":2: steps: expected a list of steps"),
        (_step_without_kind(), ":2: steps[1].kind: missing"),
        (flow(step_changes={0: {"kind": "a sentence, not a label"}}), ":2: steps[0].kind: expected a label"),
        (
            flow(step_changes={2: {"has_llm_call_log_ref": "yes"}}),
            ":2: steps[2].has_llm_call_log_ref: expected true or false",
        ),
        (flow(step_changes={1: {"index": 4}}), ":2: steps[1].index: expected 1"),
        (flow(flow_id="42"), ":2: flow_id: expected a uuid"),
        (flow(aggregate_confidence="high"), ":2: aggregate_confidence: expected a number or null"),
        (flow(format="dpo"), ':2: format: expected "raw"'),
    ],
)
def test_a_bad_line_is_a_usage_error_naming_the_file_and_line(
    tmp_path: Path, line: dict[str, Any] | str, message: str
) -> None:
    path = write(tmp_path, clean_rows()[0], line)
    code, out, error = lint(str(path))
    assert code == EXIT_USAGE
    assert error.startswith(f"{path}{message}")
    assert out == ""


def test_a_bad_value_is_not_repeated_in_the_message(tmp_path: Path) -> None:
    code, _, error = lint(str(write(tmp_path, flow(step_changes={0: {"kind": MARKER + " free text"}}))))
    assert code == EXIT_USAGE
    assert MARKER not in error


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    assert lint(str(tmp_path / "absent.jsonl")) == (
        EXIT_USAGE,
        "",
        f"{tmp_path / 'absent.jsonl'}: cannot read: No such file or directory",
    )


# --- the real process: exit codes and stdin ---------------------------------------------------


def _manage(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], input=stdin, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_process_reads_stdin_and_exits_1_on_a_critical_finding() -> None:
    rows = [*clean_rows(), flow(kinds=())]
    done = _manage("reasoning_lint", stdin="".join(json.dumps(r) + "\n" for r in rows))
    assert done.returncode == EXIT_FAILED, done.stderr
    assert done.stdout.splitlines()[-1] == "FAIL: 7 flow(s), 1 critical finding(s), 0 warning(s)"


def test_process_exits_2_on_a_bad_line_without_a_traceback() -> None:
    done = _manage("reasoning_lint", "-", stdin=json.dumps(_without("steps")) + "\n")
    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip() == "CommandError: <stdin>:1: steps: missing"
