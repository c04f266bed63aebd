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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

import psycopg
from django.contrib.postgres.fields import ArrayField
from django.db import connection, models
from django.db.backends.utils import CursorWrapper


@cache
def _statement(model: type[models.Model]) -> tuple[str, tuple[models.Field[Any, Any], ...]]:
    fields = tuple(field for field in model._meta.concrete_fields if not field.generated)
    columns, arrays, selected = [], [], []
    for field in fields:
        column = connection.ops.quote_name(field.column)
        columns.append(column)
        db_type = field.db_type(connection)
        if isinstance(field, ArrayField):
            # An array per row cannot be a row of an unnested 2-D array: send each as the text
            # of an array literal, cast back per row.
            arrays.append("%s::text[]")
            selected.append(f"v.{column}::{db_type}")
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
        if isinstance(field, ArrayField):
            columns.append([None if value is None else array_literal(value) for value in values])
        elif isinstance(field, models.JSONField):
            columns.append([None if value is None else json.dumps(value, cls=field.encoder) for value in values])
        else:
            columns.append([field.get_db_prep_save(value, connection) for value in values])
    with bound_cursor() as cursor:
        cursor.execute(sql, columns)


@contextmanager
def bound_cursor() -> Iterator[CursorWrapper]:
    """A cursor of the request's connection (so: its transaction) that sends parameters apart
    from the statement (server-side binding, binary where psycopg can) instead of quoting
    them into its text as Django's psycopg cursors do: for a statement of a few large
    arrays that quoting costs more than the insert. Wrapped as ``connection.cursor()`` wraps
    its own, so Django's query log and instrumentation see the statement."""
    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    # Django's backend API, unstubbed: what connection.cursor() does with the cursor it creates.
    cursor: CursorWrapper = connection._prepare_cursor(raw)  # type: ignore[attr-defined]
    try:
        yield cursor
    finally:
        cursor.close()


def array_literal(values: Sequence[Any]) -> str:
    """A one-dimensional PostgreSQL array literal: every element double-quoted, with ``\\``
    and ``"`` escaped, so any text is safe; None is NULL."""
    quoted = (
        "NULL" if value is None else '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        for value in values
    )
    return "{" + ",".join(quoted) + "}"
