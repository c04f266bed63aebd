"""Lint a raw export for quality anomalies (docs/evaluation.md, "## reasoning_lint")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reasoning.evaluation import EXIT_FAILED, EXIT_USAGE, InputError
from reasoning.evaluation.jsonl import STDIN
from reasoning.evaluation.lint import Verdict, lint
from reasoning.evaluation.rows import read_rows


class Command(BaseCommand):
    help = (
        "Report quality anomalies in a raw export (reasoning_export --format raw): exit 1 on a critical "
        "finding, 2 on unusable input."
    )
    requires_system_checks: list[str] = []  # reads a file, not the database
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", nargs="?", default=STDIN, help="the raw export (JSONL); stdin when omitted or -")
        parser.add_argument("--json", action="store_true", help="print the findings as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = lint(read_rows(options["file"], stdin=options.get("stdin")))
        except InputError as exc:
            raise CommandError(str(exc), returncode=EXIT_USAGE) from None
        self.stdout.write(report.json() if options["json"] else report.text())
        if report.verdict == Verdict.FAIL:
            raise CommandError("lint failed: critical findings", returncode=EXIT_FAILED)
