"""Create an API token. The raw token is printed alone on the last line of stdout."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from core.errors import ServiceError
from reasoning.models import ApiToken
from reasoning.tokens import create_api_token


class Command(BaseCommand):
    help = "Create an API token; prints the raw token (shown once) alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="Unique name; audit events name the token by it.")
        parser.add_argument(
            "--scopes",
            required=True,
            help=f"Comma-separated, from: {', '.join(ApiToken.Scope.values)}",
        )
        parser.add_argument("--expires-in-days", type=int, default=None, help="Expire after N days (default: never).")
        parser.add_argument(
            "--patient",
            default=None,
            help="Bind the token to this patient id (reasoning.read only): it reads that patient's narratives.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        scopes = [scope.strip() for scope in options["scopes"].split(",") if scope.strip()]
        expires_at = None
        if options["expires_in_days"] is not None:
            if options["expires_in_days"] < 1:
                raise CommandError("--expires-in-days must be at least 1")
            expires_at = timezone.now() + timedelta(days=options["expires_in_days"])
        patient_id = None
        if options["patient"]:
            try:
                patient_id = uuid.UUID(options["patient"])
            except ValueError as exc:
                raise CommandError("--patient must be a patient id (UUID)") from exc
        try:
            token, raw = create_api_token(
                name=options["name"], scopes=scopes, expires_at=expires_at, actor="system:cli", patient_id=patient_id
            )
        except ServiceError as exc:
            raise CommandError(f"{exc.field or 'error'}: {exc.detail}") from exc
        expiry = token.expires_at.isoformat() if token.expires_at else "never"
        self.stdout.write(f"created token {token.name!r} scopes={','.join(token.scopes)} expires={expiry}")
        self.stdout.write("store it now: it is not shown again")
        self.stdout.write(raw)
