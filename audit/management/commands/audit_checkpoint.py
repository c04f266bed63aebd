"""Sign a checkpoint of the audit log's Merkle tree now (the scheduled job does it every minute)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit.chain import chain_all
from audit.checkpoints import CheckpointRefused, sign_checkpoint


class Command(BaseCommand):
    help = (
        "Sign a C2SP checkpoint of the audit log's Merkle tree when it grew since the latest one, and "
        "print the signed note. Exit 1 when the tree contradicts the latest checkpoint (nothing is signed)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--chain-first", action="store_true", help="Link the events waiting for the chainer first.")
        parser.add_argument("--force", action="store_true", help="Sign even when the tree did not grow.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["chain_first"]:
            chain_all()
        try:
            signed = sign_checkpoint(force=options["force"])
        except CheckpointRefused as exc:
            self.stderr.write(f"audit checkpoint REFUSED: {exc}")
            sys.exit(1)
        if signed.checkpoint is None:
            self.stderr.write(f"the tree did not grow (size {signed.tree_size}): no new checkpoint")
            return
        self.stderr.write(f"signed checkpoint {signed.checkpoint.pk} at tree size {signed.tree_size}")
        self.stdout.write(signed.checkpoint.note, ending="")
