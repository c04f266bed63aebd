"""Do the work owed after flow closes now (the job ``reasoning.close_work`` runs it every minute),
or owe again the work that failed after its last attempt."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from reasoning.recording import close_work


class Command(BaseCommand):
    help = (
        "Do the work owed after flow closes (pathway extraction, backlog producers) that is due; "
        "--retry-failed first owes again the work that failed after its last attempt; --all does "
        "owed work now even when its back-off has not passed; --status only reports."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--retry-failed", action="store_true", help="owe failed work again, then do it")
        parser.add_argument("--receiver", help="with --retry-failed: only this receiver's (e.g. pathways.extract)")
        parser.add_argument("--all", action="store_true", help="do owed work now, whatever its back-off")
        parser.add_argument("--status", action="store_true", help="report what is owed and failed; change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["status"]:
            if options["retry_failed"]:
                requeued = close_work.retry_failed(actor="system:cli", receiver=options["receiver"])
                self.stdout.write(f"owed again: {requeued} failed piece(s) of work")
            far = timezone.now() + close_work.BACKOFF_MAX if options["all"] else None
            done = close_work.perform_due(far)
            shown = ", ".join(f"{outcome} {count}" for outcome, count in sorted(done.items())) or "nothing was due"
            self.stdout.write(f"close work: {shown}")
        status = close_work.status()
        oldest = "none" if status.oldest_owed_s is None else f"oldest {status.oldest_owed_s:.0f} s"
        self.stdout.write(f"owed: {status.owed} ({oldest}); failed: {status.failed}")
