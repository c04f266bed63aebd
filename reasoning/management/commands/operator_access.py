"""Grant or revoke what an operator may read beyond metadata: steps' decrypted content, raw reasoning.

    manage.py operator_access USERNAME [--content on|off] [--reasoning on|off]

Without a change, prints what the operator may read. Each change is audited
(``auth.operator.access_changed``) by the service, ``reasoning.tokens.set_operator_access``.
A superuser holds every permission whatever this says (Django's rule).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ServiceError
from reasoning.tokens import OPERATOR_ACCESS, set_operator_access

SWITCH = {"on": True, "off": False}


class Command(BaseCommand):
    help = "Grant or revoke an operator's reading of steps' decrypted content and raw reasoning."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        for name in OPERATOR_ACCESS:
            parser.add_argument(f"--{name}", choices=sorted(SWITCH), help=f"may read steps' {name} (on) or not (off)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user named {options['username']!r}")
        changes = {name: SWITCH[options[name]] for name in OPERATOR_ACCESS if options[name] is not None}
        if changes:
            try:
                set_operator_access(user, actor="system:cli", **changes)
            except ServiceError as exc:
                raise CommandError(exc.detail) from exc
        for name, codename in OPERATOR_ACCESS.items():
            allowed = user.has_perm(f"reasoning.{codename}")
            note = " (a superuser)" if user.is_superuser else ""
            self.stdout.write(f"{name}: {'yes' if allowed else 'no'}{note}")
