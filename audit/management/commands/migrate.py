"""``manage.py migrate``, as the owner role when ``DATABASE_MIGRATION_URL`` is set, then
granting the application role its privileges (``audit.privileges``)."""

from __future__ import annotations

from typing import Any

from django.core.management.commands import migrate

from audit.privileges import as_owner, grant_application_role


class Command(migrate.Command):
    help = (
        f"{migrate.Command.help} Connects as the owner role when DATABASE_MIGRATION_URL is set, and then "
        "grants DATABASE_URL's role what the application may do (docs/deploy.md, 'Database roles')."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        database = options["database"]
        with as_owner(database):
            super().handle(*args, **options)
            role = grant_application_role(database)
        if role and options["verbosity"] >= 1:
            self.stdout.write(
                f"Granted role {role} the application's privileges (audit tables: INSERT and SELECT only)."
            )
