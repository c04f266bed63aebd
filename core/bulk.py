"""Multi-row inserts whose SQL does not depend on the number of rows.

``bulk_create`` writes ``INSERT … VALUES (…), (…), …`` with one placeholder per value: a new
statement text for every batch size, which the driver parses again each time (a 60-step
ingest request is 2,000 placeholders). ``insert_rows`` sends one array per column instead,
``INSERT … SELECT … FROM unnest(%s::type[], …)``: a fixed statement of a few dozen
parameters, whatever the number of rows. Values are prepared by the model fields
(``get_db_prep_save``: encryption of encrypted fields included), so what is stored is what
``save()`` would store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from django.contrib.postgres.fields import ArrayField
from django.db import connection, models


@cache
def _statement(model: type[models.Model]) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    fields = tuple(field for field in model._meta.concrete_fields if not field.generated)
    columns, arrays, selected = [], [], []
    for field in fields:
        column = connection.ops.quote_name(field.column)
        columns.append(column)
        db_type = field.db_type(connection)
        if isinstance(field, ArrayField):
            # An array per row cannot be a row of an unnested 2-D array: send each as JSON text.
            arrays.append("%s::text[]")
            element = field.base_field.db_type(connection)
            selected.append(f"ARRAY(SELECT jsonb_array_elements_text(v.{column}::jsonb))::{element}[]")
        elif isinstance(field, models.JSONField):
            arrays.append("%s::text[]")
            selected.append(f"v.{column}::jsonb")
        else:
            arrays.append(f"%s::{db_type}[]")
            selected.append(f"v.{column}")
    table = connection.ops.quote_name(model._meta.db_table)
    # Identifiers from the model's metadata (quoted), never from input: no injection path.
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(selected)} "  # noqa: S608
        f"FROM unnest({', '.join(arrays)}) AS v({', '.join(columns)})"
    )
    return sql, fields


def insert_rows(objs: Sequence[models.Model]) -> None:
    """Insert unsaved instances of one model (primary keys set by the caller), in one statement."""
    if not objs:
        return
    model = type(objs[0])
    sql, fields = _statement(model)
    columns: list[list[Any]] = []
    for field in fields:
        values = [field.pre_save(obj, add=True) for obj in objs]
        if isinstance(field, ArrayField | models.JSONField):
            columns.append([None if value is None else json.dumps(value, cls=field_encoder(field)) for value in values])
        else:
            columns.append([field.get_db_prep_save(value, connection) for value in values])
    with connection.cursor() as cursor:
        cursor.execute(sql, columns)


def field_encoder(field: models.Field[Any, Any]) -> type[json.JSONEncoder] | None:
    encoder = getattr(field, "encoder", None)
    if encoder is not None:
        return encoder  # type: ignore[no-any-return]
    base = getattr(field, "base_field", None)
    return _UUIDEncoder if isinstance(base, models.UUIDField) else None


class _UUIDEncoder(json.JSONEncoder):
    def default(self, o: Any) -> Any:
        return str(o)
