"""Verify the audit hash chain end to end.

Exit status 0 when intact (prints the number of links checked), 1 at the first break
(prints its chain position and event sequence number).
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from tqdm import tqdm

from audit.chain import chain_all, chain_length, verify_chain


class Command(BaseCommand):
    help = "Walk the audit hash chain and report the first broken link, if any."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--chain-first",
            action="store_true",
            help="Link any committed events still waiting for the chainer before verifying.",
        )
        parser.add_argument("--no-progress", action="store_true", help="Hide the progress bar.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["chain_first"]:
            chain_all()
        total = chain_length()
        with tqdm(
            total=total,
            unit="link",
            desc="verifying",
            disable=options["no_progress"],
            file=sys.stderr,
        ) as bar:
            result = verify_chain(on_progress=bar.update)
        if result.broken is not None:
            self.stderr.write(f"audit chain BROKEN at {result.broken.describe()}")
            self.stdout.write(f"checked {result.linked} links before the break")
            sys.exit(1)
        tail = f"; {result.pending} events awaiting chaining" if result.pending else ""
        self.stdout.write(f"audit chain intact: {result.linked} links verified{tail}")
