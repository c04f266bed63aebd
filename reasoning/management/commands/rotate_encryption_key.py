"""Re-encrypt every encrypted column under the first FIELD_ENCRYPTION_KEY."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand
from tqdm import tqdm

from reasoning.encryption import rotate_encryption_key


class Command(BaseCommand):
    help = "Re-encrypt all encrypted values under the first key in FIELD_ENCRYPTION_KEY (run after adding a key)."

    def handle(self, *args: Any, **options: Any) -> None:
        with tqdm(unit="row", desc="re-encrypting", file=sys.stderr) as bar:
            total = rotate_encryption_key(actor="system:cli", on_rows=bar.update)
        self.stdout.write(f"re-encrypted {total} value(s) under the first key")
