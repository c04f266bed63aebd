"""Multi-row inserts and keyed reads whose SQL does not depend on the number of rows.

``bulk_create`` writes ``INSERT … VALUES (…), (…), …`` with one placeholder per value: a new
statement text for every batch size, which the driver parses again each time (a 60-step
ingest request is 2,000 placeholders). ``insert_rows`` sends the rows as one JSON array
instead, ``INSERT … SELECT … FROM json_populate_recordset(NULL::table, %s)``: a fixed
statement of one parameter, whatever the number of rows, which Postgres parses into the
table's own column types (one JSON encoding in C, ``json_text``, costs less than psycopg dumping
an array per column in Python). Values are prepared by the model fields
(``get_db_prep_save``: encryption of encrypted fields included), so what is stored is what
``save()`` would store.

``execute_writes`` sends several such writes (and the audit events that record them) as one
statement; ``one_statement`` runs a change that is that one statement without ``BEGIN`` and
``COMMIT`` around it (PostgreSQL makes a lone statement a transaction of its own).

``fetch`` is the read side for the write path's hot lookups (rows by primary key, locked
or not): a statement built once per model, rows turned into instances as the ORM turns
them (each field's ``from_db_value``: decryption included). Compiling the equivalent
queryset costs more CPU than the round trip it makes.
"""

from __future__ import annotations

import enum
import json
import math
import operator
import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from functools import cache, lru_cache, partial
from typing import Any, TypeVar

import msgspec
import psycopg
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models.base import ModelState
from django.db.models.fields import return_None  # type: ignore[attr-defined]  # unstubbed: what a field without a default returns
from django.db.models.signals import post_init, pre_init
from django.utils import timezone
from encrypted_model_fields import fields as encrypted_fields

# How insert_write turns a field's values into its row's JSON (judged once per field, _statement).
_AS_IS, _FLOAT, _DATETIME, _PLAIN, _DECIMAL, _ENCRYPTED, _PREPARED = range(7)
_Column = tuple[str, Callable[[models.Model], Any], int, type | None, models.Field[Any, Any]]


@cache
def _statement(model: type[models.Model]) -> tuple[str, tuple[_Column, ...]]:
    fields = tuple(field for field in model._meta.concrete_fields if not field.generated)
    columns = ", ".join(connection.ops.quote_name(field.column) for field in fields)
    table = connection.ops.quote_name(model._meta.db_table)
    # Identifiers from the model's metadata (quoted), never from input: no injection path.
    sql = (
        f"INSERT INTO {table} ({columns}) SELECT {columns} "  # noqa: S608
        f"FROM json_populate_recordset(NULL::{table}, %s::json)"
    )
    return sql, tuple((field.column, _pre_save(field), *_treatment(field), field) for field in fields)


def _treatment(field: models.Field[Any, Any]) -> tuple[int, type | None]:
    if isinstance(field, ArrayField | models.JSONField):
        return _AS_IS, None
    if isinstance(field, models.FloatField):
        return _FLOAT, None
    if type(field) is models.DateTimeField:
        return _DATETIME, None
    if plain := _PLAIN_FIELDS.get(type(field)):
        return _PLAIN, plain
    # A foreign key's database value is its target field's (ForeignKey.get_db_prep_save).
    if isinstance(field, models.ForeignKey) and (plain := _PLAIN_FIELDS.get(type(field.target_field))):
        return _PLAIN, plain
    if type(field) is models.DecimalField:
        return _DECIMAL, None
    if type(field) is encrypted_fields.EncryptedTextField:
        return _ENCRYPTED, None
    return _PREPARED, None


def _pre_save(field: models.Field[Any, Any]) -> Callable[[models.Model], Any]:
    """``field.pre_save(obj, add=True)`` as a function of ``obj``: ``Field.pre_save`` itself
    reads the attribute, and so do a date's or a date-time's without ``auto_now`` or
    ``auto_now_add``, so those are read by ``attrgetter`` (no Python call); the others go through
    their own. A foreign key's id (a descriptor with a setter, so Python code at every read) is
    taken from the instance's ``__dict__`` where it is."""
    pre_save = type(field).pre_save
    reads = pre_save is models.Field.pre_save or (
        pre_save in _DATE_PRE_SAVES and not (getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))
    )
    if not reads:
        return partial(field.pre_save, add=True)
    if isinstance(field, models.ForeignKey):
        return partial(_dict_value, field.attname)
    return operator.attrgetter(field.attname)


