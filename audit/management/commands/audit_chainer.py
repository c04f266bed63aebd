"""Run the audit chainer: link committed audit events into the hash chain, continuously.

Safe to run on several hosts at once (an advisory lock admits one chainer at a time).
It survives database restarts: a lost connection is logged and retried with backoff.
"""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit.chain import IDLE_POLL_MAX_S, RECONNECT_MAX_S, run_chainer


class Command(BaseCommand):
    help = (
        "Link committed audit events into the hash chain, polling every --interval seconds while events"
        " come and backing off to --idle-interval when none do."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=0.05, help="Poll interval while events come, in seconds.")
        parser.add_argument(
            "--idle-interval",
            type=float,
            default=IDLE_POLL_MAX_S,
            help="Longest pause between polls that find nothing (each doubles it from --interval), in seconds.",
        )
        parser.add_argument("--batch-size", type=int, default=1000)
        parser.add_argument("--once", action="store_true", help="Link what is pending, then exit.")
        parser.add_argument(
            "--max-backoff",
            type=float,
            default=RECONNECT_MAX_S,
            help="Longest pause between reconnection attempts when the database is down (seconds).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        run_chainer(
            lambda: stopping,
            interval=options["interval"],
            idle_interval=options["idle_interval"],
            batch_size=options["batch_size"],
            once=options["once"],
            max_backoff=options["max_backoff"],
        )
        self.stdout.write("audit chainer stopped")
