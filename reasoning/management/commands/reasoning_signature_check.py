"""Compare a raw export with the golden signatures (docs/evaluation.md, "## Golden signatures and
reasoning_signature_check")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reasoning.evaluation import EXIT_FAILED, EXIT_USAGE, InputError, services
from reasoning.evaluation.rows import read_rows
from reasoning.evaluation.signature_drift import Status, compare
from reasoning.evaluation.signatures import DEFAULT_CORPUS, load_corpus
from reasoning.models import EvaluationRun

ACTOR = "system:cli"


class Command(BaseCommand):
    help = (
        "Check each flow of a raw export against its trigger type's golden signature: exit 1 when the "
        "share of drifting flows exceeds --threshold, 2 on unusable input."
    )
    requires_system_checks: list[str] = []  # reads files; the database only with --record
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--input", required=True, help="the raw export (JSONL); - for stdin")
        parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="the signature corpus (JSON)")
        parser.add_argument(
            "--threshold",
            type=float,
            default=0.0,
            help="the share of drifting flows (0 to 1) that still passes; default 0: any drift fails",
        )
        parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
        parser.add_argument("--record", action="store_true", help="store the run for the evaluation page (audited)")

    def handle(self, *args: Any, **options: Any) -> None:
        threshold = options["threshold"]
        if not 0.0 <= threshold <= 1.0:  # also false for NaN
            raise CommandError("--threshold: expected a share between 0 and 1", returncode=EXIT_USAGE)
        try:
            corpus = load_corpus(options["corpus"])
            report = compare(read_rows(options["input"], stdin=options.get("stdin")), corpus, threshold)
        except InputError as exc:
            raise CommandError(str(exc), returncode=EXIT_USAGE) from None
        self.stdout.write(report.json() if options["json"] else report.text())
        if options["record"]:
            services.record_evaluation_run(
                kind=EvaluationRun.Kind.SIGNATURE_CHECK,
                source=Path(options["input"]).name if options["input"] != "-" else "<stdin>",
                total=len(report.results),
                drifting=report.drifting,
                skipped=report.count(Status.SKIPPED),
                threshold=threshold,
                passed=report.passed,
                by_trigger_type=report.by_trigger_type(),
                findings=[
                    {"id": r.flow_id, "trigger_type": r.trigger_type, "status": r.status.value}
                    for r in report.results
                    if r.status != Status.MATCHED
                ],
                actor=ACTOR,
            )
        if not report.passed:
            raise CommandError("signature check failed: drift over the threshold", returncode=EXIT_FAILED)