_DATE_PRE_SAVES = (models.DateField.pre_save, models.DateTimeField.pre_save)


def _dict_value(attname: str, obj: models.Model) -> Any:
    # What ForeignKeyDeferredAttribute.__get__ returns when the value is loaded (always, for the
    # instances written here); getattr else (a deferred field: Django loads it).
    values = obj.__dict__
    return values[attname] if attname in values else getattr(obj, attname)


# Field classes (exactly these, not subclasses such as the encrypted fields) whose database
# value is the Python value itself when it has the type named here (or is None).
_PLAIN_FIELDS: dict[type[models.Field[Any, Any]], type] = {
    models.CharField: str,
    models.TextField: str,
    models.IntegerField: int,
    models.PositiveIntegerField: int,
    models.BigIntegerField: int,
    models.BooleanField: bool,
    models.UUIDField: uuid.UUID,  # Postgres has a native uuid type: the value goes as it is
}


def _json_default(value: Any) -> Any:
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    raise TypeError(f"no JSON form for a {type(value).__name__} column value")


# msgspec's encoder writes what ``json.dumps(default=_json_default)`` writes, as Postgres reads it:
# UUIDs in their canonical form, datetimes in RFC 3339 (``Z`` for UTC), decimals as strings;
# UTF-8 instead of ``\u`` escapes. About ten times faster on the write path's rows.
_ENCODER = msgspec.json.Encoder(decimal_format="string")


def json_text(value: Any) -> str:
    """``value`` as JSON text for a ``%s::json`` parameter (``json_to_recordset``,
    ``json_populate_recordset``).

    Non-finite floats are the caller's to turn into text first (``_float``): JSON has none, and
    msgspec would write them as null (the write path's bodies never hold one: the JSON parser
    refuses NaN and the OTLP mapping writes them as strings). What msgspec cannot encode (a lone
    surrogate, a type it does not know) goes through ``json.dumps`` as before, whose error or
    escape Postgres then answers as it always did."""
    try:
        return _ENCODER.encode(value).decode()
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
        return json.dumps(value, default=_json_default, allow_nan=False)


def _float(value: Any) -> Any:
    # JSON has no NaN or infinity; float8 reads them from their text.
    return value if value is None or math.isfinite(value) else repr(value).replace("inf", "Infinity")


@cache
def _select(model: type[models.Model], column: str) -> tuple[str, tuple[str, ...], tuple[Any, ...], str | None]:
    fields = tuple(field for field in model._meta.concrete_fields)
    table = connection.ops.quote_name(model._meta.db_table)
    selected = ", ".join(f"{table}.{connection.ops.quote_name(field.column)}" for field in fields)
    key = next(field for field in fields if field.name == column)
    db_type = key.db_type(connection)
    # Identifiers from the model's metadata (quoted), never from input: no injection path.
    sql = (
        f"SELECT {selected} FROM {table} "  # noqa: S608
        f"WHERE {table}.{connection.ops.quote_name(key.column)} = ANY(%s::{db_type}[]) "
        f"ORDER BY {table}.{connection.ops.quote_name(model._meta.pk.column)}"
    )
    # Each field's from_db_value (Field.get_db_converters, unstubbed), as the compiler applies it.
    converters = tuple(
        (index, field, funcs)
        for index, field in enumerate(fields)
        if (funcs := tuple(field.get_db_converters(connection)))  # type: ignore[attr-defined]
    )
    return sql, tuple(field.attname for field in fields), converters, db_type


