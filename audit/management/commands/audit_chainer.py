"""Run the audit chainer: link committed audit events into the hash chain, continuously.

Safe to run on several hosts at once (an advisory lock admits one chainer at a time).
"""

from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from audit.chain import chain_pending


class Command(BaseCommand):
    help = "Link committed audit events into the hash chain, polling every --interval seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=0.05, help="Idle poll interval in seconds.")
        parser.add_argument("--batch-size", type=int, default=1000)
        parser.add_argument("--once", action="store_true", help="Link what is pending, then exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not stopping:
            linked = chain_pending(options["batch_size"], wait=False)
            if options["once"] and linked < options["batch_size"]:
                break
            if linked < options["batch_size"]:
                time.sleep(options["interval"])
                close_old_connections()
        self.stdout.write("audit chainer stopped")
