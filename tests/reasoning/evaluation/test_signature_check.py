"""manage.py reasoning_signature_check: the CI gate on the clean fixture, each drift kind, the
share and its threshold, bad input."""

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
DRIFT = FIXTURES / "sample-flows-drift.jsonl"
MARKER = "MARKER-91be-do-not-print"


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def researcher(kinds: tuple[str, ...] | None = None, **changes: Any) -> dict[str, Any]:
    """The clean fixture's first row (a matching Researcher flow), its steps replaced by
    ``kinds`` and its keys updated by ``changes``."""
    row = copy.deepcopy(rows_of(CLEAN)[0])
    if kinds is not None:
        template = row["steps"][0]
        row["steps"] = [{**template, "index": i, "position": i + 1, "kind": kind} for i, kind in enumerate(kinds)]
        row["step_count"] = len(kinds)
    row.update(changes)
    return row


def write(tmp_path: Path, *rows: dict[str, Any] | str, name: str = "flows.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def check(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, the error message) of ``reasoning_signature_check *args``."""
    out = StringIO()
    extra = {"stdin": StringIO(stdin)} if stdin is not None else {}
    try:
        call_command("reasoning_signature_check", *args, stdout=out, stderr=StringIO(), **extra)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return EXIT_OK, out.getvalue(), ""


def report(path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = check("--input", str(path), "--json", *args)
    return code, json.loads(out)


def statuses(data: dict[str, Any]) -> list[str]:
    return [result["status"] for result in data["results"]]


# --- the CI gate -------------------------------------------------------------------------


def test_clean_fixture_matches_five_flows_and_skips_one() -> None:
    code, data = report(CLEAN)
    assert code == EXIT_OK
    assert statuses(data) == ["matched"] * 5 + ["skipped"]
    assert (data["verdict"], data["checked"], data["drifting"], data["share"]) == ("PASS", 5, 0, 0.0)


def test_clean_fixture_summary_line_says_pass() -> None:
    code, out, _ = check("--input", str(CLEAN))
    assert code == EXIT_OK
    assert out.splitlines()[-1] == (
        "PASS: 0 of 5 checked flow(s) drifting (share 0.000, threshold 0.000);"
        " 5 matched, 0 sequence_drift, 0 outcome_drift, 1 skipped"
    )


def test_drift_fixture_fails_the_gate_with_each_drift_kind() -> None:
    code, data = report(DRIFT)
    assert code == EXIT_FAILED
    assert statuses(data) == ["matched"] * 9 + ["sequence_drift", "outcome_drift", "sequence_drift", "skipped"]
    assert (data["verdict"], data["flows"], data["checked"], data["drifting"], data["share"]) == (
        "FAIL",
        13,
        12,
        3,
        0.25,
    )
    assert data["by_trigger_type"]["claim_review"] == {"total": 3, "drifting": 1, "skipped": 0}


@pytest.mark.parametrize(
    ("threshold", "expected"), [("0.3", EXIT_OK), ("0.25", EXIT_OK), ("0.2", EXIT_FAILED), ("0", EXIT_FAILED)]
)
def test_threshold_is_the_largest_drifting_share_that_passes(threshold: str, expected: int) -> None:
    code, data = report(DRIFT, "--threshold", threshold)
    assert code == expected
    assert data["verdict"] == ("PASS" if expected == EXIT_OK else "FAIL")


# --- each status ------------------------------------------------------------------------------


def test_sequence_drift_prints_expected_and_actual_kinds(tmp_path: Path) -> None:
    row = researcher(kinds=("retrieval", "verdict"))
    code, out, _ = check("--input", str(write(tmp_path, row)))
    assert code == EXIT_FAILED
    assert out.splitlines()[0].split("  ") == [
        "sequence_drift",
        f"flow {row['flow_id']}",
        "user_question",
        "expected retrieval → llm_prompt → verdict, got retrieval → verdict",
    ]


def test_outcome_drift_prints_the_outcome_and_the_allowed_ones(tmp_path: Path) -> None:
    row = researcher(outcome_type="recommendation_delivered")
    code, out, _ = check("--input", str(write(tmp_path, row)))
    assert code == EXIT_FAILED
    assert out.splitlines()[0].endswith("outcome recommendation_delivered not in [aborted, claim_created]")


def test_sequence_and_outcome_both_drifting_is_reported_as_sequence_drift(tmp_path: Path) -> None:
    row = researcher(kinds=("llm_prompt", "verdict"), outcome_type="recommendation_delivered")
    code, data = report(write(tmp_path, row))
    assert code == EXIT_FAILED
    assert data["results"] == [
        {
            "flow_id": row["flow_id"],
            "trigger_type": "user_question",
            "status": "sequence_drift",
            "kinds": ["llm_prompt", "verdict"],
            "expected_kinds": ["retrieval", "llm_prompt", "verdict"],
            "outcome": "recommendation_delivered",
            "allowed_outcomes": ["aborted", "claim_created"],
        }
    ]
    assert data["drifting"] == 1
    _, out, _ = check("--input", str(write(tmp_path, row)))
    assert "; outcome recommendation_delivered also not in [aborted, claim_created]" in out


@pytest.mark.parametrize(
    ("trigger", "kinds", "status"),
    [
        ("user_question", ("retrieval", "llm_prompt", "verdict"), "matched"),  # allows aborted
        ("claim_review", ("graph_walk", "llm_prompt", "verdict"), "outcome_drift"),  # does not
    ],
)
def test_an_aborted_flow_matches_only_where_aborted_is_allowed(
    tmp_path: Path, trigger: str, kinds: tuple[str, ...], status: str
) -> None:
    row = researcher(kinds=kinds, trigger_type=trigger, flow_state="aborted", outcome_type="")
    _, data = report(write(tmp_path, row))
    assert statuses(data) == [status]
    assert data["results"][0]["outcome"] == "aborted"


@pytest.mark.parametrize(
    ("kinds", "status"),
    [
        (("retrieval",), "matched"),  # gave up early
        ((), "matched"),
        (("retrieval", "verdict"), "sequence_drift"),  # not a prefix
        (("retrieval", "llm_prompt", "verdict", "verdict"), "sequence_drift"),  # longer than the signature
    ],
)
def test_an_aborted_flows_kinds_must_be_a_prefix_of_the_signature(
    tmp_path: Path, kinds: tuple[str, ...], status: str
) -> None:
    row = researcher(kinds=kinds, flow_state="aborted", outcome_type="")
    _, data = report(write(tmp_path, row))
    assert statuses(data) == [status]


def test_a_completed_flow_that_stopped_early_is_sequence_drift(tmp_path: Path) -> None:
    _, data = report(write(tmp_path, researcher(kinds=("retrieval", "llm_prompt"))))
    assert statuses(data) == ["sequence_drift"]


def test_an_unknown_trigger_type_is_skipped_and_not_in_the_share(tmp_path: Path) -> None:
    rows = (
        researcher(),
        researcher(kinds=("verdict",)),
        researcher(trigger_type="triage"),
        researcher(trigger_type="x"),
    )
    code, data = report(write(tmp_path, *rows), "--threshold", "0.5")
    assert code == EXIT_OK
    assert statuses(data) == ["matched", "sequence_drift", "skipped", "skipped"]
    assert (data["checked"], data["skipped"], data["share"]) == (2, 2, 0.5)


def test_all_skipped_is_a_share_of_zero(tmp_path: Path) -> None:
    code, data = report(write(tmp_path, researcher(trigger_type="triage")))
    assert code == EXIT_OK
    assert (data["checked"], data["share"], data["verdict"]) == (0, 0.0, "PASS")


def test_a_custom_corpus_is_used(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.json"
    corpus.write_text(
        json.dumps(
            {
                "version": 1,
                "signatures": {"triage": {"agent": "t", "step_kinds": ["verdict"], "allowed_outcomes": ["x"]}},
            }
        )
    )
    rows = (researcher(trigger_type="triage", kinds=("verdict",), outcome_type="x"), researcher())
    code, data = report(write(tmp_path, *rows), "--corpus", str(corpus))
    assert code == EXIT_OK
    assert statuses(data) == ["matched", "skipped"]


def test_output_never_quotes_a_summary(tmp_path: Path) -> None:
    row = researcher(
        kinds=("verdict", "retrieval"), outcome_type="other", trigger_summary=MARKER, outcome_summary=MARKER
    )
    for step in row["steps"]:
        step["summary_text"] = MARKER
    path = write(tmp_path, row)
    for extra in ((), ("--json",)):
        code, out, message = check("--input", str(path), *extra)
        assert code == EXIT_FAILED
        assert "sequence_drift" in out
        assert MARKER not in out + message


def test_reads_stdin_for_a_dash() -> None:
    code, out, _ = check("--input", "-", stdin=CLEAN.read_text(encoding="utf-8"))
    assert code == EXIT_OK
    assert out.count("matched") == 6  # five lines and the summary


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("threshold", ["1.5", "-0.1", "nan"])
def test_a_threshold_outside_0_to_1_is_a_usage_error(threshold: str) -> None:
    assert check("--input", str(CLEAN), "--threshold", threshold) == (
        EXIT_USAGE,
        "",
        "--threshold: expected a share between 0 and 1",
    )


def test_a_corpus_failing_its_schema_is_a_usage_error(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps({"version": 2, "signatures": {}}))
    assert check("--input", str(CLEAN), "--corpus", str(corpus)) == (
        EXIT_USAGE,
        "",
        f"{corpus}: version: expected 1, got 2",
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json at all", ":2: not JSON"),
        ({k: v for k, v in researcher().items() if k != "steps"}, ":2: steps: missing"),
        (researcher(steps="retrieval"), ":2: steps: expected a list of steps"),
        (researcher(steps=[{"index": 0}]), ":2: steps[0].kind: missing"),
        (researcher(trigger_type=None), ":2: trigger_type: expected a string"),
        (researcher(outcome_type="not a label"), ":2: outcome_type: expected a label"),
    ],
)
def test_a_bad_line_is_a_usage_error_naming_the_file_and_line(
    tmp_path: Path, line: dict[str, Any] | str, message: str
) -> None:
    path = write(tmp_path, researcher(), line)
    code, out, error = check("--input", str(path))
    assert (code, out) == (EXIT_USAGE, "")
    assert error.startswith(f"{path}{message}")


def test_an_unreadable_input_is_a_usage_error(tmp_path: Path) -> None:
    code, _, error = check("--input", str(tmp_path))
    assert code == EXIT_USAGE
    assert error == f"{tmp_path}: cannot read: Is a directory"


# --- the real process -------------------------------------------------------------------------------


def _manage(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], input=stdin, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def test_process_exit_codes_of_the_gate() -> None:
    assert _manage("reasoning_signature_check", "--input", str(CLEAN)).returncode == EXIT_OK
    failed = _manage("reasoning_signature_check", "--input", "-", stdin=DRIFT.read_text(encoding="utf-8"))
    assert failed.returncode == EXIT_FAILED, failed.stderr
    assert failed.stdout.splitlines()[-1].startswith("FAIL: 3 of 12 checked flow(s) drifting (share 0.250")
    loosened = _manage("reasoning_signature_check", "--input", str(DRIFT), "--threshold", "0.3")
    assert loosened.returncode == EXIT_OK, loosened.stderr


def test_process_exits_2_on_a_bad_corpus_or_flag_without_a_traceback(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.json"
    corpus.write_text("{")
    bad_corpus = _manage("reasoning_signature_check", "--input", str(CLEAN), "--corpus", str(corpus))
    assert bad_corpus.returncode == EXIT_USAGE
    assert bad_corpus.stderr.startswith(f"CommandError: {corpus}: the corpus is not valid JSON")
    assert "Traceback" not in bad_corpus.stderr
    no_input = _manage("reasoning_signature_check")
    assert no_input.returncode == EXIT_USAGE
    assert "the following arguments are required: --input" in no_input.stderr
