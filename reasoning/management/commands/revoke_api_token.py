"""Revoke an API token by name; requests with it get 401 from then on."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ServiceError
from reasoning.tokens import revoke_api_token


class Command(BaseCommand):
    help = "Revoke an API token by name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            revoke_api_token(name=options["name"], actor="system:cli")
        except ServiceError as exc:
            raise CommandError(exc.detail) from exc
        self.stdout.write(f"revoked token {options['name']!r}")