def uuid_array(values: Iterable[uuid.UUID]) -> str:
    """``values`` as one array literal (``{…}``) for a ``%s::uuid[]`` parameter.

    One text parameter instead of a list that psycopg quotes (Django's cursors bind on the
    client) or dumps element by element, in Python either way: at a hundred ids a third of the
    CPU. Only for ``uuid.UUID`` values, whose text holds nothing an array literal must escape."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array(values: Iterable[str]) -> str:
    """``values`` as one array literal for a ``%s::text[]`` parameter, as ``uuid_array`` does for
    ids: psycopg dumps a list in Python, element by element (~6 µs for a list of two, against
    1.3 µs for the one string, dumped in C). Every element is quoted, and a backslash or a double quote in it
    escaped, so any text (``NULL``, commas, braces, the empty string) comes back as it went."""
    return "{" + ",".join('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values) + "}"


def int_array(values: Iterable[int]) -> str:
    """``values`` as one array literal for a ``%s::bigint[]`` (or ``smallint[]``) parameter, as
    ``uuid_array`` does for ids."""
    return "{" + ",".join(map(str, values)) + "}"


def bytea_array(values: Iterable[bytes]) -> str:
    """``values`` as one array literal for a ``%s::bytea[]`` parameter: each element in bytea's hex
    form (``\\x…``, its backslash escaped for the array), nothing else to quote. psycopg's text
    dumper escapes each element with regular expressions, in Python: the audit chainer spent
    three fifths of its CPU there."""
    return "{" + ",".join('"\\\\x' + value.hex() + '"' for value in values) + "}"


_CONSTANT_TEXT = re.compile(r"[A-Za-z0-9_.:-]*")


def sql_constant(value: int | str) -> str:
    """A constant of the code (a state, a kind, a threshold) as an SQL literal, to be written into a
    statement's text instead of passed as a parameter. A prepared statement's generic plan
    (``DB_PREPARE_THRESHOLD``) is made without its parameters' values, so ``flow_state = $1`` cannot
    use an index whose predicate is ``flow_state = 'aborted'``: it scans the table, or PostgreSQL
    plans the statement again at every execution. Only integers and plain words: never input."""
    if value.__class__ is int:
        return str(value)
    if value.__class__ is str and _CONSTANT_TEXT.fullmatch(value):  # type: ignore[arg-type]
        return f"'{value}'"
    raise ValueError(f"not a constant for a statement's text: {value!r}")


def execute_unplanned(cursor: CursorWrapper, statement: str, params: Sequence[Any] | None = None) -> None:
    """Run ``statement`` without preparing it, so PostgreSQL plans it at this execution from the
    tables' sizes now. A prepared statement keeps the plan it was given when it was prepared: one
    over a queue that autovacuum had just found empty (``reltuples`` 0) stays a nested loop over
    sequential scans while the queue grows to thousands of rows, and a batch that should take a
    millisecond takes seconds (docs/performance.md, "Plans made for an empty queue"). For statements
    that each do a batch's work: planning one costs a fraction of a millisecond."""
    # What Django's cursor does around a statement: refuse a broken transaction, raise Django's errors
    # (the chainer reconnects on Django's OperationalError, not psycopg's).
    cursor.db.validate_no_broken_transaction()
    with cursor.db.wrap_database_errors:
        cursor.cursor.execute(statement, params, prepare=False)


def opaque_array(sql_type: str) -> str:
    """An array parameter of ``sql_type`` (``uuid[]``, ``text[]``) written so that the planner cannot
    see its elements: ``(SELECT %s::uuid[])::uuid[]``, one placeholder. PostgreSQL keeps planning a
    prepared statement at every execution while the plan made for all values is estimated dearer
    than one made for the values at hand, and it guesses an array parameter at ten elements where
    it counts a given array's: a statement probing by a few ids looked cheaper planned each time
    (~0.1-0.3 ms of PostgreSQL's CPU each). Hidden this way, both plans see the same guess and the
    generic one is kept. For keys that an index finds whatever their number."""
    return f"(SELECT %s::{sql_type})::{sql_type}"


def _keys_param(keys: Collection[Any], db_type: str | None) -> Any:
    if db_type == "uuid" and all(key.__class__ is uuid.UUID for key in keys):
        return uuid_array(keys)
    return list(keys)


M = TypeVar("M", bound=models.Model)


def fetch(model: type[M], keys: Collection[Any], *, column: str = "pk", for_update: bool = False) -> list[M]:
    """Instances of ``model`` whose ``column`` (default: the primary key) is one of ``keys``,
    in primary-key order; ``for_update`` locks them (``SELECT … FOR UPDATE``), so two
    writers that lock overlapping sets wait for each other instead of deadlocking."""
    if not keys:
        return []
    sql, names, converters, db_type = _select(model, model._meta.pk.name if column == "pk" else column)
    if for_update:
        sql += " FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, [_keys_param(keys, db_type)])
        rows = cursor.fetchall()
    objs = []
    for row in rows:
        values = list(row)
        for index, field, funcs in converters:
            for func in funcs:
                values[index] = func(values[index], field, connection)
        objs.append(model.from_db(connection.alias, names, values))
    return objs


