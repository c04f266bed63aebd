"""Key rotation for every encrypted column (patients' PHI, step PII, raw chain-of-thought).

``FIELD_ENCRYPTION_KEY`` lists Fernet keys, newest first: the first encrypts, all
decrypt. After putting a new key in front, ``rotate_encryption_key`` re-encrypts every
stored value under it; the old key can then be dropped.
"""

from __future__ import annotations

from collections.abc import Callable

from django.apps import apps
from django.db import connection, transaction
from django.db.models import Model
from encrypted_model_fields import fields as encrypted_fields
from encrypted_model_fields.fields import EncryptedMixin

from audit.actions import Action
from audit.services import record


def encrypted_columns() -> list[tuple[type[Model], list[str]]]:
    found = []
    for model in apps.get_models():
        columns = [field.column for field in model._meta.concrete_fields if isinstance(field, EncryptedMixin)]
        if columns:
            found.append((model, columns))
    return found


def rotate_encryption_key(*, actor: str, batch_size: int = 500, on_rows: Callable[[int], object] | None = None) -> int:
    """Re-encrypt every encrypted value under the first key; return the number of values.

    Works on the stored tokens (``MultiFernet.rotate``): values are never decrypted into
    Python model objects. Each batch is its own transaction, so a large table does not
    hold locks for long; re-running after an interruption is harmless.
    """
    total = 0
    for model, columns in encrypted_columns():
        table = model._meta.db_table
        pk = model._meta.pk.column
        # Identifiers come from model metadata, never from input.
        select = f"SELECT {pk}, {', '.join(columns)} FROM {table}"  # noqa: S608
        first_page = f"{select} ORDER BY {pk} LIMIT %s"
        next_page = f"{select} WHERE {pk} > %s ORDER BY {pk} LIMIT %s"
        update = f"UPDATE {table} SET {', '.join(f'{c} = %s' for c in columns)} WHERE {pk} = %s"  # noqa: S608
        last = None
        rotated_here = 0
        while True:
            with transaction.atomic(), connection.cursor() as cursor:
                if last is None:
                    cursor.execute(first_page, [batch_size])
                else:
                    cursor.execute(next_page, [last, batch_size])
                rows = cursor.fetchall()
                updates = []
                for row in rows:
                    values = [
                        encrypted_fields.CRYPTER.rotate(value.encode()).decode() if value else value
                        for value in row[1:]
                    ]
                    rotated_here += sum(1 for value in row[1:] if value)
                    updates.append([*values, row[0]])
                cursor.executemany(update, updates)
            if on_rows:
                on_rows(len(rows))
            if len(rows) < batch_size:
                break
            last = rows[-1][0]
        with transaction.atomic():
            record(
                Action.FIELD_ENCRYPTION_ROTATED,
                actor=actor,
                target=("table", table),
                payload={"values": rotated_here},
            )
        total += rotated_here
    return total
