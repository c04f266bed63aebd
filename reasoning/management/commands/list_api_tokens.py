"""List API tokens: names, scopes, state and last use; never a secret or its hash."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from reasoning.models import ApiToken

COLUMNS = ("name", "prefix", "scopes", "patient", "state", "created", "expires", "rotated", "last used")


def _when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M}" if value else "-"


class Command(BaseCommand):
    help = "List API tokens (name, secret prefix, scopes, state, created, expires, rotated, last used), never secrets."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--all", action="store_true", help="include revoked and expired tokens")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        rows = []
        for token in ApiToken.objects.order_by("name"):
            if token.revoked_at is not None:
                state = "revoked"
            elif token.expires_at is not None and token.expires_at <= now:
                state = "expired"
            else:
                state = "active"
            if state != "active" and not options["all"]:
                continue
            rows.append(
                (
                    token.name,
                    f"{token.prefix}…",
                    ",".join(token.scopes),
                    "yes" if token.patient_id else "-",
                    state,
                    _when(token.created_at),
                    _when(token.expires_at),
                    _when(token.rotated_at),
                    _when(token.last_used_at),
                )
            )
        if not rows:
            self.stdout.write("no tokens" + ("" if options["all"] else " (active; --all for every one)"))
            return
        widths = [max(len(COLUMNS[i]), *(len(row[i]) for row in rows)) for i in range(len(COLUMNS))]
        for row in (COLUMNS, *rows):
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        self.stdout.write("times in UTC")
