"""Give an API token a new secret; the old one keeps working for a grace period."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ServiceError
from reasoning.tokens import ROTATION_GRACE, rotate_api_token


class Command(BaseCommand):
    help = (
        "Give an API token a new secret (printed once). The old secret keeps working for "
        "--grace-hours (default 24; 0: stops at once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--grace-hours", type=float, default=ROTATION_GRACE.total_seconds() / 3600, help="default 24"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        grace = timedelta(hours=options["grace_hours"])
        try:
            token, raw = rotate_api_token(name=options["name"], actor="system:cli", grace=grace)
        except ServiceError as exc:
            raise CommandError(f"{exc.field}: {exc.detail}" if exc.field else exc.detail) from exc
        until = token.previous_valid_until
        self.stdout.write(raw)
        self.stderr.write(
            f"rotated token {token.name!r}: the new secret is above (shown once); "
            + (f"the old one works until {until:%Y-%m-%d %H:%M} UTC" if grace else "the old one no longer works")
        )
