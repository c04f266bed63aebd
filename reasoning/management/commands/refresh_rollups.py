"""Bring the dashboard's rollups up to date now (the job ``reasoning.dashboard_rollups`` runs it every
minute; ``make db`` runs it after ``migrate``, which owes the rollups of the rows already stored),
or start them again from the stored flows and steps."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from reasoning import rollups


class Command(BaseCommand):
    help = (
        "Recompute the dashboard's rollups of the hours whose flows changed and add the new steps' usage "
        "(reasoning.rollups); --rebuild first owes every hour and every step again; --status only reports."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rebuild", action="store_true", help="start again from the stored flows and steps")
        parser.add_argument("--status", action="store_true", help="report what is owed; change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["status"]:
            if options["rebuild"]:
                owed = rollups.owe_everything()
                self.stdout.write(f"owed again: {owed.dirty_hours} hour(s), {owed.pending_usage} usage row(s)")
            done = rollups.refresh(budget_s=float("inf"))
            if done.get("busy"):
                self.stdout.write("rollups: another refresh is running")
            elif done:
                hours, usage = done["hours"], done["usage_rows"]
                self.stdout.write(f"rollups: {hours} hour(s) recomputed, {usage} usage row(s) added")
        status = rollups.status()
        self.stdout.write(f"owed: {status.dirty_hours} dirty hour(s), {status.pending_usage} pending usage row(s)")
