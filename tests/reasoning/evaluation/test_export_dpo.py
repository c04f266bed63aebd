"""manage.py reasoning_export --format dpo: the pairing rule, the TRL row shape, PHI safety."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.models import AuditEvent
from patients.models import Patient
from reasoning.evaluation.dpo import Candidate, RejectedPool
from tests.factories import SAFE_STEPS, make_flow
from tests.reasoning.evaluation.test_export import (
    MARKERS,
    NOW,
    flow_at,
    make_unsafe_flow,
    marked_step,
    patient,  # noqa: F401  # the fixture
    seed_pathway,
)

pytestmark = pytest.mark.django_db


def pairs(*args: str) -> list[dict[str, Any]]:
    stdout = StringIO()
    call_command("reasoning_export", "--format", "dpo", "--no-progress", *args, stdout=stdout, stderr=StringIO())
    return [json.loads(line) for line in stdout.getvalue().splitlines()]


def paired_ids(*args: str) -> list[tuple[str, str]]:
    return [(row["metadata"]["chosen_flow_id"], row["metadata"]["rejected_flow_id"]) for row in pairs(*args)]


def chosen(when: datetime = NOW, *, hits: int = 1, **fields: Any) -> str:
    """A completed flow whose pathway was reused ``hits`` times."""
    flow_id = flow_at(when, **fields)
    seed_pathway(flow_id, hit_count=hits)
    return flow_id


def aborted(when: datetime = NOW, **fields: Any) -> str:
    return flow_at(when, abort_reason="timeout", **fields)


# --- The pairing rule ----------------------------------------------------------------------------


def test_chosen_pairs_with_an_aborted_flow_of_the_same_trigger_type_only() -> None:
    good = chosen(trigger_type="lab_result", trigger_ref="labs/1")
    aborted(trigger_type="user_question", trigger_ref="labs/1")
    bad = aborted(trigger_type="lab_result", trigger_ref="other/9")

    assert paired_ids() == [(good, bad)]


def test_no_rejected_flow_of_the_trigger_type_makes_no_pair() -> None:
    chosen(trigger_type="lab_result")
    aborted(trigger_type="user_question")

    assert pairs() == []


def test_rejected_is_the_closest_trigger_ref_by_common_prefix() -> None:
    good = chosen(trigger_ref="labs/2024/cbc/17")
    aborted(trigger_ref="labs/2023/cbc/17")  # shares "labs/202"
    closest = aborted(trigger_ref="labs/2024/lipids", when=NOW - timedelta(days=5))  # shares "labs/2024/"
    aborted(trigger_ref="imaging/2024/cbc/17")  # shares nothing

    assert paired_ids() == [(good, closest)]


def test_equally_close_refs_go_to_the_most_recent_close_then_the_smallest_id() -> None:
    good = chosen(trigger_ref="labs/7")
    aborted(trigger_ref="labs/8", when=NOW - timedelta(hours=2))
    recent = aborted(trigger_ref="labs/9", when=NOW - timedelta(hours=1))
    assert paired_ids() == [(good, recent)]

    # Closed at the same instant: the smaller id wins.
    twins = [aborted(trigger_ref="labs/5", when=NOW - timedelta(minutes=30)) for _ in range(3)]
    assert paired_ids() == [(good, min(twins, key=lambda flow_id: uuid.UUID(flow_id)))]


def test_each_rejected_flow_is_used_once_most_recent_chosen_first() -> None:
    older = chosen(trigger_ref="labs/1", when=NOW - timedelta(days=1))
    newer = chosen(trigger_ref="labs/1")
    only = aborted(trigger_ref="labs/1")

    assert paired_ids() == [(newer, only)]
    assert pairs("--allow-reuse") and paired_ids("--allow-reuse") == [(newer, only), (older, only)]


def test_used_rejected_flows_give_way_to_the_next_closest() -> None:
    newer = chosen(trigger_ref="labs/1")
    older = chosen(trigger_ref="labs/1", when=NOW - timedelta(days=1))
    exact = aborted(trigger_ref="labs/1")
    farther = aborted(trigger_ref="labs/2")

    assert paired_ids() == [(newer, exact), (older, farther)]


def test_a_demoted_pathway_makes_its_flow_rejected_even_when_it_was_reused() -> None:
    good = chosen(trigger_ref="labs/1")
    demoted = flow_at(NOW - timedelta(days=2), trigger_ref="labs/1")
    seed_pathway(demoted, hit_count=4, demoted=True)
    flow_at(NOW, trigger_ref="labs/1")  # completed, never reused: neither chosen nor rejected
    unused = flow_at(NOW)
    seed_pathway(unused, hit_count=0)  # its pathway was never reused: not chosen

    assert paired_ids() == [(good, demoted)]


def test_flows_without_steps_are_not_candidates() -> None:
    chosen(trigger_ref="labs/1")
    chosen(trigger_ref="labs/1", steps=[], when=NOW + timedelta(hours=1))
    aborted(trigger_ref="labs/1", steps=[])

    assert pairs() == []


def test_filters_select_the_candidates() -> None:
    good = chosen(trigger_ref="labs/1")
    chosen(trigger_ref="labs/1", when=NOW - timedelta(days=10))  # outside the window
    in_window = aborted(trigger_ref="labs/1")
    aborted(trigger_ref="labs/1", when=NOW - timedelta(days=10))  # outside the window

    assert paired_ids("--since", "2026-03-01") == [(good, in_window)]
    # --outcome applies to the chosen flows (aborted flows have none).
    assert paired_ids("--outcome", "recommendation_delivered", "--since", "2026-03-01") == [(good, in_window)]
    assert paired_ids("--outcome", "referral") == []
    assert paired_ids("--agent", "critic") == []


def test_limit_keeps_the_first_pairs_of_the_rule() -> None:
    newest = chosen(trigger_ref="labs/1")
    chosen(trigger_ref="labs/1", when=NOW - timedelta(days=1))
    best = aborted(trigger_ref="labs/1")
    aborted(trigger_ref="labs/1", when=NOW - timedelta(days=1))

    assert paired_ids("--limit", "1") == [(newest, best)]


# --- The row --------------------------------------------------------------------------------------


def test_row_is_prompt_chosen_rejected_and_metadata() -> None:
    good = chosen(steps=["Reviewed recent lab results", "Compared them with the care guideline"])
    bad = aborted(steps=["Looked for the guideline"], trigger_summary="A lab result arrived late")

    (row,) = pairs()

    assert row == {
        "prompt": "A new lab result arrived",
        "chosen": "Reviewed recent lab results\nCompared them with the care guideline",
        "rejected": "Looked for the guideline",
        "metadata": {"chosen_flow_id": good, "rejected_flow_id": bad, "trigger_type": "lab_result"},
    }


def test_unsafe_summaries_become_the_step_kind_and_the_prompt_the_trigger() -> None:
    unsafe = make_unsafe_flow()
    seed_pathway(unsafe, hit_count=2)
    bad = aborted(steps=[SAFE_STEPS[0]])

    (row,) = pairs()

    assert row["metadata"]["chosen_flow_id"] == unsafe and row["metadata"]["rejected_flow_id"] == bad
    assert row["prompt"] == "lab_result labs/1"
    assert row["chosen"] == "[llm_prompt: summary hidden]\n[retrieval: summary hidden]\n[retrieval: summary hidden]"
    assert row["rejected"] == SAFE_STEPS[0]


def test_no_marker_reaches_the_output_bytes(patient: Patient, tmp_path: Path) -> None:  # noqa: F811
    good = str(make_flow(patient, [SAFE_STEPS[0], marked_step()]))
    seed_pathway(good, hit_count=1)
    unsafe = make_unsafe_flow(patient)
    seed_pathway(unsafe, hit_count=1)
    make_flow(patient, [marked_step()], abort_reason=MARKERS["abort_reason"])
    demoted = make_unsafe_flow(patient)
    seed_pathway(demoted, hit_count=1, demoted=True)
    out = tmp_path / "pairs.jsonl"

    call_command("reasoning_export", "--format", "dpo", "--no-progress", "--out", str(out), stderr=StringIO())
    data = out.read_bytes()

    assert len(data.splitlines()) == 2
    assert SAFE_STEPS[0].encode() in data and good.encode() in data  # the scan can fail
    leaked = [name for name, marker in MARKERS.items() if marker.lower().encode() in data.lower()]
    assert leaked == []
    assert str(patient.pk).encode() not in data and patient.pk.hex.encode() not in data


def test_dpo_export_is_audited_with_its_candidate_counts() -> None:
    chosen(trigger_ref="labs/1")
    aborted(trigger_ref="labs/1")
    aborted(trigger_ref="labs/2")
    aborted(trigger_type="user_question")  # a candidate, but of no chosen flow's type

    pairs("--allow-reuse")

    event = AuditEvent.objects.get(action="reasoning.export.completed")
    assert event.payload["flags"]["format"] == "dpo" and event.payload["flags"]["allow_reuse"] is True
    assert (event.payload["rows"], event.payload["chosen_candidates"], event.payload["rejected_candidates"]) == (
        1,
        1,
        3,
    )


# --- The pool, against the rule written out plainly -----------------------------------------------


def closest_by_brute_force(ref: str, pool: list[Candidate]) -> Candidate | None:
    def shared(other: str) -> int:
        n = 0
        while n < min(len(ref), len(other)) and ref[n] == other[n]:
            n += 1
        return n

    return min(pool, key=lambda flow: (-shared(flow.trigger_ref), flow.recency_key), default=None)


_refs = st.text(alphabet="ab/", max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    rejected=st.lists(st.tuples(_refs, st.integers(0, 5)), max_size=12),
    wanted=st.lists(_refs, max_size=12),
    reuse=st.booleans(),
)
def test_pool_takes_what_the_rule_says(rejected: list[tuple[str, int]], wanted: list[str], reuse: bool) -> None:
    flows = [
        Candidate(uuid.UUID(int=n + 1), "t", ref, datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minute))
        for n, (ref, minute) in enumerate(rejected)
    ]
    pool, unused = RejectedPool(flows), list(flows)
    for ref in wanted:
        expected = closest_by_brute_force(ref, unused)
        assert pool.take(ref, reuse=reuse) == expected
        if expected is not None and not reuse:
            unused.remove(expected)
