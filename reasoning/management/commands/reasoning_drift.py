"""Run the drift job now and print each judged session's levels (docs/outcomes-and-drift.md)."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.labels import label_validator
from reasoning.agents.drift import SIGNALS
from reasoning.jobs import compute_drift_reports


class Command(BaseCommand):
    help = (
        "Judge completed sessions against each agent's baseline and store their drift reports: sessions "
        "not reported yet, or every session of --agent again. Prints agent, session and levels."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="Recompute every completed session of this agent (a label).")
        parser.add_argument("--json", action="store_true", help="Print a JSON array instead of lines.")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = options["agent"]
        if agent is not None:
            try:
                label_validator(agent)
            except ValidationError as exc:
                raise CommandError(f"--agent: {exc.messages[0]}") from None
        reports = compute_drift_reports(agent=agent)
        if options["json"]:
            rows = [
                {
                    "agent": report.agent,
                    "session_id": report.session_id,
                    "session_ended_at": report.session_ended_at.isoformat(),
                    "baseline_sessions": report.baseline_sessions,
                    "decisions": report.decisions,
                    "level": report.level,
                    "signals": report.signals,
                }
                for report in reports
            ]
            self.stdout.write(json.dumps(rows, indent=2))
            return
        for report in reports:
            levels = " ".join(f"{name}={report.signals[name]['level']}" for name in SIGNALS)
            self.stdout.write(
                f"{report.agent} {report.session_id}: {report.level} "
                f"(baseline {report.baseline_sessions} sessions; {levels})"
            )
        agents = len({report.agent for report in reports})
        self.stdout.write(f"judged {len(reports)} session(s) of {agents} agent(s)")
