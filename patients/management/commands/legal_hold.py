"""Put a patient under legal hold, or lift it (audited): while it holds, retention keeps every
month of steps that holds one of the patient's flows (docs/deploy.md, "Retention by partition")."""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from patients.models import Patient
from patients.services import set_legal_hold


class Command(BaseCommand):
    help = "Set or lift a patient's legal hold (retention keeps the partitions holding their flows)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("patient_id", help="The patient's id (UUID).")
        state = parser.add_mutually_exclusive_group(required=True)
        state.add_argument("--on", action="store_true", help="Put the patient under legal hold.")
        state.add_argument("--off", action="store_true", help="Lift the patient's legal hold.")
        parser.add_argument("--actor", default="system:cli", help="Who asks, for the audit trail.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            patient_id = uuid.UUID(options["patient_id"])
        except ValueError as exc:
            raise CommandError(f"patient_id: not a UUID: {options['patient_id']!r}") from exc
        if not Patient.objects.filter(pk=patient_id).exists():
            raise CommandError(f"patient_id: no patient {patient_id}")
        held = bool(options["on"])
        changed = set_legal_hold(patient_id, held=held, actor=options["actor"])
        state = "under legal hold" if held else "not under legal hold"
        self.stdout.write(f"patient {patient_id} is {state}" + ("" if changed else " (unchanged)"))