@cache
def _attnames(model: type[models.Model]) -> tuple[frozenset[str], tuple[tuple[str, bool, Any], ...]]:
    """The model's attnames, and each field's default: ``(attname, True, callable)`` for a default
    made at each call (a fresh list or dict, a new id), ``(attname, False, value)`` for one that is
    the same value every time (``None``, ``""``, a constant): what ``Field.get_default`` returns."""
    fields = model._meta.concrete_fields
    if len(fields) != len(model._meta.fields) or model._meta.private_fields:
        raise TypeError(f"{model.__name__}: only models of concrete fields")  # what __init__ alone handles
    return frozenset(f.attname for f in fields), tuple((f.attname, *_default(f)) for f in fields)


def _default(field: models.Field[Any, Any]) -> tuple[bool, Any]:
    # Field._get_default (unstubbed): the callable Field.get_default calls, which returns the field's
    # own constant default, None, "" or what a callable default makes.
    get: Callable[[], Any] = field._get_default  # type: ignore[attr-defined]
    if field.has_default() and not callable(field.default):
        default = field.default
        # A choices member (an enum of str or int values) as its value: the same database value, and
        # what an instance read back holds; the row's plain type then needs no conversion (insert_write).
        choice = isinstance(default, enum.Enum) and isinstance(default, str | int)
        return False, default._value_ if choice else default
    if get is return_None:
        return False, None
    if get is str:
        return False, ""
    if get is timezone.now and settings.USE_TZ:
        return True, _utc_now  # the same value, without timezone.now's Python frame and settings read
    return True, get


_utc_now = partial(datetime.now, UTC)


def _forget_defaults(*, setting: str, **kwargs: Any) -> None:
    # The defaults read USE_TZ once (_default): a test that changes it gets them read again.
    if setting == "USE_TZ":
        _attnames.cache_clear()


setting_changed.connect(_forget_defaults, weak=False, dispatch_uid="core.bulk.defaults")


def new_instance(model: type[M], values: dict[str, Any]) -> M:
    """``model(**values)`` for the write path's rows, without ``Model.__init__``'s general keyword
    handling (a third of the cost): each field's value from ``values`` (by ``attname``) or its
    default, set on a fresh instance as ``__init__`` sets them. ``values`` naming anything else
    (a relation by name, a property) goes through ``model(**values)``; so does a model with
    ``pre_init``/``post_init`` receivers, which this would skip."""
    attnames, defaults = _attnames(model)
    # The signals' receiver lists first: has_listeners is Python code, and there are none unless
    # something connected one (then it decides, by sender).
    listened = (pre_init.receivers or post_init.receivers) and (
        pre_init.has_listeners(model) or post_init.has_listeners(model)
    )
    if listened or not attnames.issuperset(values):
        return model(**values)
    obj = model.__new__(model)
    obj._state = ModelState()
    into = obj.__dict__
    for attname, call, default in defaults:
        if attname in values:
            into[attname] = values[attname]
        else:
            into[attname] = default() if call else default
    return obj


@dataclass(frozen=True)
class Write:
    """A write statement that can be sent together with others (``execute_writes``).

    ``parts``: its named steps, ``WITH name AS (sql)`` in order (a part names an earlier one of the
    same write by that name, as a whole word); ``body``: the statement after them; ``params``: the
    parameters of the parts, then of the body, in the order of their placeholders. Constants of
    the code base, never input."""

    body: str
    params: tuple[Any, ...]
    parts: tuple[tuple[str, str], ...] = ()


def execute_writes(writes: Sequence[Write | None], *, returning: str = "") -> list[tuple[Any, ...]]:
    """The writes (``None``: nothing to write) in one statement, one round trip: each becomes
    data-modifying parts of one ``WITH``, the last one's body the statement's own (``returning``
    appended to it; its rows are returned). PostgreSQL runs every part to completion whether or
    not anything reads it, all on the statement's one snapshot: a write cannot see another's rows
    (a foreign key between them must be deferred), and the statement fails or succeeds whole.
    A part's names are made unique to its write (``w0_inserted``, ``w1_inserted``)."""
    present = [write for write in writes if write is not None]
    if not present:
        return []
    sql = _together(tuple((write.body, write.parts) for write in present))
    params = [param for write in present for param in write.params]
    if returning:
        sql += f" RETURNING {returning}"
    block = _block.current
    if block is not None:
        if block.sent:
            raise RuntimeError("one_statement(): the block's writes were sent already, as one statement")
        block.sent = block.sending = True
    try:
        with bound_cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if returning else []
    finally:
        if block is not None:
            block.sending = False


