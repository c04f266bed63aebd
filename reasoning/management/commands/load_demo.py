"""Load demonstration data through the normal write path (idempotent: fixed ids and names).

Creates an operator login, a consenting and a non-consenting patient, and about 170 flows of
five agents (Researcher, Critic, Correlator, Triage, Summarizer) spread over the last 30 days,
dated as their agents would date them (``reasoning.management.demo_flows``): completed, aborted
and still-active ones, failed steps, several models with their token counts, patient-safe and
guard-failing ones, merge steps; then sessions with recorded outcomes on days of their own,
drift reports (the correlator's latest session drifts) and a multi-agent turn
(``reasoning.management.demo_sessions``). Prints the demo credentials, a decision the
consenting patient can read, the turn's trace id and the drifting agent.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils.module_loading import module_has_submodule

from patients.models import Patient
from patients.services import create_patient
from reasoning.management.demo_flows import ACTOR, FLOW_COUNT, anchor_hour, main_flows, write_flows
from reasoning.management.demo_sessions import load_sessions_and_turn
from reasoning.models import ReasoningFlow
from reasoning.tokens import create_operator

OPERATOR = ("operator", "operator-demo-2026")
CONSENTING = ("patient", "patient-demo-2026")
NOT_CONSENTING = ("patient-no-consent", "patient-demo-2026")


def _ensure_patient(username: str, password: str, *, consent: bool) -> Patient:
    existing = Patient.objects.filter(user__username=username).first()
    if existing:
        return existing
    return create_patient(username=username, password=password, consent=consent, actor=ACTOR)


class Command(BaseCommand):
    help = "Load demonstration users, patients and flows (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not get_user_model().objects.filter(username=OPERATOR[0]).exists():
            create_operator(username=OPERATOR[0], password=OPERATOR[1], actor=ACTOR)
        consenting = _ensure_patient(*CONSENTING, consent=True)
        not_consenting = _ensure_patient(*NOT_CONSENTING, consent=False)
        anchor = anchor_hour()
        created = write_flows(main_flows(anchor, consenting, not_consenting))
        readable = (
            ReasoningFlow.objects.filter(patient=consenting, patient_safe_summary=True).order_by("created_at").first()
        )
        self.stdout.write(f"demo data: {FLOW_COUNT} flows ({created} new)")
        sessions = load_sessions_and_turn(anchor)
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
