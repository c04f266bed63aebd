"""Set a processor's registry status (and agreement details), with the reason audited."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ServiceError
from processors.catalogue import KNOWN
from processors.models import Processor
from processors.services import set_status


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise CommandError(f"not a date (YYYY-MM-DD): {value!r}") from exc


class Command(BaseCommand):
    help = "Set a processor's status: active, pending_compliance or revoked (audited with the reason)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", choices=sorted(KNOWN), help="The processor's key.")
        parser.add_argument("--status", required=True, choices=Processor.Status.values)
        parser.add_argument("--reason", required=True, help="Why (kept in the audit trail; never patient data).")
        parser.add_argument("--agreement-ref", help="The agreement's reference, e.g. BAA-2026-014.")
        parser.add_argument("--signed-on", type=_day, help="The day the agreement was signed (YYYY-MM-DD).")
        parser.add_argument("--expires-on", type=_day, help="The day it expires (YYYY-MM-DD).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            row = set_status(
                options["key"],
                options["status"],
                actor="system:cli",
                reason=options["reason"],
                agreement_ref=options["agreement_ref"],
                agreement_signed_on=options["signed_on"],
                agreement_expires_on=options["expires_on"],
            )
        except ServiceError as exc:
            raise CommandError(f"{exc.field}: {exc.detail}" if exc.field else exc.detail) from exc
        self.stdout.write(f"{row.key}: {row.status}")
