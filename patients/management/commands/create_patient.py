"""Create a patient login. The patient's public id is printed alone on the last line."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ServiceError
from patients.services import create_patient


class Command(BaseCommand):
    help = "Create a login and its patient; prints the patient's public id alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--consent", action="store_true", help="Opt the patient in to reading narratives.")
        parser.add_argument("--name", default="")
        parser.add_argument("--date-of-birth", default=None, help="YYYY-MM-DD")
        parser.add_argument("--mrn", default="")
        parser.add_argument("--phone", default="")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        dob = None
        if options["date_of_birth"]:
            try:
                dob = date.fromisoformat(options["date_of_birth"])
            except ValueError as exc:
                raise CommandError("--date-of-birth must be YYYY-MM-DD") from exc
        try:
            patient = create_patient(
                username=options["username"],
                password=options["password"],
                consent=options["consent"],
                name=options["name"],
                date_of_birth=dob,
                mrn=options["mrn"],
                phone=options["phone"],
                email=options["email"],
                actor="system:cli",
            )
        except ServiceError as exc:
            raise CommandError(f"{exc.field or 'error'}: {exc.detail}") from exc
        consent = "on" if patient.reasoning_read_consent else "off"
        self.stdout.write(f"created patient for login {options['username']!r} (reasoning read consent {consent})")
        self.stdout.write(str(patient.pk))
