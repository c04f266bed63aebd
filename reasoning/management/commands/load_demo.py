"""Load demonstration data through the normal services (idempotent: fixed ids and names).

Creates an operator login, a consenting and a non-consenting patient, and a few dozen
flows from the three reference agents (Researcher, Critic, Correlator): completed,
aborted and still-active ones, patient-safe and guard-failing ones, one with a merge
step; then sessions with recorded outcomes, drift reports (the correlator's latest session
drifts) and a multi-agent turn (``reasoning.management.demo_sessions``). Prints the demo credentials,
a decision the consenting patient can read, the turn's trace id and the drifting agent.
"""

from __future__ import annotations

import importlib
import uuid
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils.module_loading import module_has_submodule

from patients.models import Patient
from patients.services import create_patient
from reasoning.management.demo_sessions import load_sessions_and_turn
from reasoning.models import ReasoningFlow
from reasoning.recording.services import add_steps, close_flow, start_flow
from reasoning.tokens import create_operator

ACTOR = "system:demo"
NAMESPACE = uuid.UUID("6f1d2c3e-8a4b-4c5d-9e6f-7a8b9c0d1e2f")
OPERATOR = ("operator", "operator-demo-2026")
CONSENTING = ("patient", "patient-demo-2026")
NOT_CONSENTING = ("patient-no-consent", "patient-demo-2026")
FLOW_COUNT = 30

# Each agent's canonical three steps: (kind, safe summary).
AGENTS: dict[str, dict[str, Any]] = {
    "researcher": {
        "trigger_type": "user_question",
        "trigger": "Asked whether a change in blood pressure treatment is needed",
        "steps": [
            ("retrieval", "Retrieved recent readings and current guidelines"),
            ("llm_prompt", "Compared the readings with the guideline targets"),
            ("verdict", "Concluded that a follow-up visit is the right next step"),
        ],
        "outcome": ("recommendation_delivered", "Recommended a follow-up visit with the care team"),
    },
    "critic": {
        "trigger_type": "claim_review",
        "trigger": "Checked a drafted claim against the evidence graph",
        "steps": [
            ("graph_walk", "Walked the evidence graph around the claim"),
            ("llm_prompt", "Asked whether the evidence supports the claim"),
            ("verdict", "Found enough independent support to keep the claim"),
        ],
        "outcome": ("claim_created", "Kept the claim after checking its evidence"),
    },
    "correlator": {
        "trigger_type": "correlation_scan",
        "trigger": "Looked for patterns across recent measurements",
        "steps": [
            ("aggregation", "Combined activity and sleep trends"),
            ("llm_prompt", "Asked whether the trends move together"),
            ("verdict", "Found a weak pattern worth watching"),
        ],
        "outcome": ("recommendation_delivered", "Suggested keeping an eye on sleep and activity together"),
    },
}
# A summary the guard rejects (medication with a dose), used to show guard-failing flows.
UNSAFE_SUMMARY = "Reviewed metformin 500mg twice daily"


def demo_id(name: str) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, name)


def _ensure_patient(username: str, password: str, *, consent: bool) -> Patient:
    existing = Patient.objects.filter(user__username=username).first()
    if existing:
        return existing
    return create_patient(username=username, password=password, consent=consent, actor=ACTOR)


def _flow_spec(index: int, patients: list[Patient | None]) -> dict[str, Any]:
    agent = list(AGENTS)[index % 3]
    spec = AGENTS[agent]
    patient = patients[index % len(patients)]
    steps = []
    previous: uuid.UUID | None = None
    for position, (kind, summary) in enumerate(spec["steps"], start=1):
        step_id = demo_id(f"flow-{index}-step-{position}")
        if index % 5 == 4 and position == 2:
            summary = UNSAFE_SUMMARY
        steps.append(
            {
                "id": step_id,
                "kind": kind,
                "agent": agent,
                "summary_text": summary,
                "confidence": round(0.97 - 0.01 * ((index + position) % 9), 2),
                "latency_ms": 80 + 35 * position + index,
                "parent_step_id": previous,
                "llm_call_log_ref": f"demo-llm-{index}-{position}" if kind == "llm_prompt" else "",
                "reasoning_content": f"Demo chain-of-thought for step {position} of flow {index}."
                if kind == "llm_prompt"
                else "",
            }
        )
        previous = step_id
    if index == 2:  # a merge: the verdict also depends on the first step
        steps[2]["extra_parent_ids"] = [steps[0]["id"]]
    if index % 10 == 9:
        close = None  # still active
    elif index % 7 == 6:
        close = {"state": "aborted", "abort_reason": "tool_error"}
    else:
        outcome_type, outcome_summary = spec["outcome"]
        close = {"state": "completed", "outcome_type": outcome_type, "outcome_summary": outcome_summary}
    return {
        "flow": {
            "id": demo_id(f"flow-{index}"),
            "trigger_type": spec["trigger_type"],
            "trigger_ref": f"demo/{agent}/{index}",
            "trigger_summary": spec["trigger"],
            "agent": agent,
            "trace_id": f"demo-trace-{index // 2}",
            "patient_id": patient.pk if patient else None,
        },
        "steps": steps,
        "close": close,
    }


