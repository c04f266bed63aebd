"""The patient narrative: a plain-language, PHI-free projection of one decision.

Who may read it (the one access rule for this audience, used by the API and the page):
  1. The caller is a patient: a ``reasoning.read`` token bound to a patient, or the
     patient's own logged-in session. Anyone else gets 403.
  2. The flow exists and is about that patient. Otherwise 404, whether the flow is
     unknown or belongs to someone else, so a patient cannot probe for other
     patients' decisions.
  3. The patient has opted in (``reasoning_read_consent``). Otherwise 403.
  4. While the flow is active: 202 with the number of steps so far.
  5. Closed flows are shown only when every summary passed the guard at close
     (``patient_safe_summary``); otherwise 403.

The projection carries the trigger summary, one card per step (agent label, summary,
time), the outcome summary, the Decision Dimensions radar with the patient's labels
(the snapshot taken at close) and a disclaimer: no ids of other records, no inputs or
outputs, no rationale, no raw reasoning.

An aborted flow (a tool error, the 24-hour timeout, an agent giving up) reached no
decision, so it must not read as one: ``reached_decision`` is false, ``stopped`` says in
plain words that the process stopped before a decision and that nothing was recommended
(with a sentence for the known abort labels and a generic one otherwise: the raw label is
free text and never shown), and there is no outcome summary and no radar (both would
present the partial work as the strength of a decision). The steps are still listed, as
what was done before it stopped. Every answer this function gives other than 404
is audited as ``patient.reasoning.flow.read`` with its outcome (``read_narrative`` in
``reasoning.flows.services``). (401, a token without
``reasoning.read`` and 429 are refused before it runs, by authentication, permission
and throttle.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reasoning.dimensions import AXES, LABELS, is_radar
from reasoning.models import ReasoningFlow
from reasoning.radar import flow_radar

DISCLAIMER = (
    "This is an automatically generated account of how the system reached this result. "
    "It is not medical advice. Please talk to your care team about any decision."
)

# Plain labels for the agents patients meet most; others show their label capitalised.
AGENT_LABELS = {
    "researcher": "Research assistant",
    "critic": "Fact checker",
    "correlator": "Pattern finder",
    "triage": "Message triage",
    "summarizer": "Visit summary writer",
}


# What a patient is told when a flow stopped without a decision.
STOPPED_MESSAGE = "This process stopped before reaching a decision. Nothing was recommended."
# Abort labels agents and jobs use, as plain sentences; any other label is "other".
# ``abort_reason`` is free text written by an agent, so it is mapped, never echoed.
STOP_REASONS = {
    "timeout": "It ran for too long without finishing, so it was stopped automatically.",
    "tool_error": "One of the tools it relies on failed, so it could not finish.",
}
OTHER_STOP_REASON = "other"
OTHER_STOP_REASON_TEXT = "It could not finish."


def stop_reason(abort_reason: str) -> tuple[str, str]:
    """The patient-facing (code, sentence) for an abort label."""
    label = abort_reason.strip().lower()
    if label in STOP_REASONS:
        return label, STOP_REASONS[label]
    return OTHER_STOP_REASON, OTHER_STOP_REASON_TEXT


def agent_label(agent: str) -> str:
    return AGENT_LABELS.get(agent.lower(), agent.replace("_", " ").capitalize())


@dataclass(frozen=True)
class Narrative:
    status: int  # 200 (complete), 202 (still working) or 403 (with a "reason" code)
    body: dict[str, Any]


def denied(reason: str, detail: str) -> Narrative:
    # Returned, not raised: the denial's audit event must commit.
    return Narrative(403, {"detail": detail, "reason": reason})


def pending(flow: ReasoningFlow) -> Narrative:
    """The 202 answer while the flow is active: how far it got, nothing else."""
    return Narrative(
        202,
        {
            "decision_id": flow.pk,
            "flow_state": flow.flow_state,
            "step_count": flow.step_count,
            "detail": "Still working on this.",
        },
    )


def project(flow: ReasoningFlow, steps: Iterable[tuple[str, str, datetime]]) -> Narrative:
    """The 200 answer for a closed flow whose summaries all passed the guard: ``steps`` are
    (agent, summary, created_at) in position order."""
    decided = flow.flow_state == ReasoningFlow.State.COMPLETED
    stopped = None
    if not decided:
        code, sentence = stop_reason(flow.abort_reason)
        stopped = {"message": STOPPED_MESSAGE, "reason": code, "reason_text": sentence}
    return Narrative(
        200,
        {
            "decision_id": flow.pk,
            "flow_state": flow.flow_state,
            "reached_decision": decided,
            "stopped": stopped,
            "trigger_summary": flow.trigger_summary,
            "steps": [
                {"agent": agent_label(agent), "summary": summary, "created_at": created_at}
                for agent, summary, created_at in steps
            ],
            "outcome_summary": flow.outcome_summary if decided else None,
            "closed_at": flow.closed_at,
            "dimensions": patient_dimensions(flow) if decided else None,
            "disclaimer": DISCLAIMER,
        },
    )


def patient_dimensions(flow: ReasoningFlow) -> dict[str, Any]:
    """The radar as it stood at close (the snapshot), else computed now for flows closed
    before snapshots existed; each axis carries the patient's label."""
    stored = flow.dimensions_snapshot
    source = "snapshot" if is_radar(stored) else "computed"
    axes = stored if is_radar(stored) else flow_radar(flow)
    labels = LABELS["patient"]
    return {
        "source": source,
        "axes": [
            {"axis": axis, "label": labels[axis], "score": axes[axis]["score"], "bucket": axes[axis]["bucket"]}
            for axis in AXES
        ],
    }


# --- "Your decisions": the patient's own flows, on their profile ------------------------------

YOUR_DECISIONS_LIMIT = 50


@dataclass(frozen=True)
class DecisionRow:
    flow_id: uuid.UUID
    created_at: datetime
    status: str  # ready, in_progress, ask_care_team, stopped
    # Who decided, as the patient's label for the agent ("Research assistant"): what kind of
    # decision it is, when the summary is withheld too; "" for a flow without an agent.
    agent: str
    # The trigger summary, only when the guard passed every summary of the flow; else None.
    summary: str | None


def decision_status(flow: ReasoningFlow) -> str:
    if flow.is_active:
        return "in_progress"
    if flow.flow_state == ReasoningFlow.State.ABORTED:
        return "stopped"
    return "ready" if flow.patient_safe_summary else "ask_care_team"