class _Block:
    """The open ``one_statement()`` block of this thread (Django's connections are per thread)."""

    def __init__(self) -> None:
        self.sent = False
        self.sending = False
        self.after: list[Callable[[], None]] = []


class _Blocks(threading.local):
    current: _Block | None = None


_block = _Blocks()


@contextmanager
def one_statement() -> Iterator[None]:
    """The block's writes as one statement with no transaction around it.

    PostgreSQL runs a statement sent outside a transaction as a transaction of its own: all of it
    or nothing, its deferred constraints checked at its end, durable when its answer comes. So a
    change whose rows ``execute_writes`` sends together (with their audit events) needs neither
    ``BEGIN`` nor ``COMMIT``: two round trips, ~0.12 ms of CPU between the web worker and
    PostgreSQL. Inside the block: reads, each of which sees what is committed (as at READ COMMITTED
    in a transaction), then one ``execute_writes``. Anything else is refused before it is sent: a
    statement that is not a ``SELECT``, a ``SELECT … FOR UPDATE`` (a lock would end with its
    statement), a second ``execute_writes``. ``after_commit`` callbacks run when the block ends
    without an error. Not inside a transaction."""
    db = connections[DEFAULT_DB_ALIAS]  # the proxy ``connection`` looks it up at every use
    if db.in_atomic_block or not db.get_autocommit():
        raise RuntimeError("one_statement() runs outside any transaction")
    if _block.current is not None:
        raise RuntimeError("one_statement() blocks do not nest")
    block = _block.current = _Block()
    try:
        with db.execute_wrapper(_reads_or_the_statement):
            yield
    finally:
        _block.current = None
    for callback in block.after:
        callback()


def in_one_statement() -> bool:
    """Whether a ``one_statement()`` block is open: its one statement is the transaction."""
    return _block.current is not None


def in_transaction() -> bool:
    """Whether the writes made here commit together, with the audit events that record them: in a
    transaction (an atomic block), or as the one statement of a ``one_statement()`` block."""
    return connection.in_atomic_block or _block.current is not None


def after_commit(callback: Callable[[], None]) -> None:
    """``callback`` once the change is committed: at the end of the transaction
    (``transaction.on_commit``), or of the ``one_statement()`` block."""
    block = _block.current
    if block is None:
        transaction.on_commit(callback)
    else:
        block.after.append(callback)


# A read: a SELECT, or a WITH without a data-modifying part; and no row lock.
_READ = re.compile(r"\s*(?:SELECT|WITH\b(?!.*\b(?:INSERT|UPDATE|DELETE|MERGE)\b))", re.IGNORECASE | re.DOTALL)
_LOCK = re.compile(r"\bFOR\s+(?:UPDATE|SHARE|NO\s+KEY\s+UPDATE|KEY\s+SHARE)\b", re.IGNORECASE)


@lru_cache(maxsize=512)
def _is_read(sql: str) -> bool:
    # Statements are constants of the code (their parameters apart): each text is judged once.
    return _READ.match(sql) is not None and _LOCK.search(sql) is None


def _reads_or_the_statement(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
    block = _block.current
    if block is not None and not block.sending and not _is_read(sql):
        raise RuntimeError(f"one_statement(): only reads may run before its statement, not {sql[:60]!r}")
    return execute(sql, params, many, context)


@lru_cache(maxsize=256)
def _together(writes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]) -> str:
    """The statement of ``execute_writes`` for writes of these bodies and parts (constants of the
    code: a few shapes, each composed once)."""
    parts: list[str] = []
    last = ""
    for index, (body, named) in enumerate(writes):
        renames = [(re.compile(rf"\b{re.escape(name)}\b"), f"w{index}_{name}") for name, _ in named]

        def unique(text: str, renames: list[tuple[re.Pattern[str], str]] = renames) -> str:
            for pattern, new_name in renames:
                text = pattern.sub(new_name, text)
            return text

        parts.extend(f"w{index}_{name} AS ({unique(sql)})" for name, sql in named)
        if index < len(writes) - 1:
            parts.append(f"w{index} AS ({unique(body)})")
        else:
            last = unique(body)
    return f"WITH {', '.join(parts)} {last}" if parts else last