class Command(BaseCommand):
    help = "Load demonstration users, patients and flows (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not get_user_model().objects.filter(username=OPERATOR[0]).exists():
            create_operator(username=OPERATOR[0], password=OPERATOR[1], actor=ACTOR)
        consenting = _ensure_patient(*CONSENTING, consent=True)
        not_consenting = _ensure_patient(*NOT_CONSENTING, consent=False)
        patients: list[Patient | None] = [consenting, not_consenting, None]
        created = 0
        for index in range(FLOW_COUNT):
            demo = _flow_spec(index, patients)
            flow, was_created = start_flow(demo["flow"], actor=ACTOR)
            created += was_created
            add_steps(flow.pk, demo["steps"], actor=ACTOR)
            if demo["close"] and ReasoningFlow.objects.filter(pk=flow.pk).active().exists():
                close_flow(flow.pk, actor=ACTOR, **demo["close"])
        readable = (
            ReasoningFlow.objects.filter(patient=consenting, patient_safe_summary=True).order_by("created_at").first()
        )
        self.stdout.write(f"demo data: {FLOW_COUNT} flows ({created} new)")
        sessions = load_sessions_and_turn(demo_id, AGENTS)
        self.stdout.write(
            f"  sessions: {sessions.sessions} ({sessions.new_flows} new flows, {sessions.new_outcomes} new outcomes, "
            f"{sessions.new_reports} new drift reports)"
        )
        # Other apps add their own demo rows (pathways, the research backlog) from
        # <app>/demo.py, so reasoning imports none of them.
        for config in apps.get_app_configs():
            if module_has_submodule(config.module, "demo"):
                summary = importlib.import_module(f"{config.name}.demo").load_demo_data()
                self.stdout.write(f"  {config.name}: {summary}")
        self.stdout.write(f"  operator (Django admin at /admin/): {OPERATOR[0]} / {OPERATOR[1]}")
        self.stdout.write(f"  consenting patient: {CONSENTING[0]} / {CONSENTING[1]}")
        self.stdout.write(f"  non-consenting patient: {NOT_CONSENTING[0]} / {NOT_CONSENTING[1]}")
        self.stdout.write(
            f"  multi-agent turn: trace id {sessions.turn_trace_id} "
            f"(/dashboard/admin/reasoning/turns/{sessions.turn_trace_id}); "
            f"drifting agent: {sessions.drifting_agent} (latest session: {sessions.drifting_level})"
        )
        if readable:
            self.stdout.write(f"  log in as {CONSENTING[0]} and open /dashboard/reasoning/{readable.pk}")
        # For make run's box (scripts/run.py), printed once the server answers.
        logins = [
            "Demo logins (log in at /accounts/login/):",
            f"  operator  {OPERATOR[0]} / {OPERATOR[1]}   -> the dashboard; the Django admin at /admin/",
            f"  patient   {CONSENTING[0]} / {CONSENTING[1]}"
            + (f"   -> their decision: /dashboard/reasoning/{readable.pk}" if readable else ""),
            f"  patient without consent  {NOT_CONSENTING[0]} / {NOT_CONSENTING[1]}",
            f"A three-agent turn: /dashboard/admin/reasoning/turns/{sessions.turn_trace_id}",
        ]
        path = Path(settings.DATA_DIR) / "demo_logins.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(logins) + "\n")
