"""List the processor registry: every catalogue processor, registered or not."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from processors.catalogue import KNOWN
from processors.models import Processor


class Command(BaseCommand):
    help = "List external processors with their status and agreement."

    def handle(self, *args: Any, **options: Any) -> None:
        rows = {row.key: row for row in Processor.objects.all()}
        self.stdout.write(f"{'key':<20} {'status':<20} {'leaves host':<12} {'agreement':<20} expires")
        for key in sorted(KNOWN.keys() | rows.keys()):
            row = rows.get(key)
            if row is None:
                leaves = "yes" if KNOWN[key].leaves_host else "no"
                self.stdout.write(f"{key:<20} {'not_registered':<20} {leaves:<12} {'-':<20} -")
                continue
            expires = row.agreement_expires_on.isoformat() if row.agreement_expires_on else "-"
            leaves = "yes" if row.leaves_host else "no"
            self.stdout.write(f"{key:<20} {row.status:<20} {leaves:<12} {row.agreement_ref or '-':<20} {expires}")
