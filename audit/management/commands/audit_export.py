"""Write the audit log as plain files for an offline audit (``tools/verify_audit_log.py --dir``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from audit.chain import chain_all
from audit.checkpoints import CheckpointRefused, latest_checkpoint, sign_checkpoint
from audit.export import ExportError, export
from audit.verify import dropped_through


class Command(BaseCommand):
    help = (
        "Export the audit log (events, checkpoints, verifier keys) into an empty directory, for "
        "`python tools/verify_audit_log.py --key KEY --dir DIR`. Links the waiting events and signs a "
        "checkpoint first, so the export covers everything recorded so far."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, type=Path, help="An empty (or new) directory.")
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        chain_all()
        try:
            sign_checkpoint()
        except CheckpointRefused as exc:
            raise CommandError(f"the tree contradicts the latest checkpoint, not exporting: {exc}") from None
        latest = latest_checkpoint()
        total = max(0, latest.tree_size - dropped_through()) if latest is not None else 0
        with tqdm(total=total, unit="event", desc="exporting", disable=options["no_progress"], file=sys.stderr) as bar:
            try:
                done = export(options["out"], on_progress=bar.update)
            except ExportError as exc:
                raise CommandError(str(exc)) from None
        if done.start:
            self.stdout.write(
                f"exported {done.tree_size - done.start} events (positions {done.start + 1}-{done.tree_size}; "
                f"1-{done.start} were dropped by retention, the tree's edge there is in the manifest) "
                f"and {done.checkpoints} checkpoints to {options['out']}"
            )
        else:
            self.stdout.write(
                f"exported {done.tree_size} events and {done.checkpoints} checkpoints to {options['out']}"
            )
