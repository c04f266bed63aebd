"""Incident response: the audited reads and writes that touched a patient's data, or that an actor
made, in a time window, as CSV or JSON lines (``reasoning.flows.access_report``).

    manage.py audit_access_report --patient <id> [--since 2026-11-01] [--until …]
    manage.py audit_access_report --actor token:incident-desk --since 2026-12-01 --format json
    manage.py audit_access_report --since 2026-12-04T09:00 --until 2026-12-04T10:00 --output report.csv

Times are ISO 8601 (a date alone is its midnight in TIME_ZONE). A progress bar on standard error
counts the rows; the generation is audited (``admin.audit.access_report``).
"""

from __future__ import annotations

import csv
import json
import sys
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from core.api_views import parse_instant
from core.errors import InvalidInput
from reasoning.flows.access_report import COLUMNS, access_report


class Command(BaseCommand):
    help = "Every audited read and write that touched a patient's data, or that an actor made, in a window."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--patient", help="the patient's id")
        parser.add_argument("--actor", default="", help="an actor as the audit log names it: token:<name>, user:<id>")
        parser.add_argument("--since", help="from this time (inclusive)")
        parser.add_argument("--until", help="up to this time (exclusive)")
        parser.add_argument("--format", choices=("csv", "json"), default="csv", help="csv (default) or JSON lines")
        parser.add_argument("--output", help="write to this file instead of standard output")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            patient = uuid.UUID(options["patient"]) if options["patient"] else None
        except ValueError:
            raise CommandError("--patient: not a patient id (a UUID)") from None
        try:
            since = parse_instant(options["since"], "since", dates=True, naive=True)
            until = parse_instant(options["until"], "until", dates=True, naive=True)
            report = access_report(
                requested_by="system:cli", patient_id=patient, actor=options["actor"], since=since, until=until
            )
        except InvalidInput as exc:
            raise CommandError(f"--{exc.field}: {exc.detail}" if exc.field else exc.detail) from exc
        out: Any = open(options["output"], "w", newline="") if options["output"] else self.stdout  # noqa: SIM115
        try:
            rows = tqdm(report, total=report.rows, unit=" events", file=sys.stderr, disable=options["no_progress"])
            if options["format"] == "csv":
                writer = csv.writer(out)
                writer.writerow(COLUMNS)
                for row in rows:
                    writer.writerow([row[name].isoformat() if name == "created_at" else row[name] for name in COLUMNS])
            else:
                for row in rows:
                    out.write(json.dumps(row, default=str) + "\n")
        finally:
            if options["output"]:
                out.close()
        if options["output"]:
            self.stderr.write(f"{report.rows} events written to {options['output']}")