def insert_write(objs: Sequence[models.Model], *, returning: str = "", then: str = "") -> Write | None:
    """The ``Write`` that inserts unsaved instances of one model (primary keys set by the caller)
    (``None`` for none).

    ``then``: a statement over the inserted rows, made part of the same one (no round trip of its
    own): ``WITH inserted AS (INSERT … RETURNING <returning>) <then>``, ``then`` reading the
    relation ``inserted`` (its columns: ``returning``). Constants of the caller's code, never input."""
    if not objs:
        return None
    model = type(objs[0])
    sql, columns = _statement(model)
    db = connections[DEFAULT_DB_ALIAS]  # the fields ask their connection for its operations at every value
    rows: list[dict[str, Any]] = [{} for _ in objs]
    for column, pre_save, treatment, plain, field in columns:
        values: Iterator[Any] = map(pre_save, objs)
        value: Any  # each branch's loop variable (one annotation for the compiled build)
        if treatment == _AS_IS:
            # The document (or the list) itself: the row's JSON carries it to the column.
            for row, value in zip(rows, values, strict=True):
                row[column] = value
        elif treatment == _PLAIN:
            # What get_db_prep_save would return for these, without its chain of calls.
            for row, value in zip(rows, values, strict=True):
                row[column] = value if value is None or value.__class__ is plain else field.get_db_prep_save(value, db)
        elif treatment == _DATETIME:
            for row, value in zip(rows, values, strict=True):
                # An aware datetime is its own database value: get_db_prep_save converts strings, and
                # naive datetimes (with a warning).
                aware = value is None or (value.__class__ is datetime and value.utcoffset() is not None)
                row[column] = value if aware else field.get_db_prep_save(value, db)
        elif treatment == _DECIMAL:
            for row, value in zip(rows, values, strict=True):
                # A finite Decimal is its own database value (DecimalField.to_python copies it, and
                # PostgreSQL's operations adapt it as it is); anything else as the field prepares it.
                finite = value is None or (value.__class__ is Decimal and value.is_finite())
                row[column] = value if finite else field.get_db_prep_save(value, db)
        elif treatment == _FLOAT:
            for row, value in zip(rows, values, strict=True):
                row[column] = _float(value)
        elif treatment == _ENCRYPTED:
            # Text is encrypted as it is: get_db_prep_save would first try to decrypt it (to_python),
            # an exception for every value, and then encrypt it the same way.
            encrypt = encrypted_fields.encrypt_str  # the field's own: its module's keys (CRYPTER)
            for row, value in zip(rows, values, strict=True):
                row[column] = (
                    value
                    if value is None
                    else encrypt(value).decode("ascii")
                    if value.__class__ is str
                    else field.get_db_prep_save(value, db)
                )
        else:
            for row, value in zip(rows, values, strict=True):
                row[column] = field.get_db_prep_save(value, db)
    params = (json_text(rows),)
    if then:
        return Write(then, params, parts=(("inserted", f"{sql} RETURNING {returning}"),))
    return Write(sql, params)


def insert_rows(objs: Sequence[models.Model], *, returning: str = "", then: str = "") -> None:
    """Insert unsaved instances of one model (primary keys set by the caller), in one statement
    (``insert_write``, sent alone)."""
    execute_writes([insert_write(objs, returning=returning, then=then)])


@contextmanager
def bound_cursor(db: BaseDatabaseWrapper | None = None) -> Iterator[CursorWrapper]:
    """A cursor of the request's connection (so: its transaction) that sends parameters apart
    from the statement (server-side binding, binary where psycopg can) whatever
    ``DB_SERVER_SIDE_BINDING`` says: with it off, Django's psycopg cursors quote them into the
    text, and for a statement of a few large arrays that quoting costs more than the insert
    (with it on, the default, this is the cursor ``connection.cursor()`` gives). Wrapped as
    ``connection.cursor()`` wraps its own, so Django's query log and instrumentation see the
    statement. ``db``: another
    connection than the default one (a read: ``core.replica.reading_connection()``)."""
    db = db or connection
    db.ensure_connection()
    raw = psycopg.Cursor(db.connection)
    # Django's backend API, unstubbed: what connection.cursor() does with the cursor it creates.
    cursor: CursorWrapper = db._prepare_cursor(raw)  # type: ignore[attr-defined]
    try:
        yield cursor
    finally:
        cursor.close()
