"""``record()``: the one way to write an audit event.

Call it inside the transaction that makes the change: the event and the change commit
or roll back together. The event is chained shortly after commit by ``audit.chain``.
The database, not this process, stamps each event's time (``created_at``, trigger
``audit_event_stamp``), so no writer can backdate one.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

from django.db import models, transaction
from django.db.models.options import Options

from audit.actions import Action
from audit.canonical import canonical_bytes
from core.bulk import Write, execute_writes, in_transaction

Target: TypeAlias = models.Model | tuple[str, object] | None

# Keys that carry content rather than ids and counts; they never belong in a payload.
_FORBIDDEN_KEYS = frozenset(
    {
        "summary_text",
        "trigger_summary",
        "outcome_summary",
        "rationale",
        "inputs",
        "outputs",
        "reasoning_content",
        "name",
        "email",
        "phone",
        "mrn",
        "date_of_birth",
        "token",
        "password",
    }
)
_MAX_STRING = 200


class AuditPayloadError(ValueError):
    """A payload carried something other than ids, labels and counts."""


@dataclass(init=False)
class Event:
    """One audit event to write with ``record_many``."""

    action: Action
    actor: str
    target: Target
    payload: dict[str, Any] | None

    # An explicit __init__ (the dataclass makes __eq__ and __repr__): compiled (core.compiled), it is a
    # native call, where a generated one runs as Python (a frozen one through object.__setattr__).
    def __init__(
        self, action: Action, actor: str, target: Target = None, payload: dict[str, Any] | None = None
    ) -> None:
        self.action = action
        self.actor = actor
        self.target = target
        self.payload = payload


def record(action: Action, *, actor: str, target: Target = None, payload: dict[str, Any] | None = None) -> int:
    """Write one audit event in the current transaction; return its sequence number.

    ``target`` is a model instance or a ``(type, id)`` pair. ``payload`` holds ids,
    labels and counts only: strings are capped, known content keys are refused, and so
    is anything whose canonical bytes could not be rebuilt from the stored jsonb
    (non-string keys, NUL characters, floats in exponent notation, -0.0).
    """
    return record_many([Event(action, actor, target, payload)])[0]


def record_many(events: Sequence[Event]) -> list[int]:
    """Write audit events in the current transaction, in one statement whatever their
    number (the bulk ingest path); return their sequence numbers, in order. Each event
    is checked as ``record()`` checks it; one bad payload refuses them all."""
    write = events_write(events)
    if write is None:
        return []
    return sorted(int(row[0]) for row in execute_writes([write], returning="event_id"))


def events_write(events: Sequence[Event]) -> Write | None:
    """The statement that writes ``events`` (checked as ``record_many`` checks them), to be sent
    with the change it records in one statement (``core.bulk.execute_writes``, in the same
    transaction); ``None`` for none."""
    if not in_transaction():
        raise RuntimeError("audit.record() must run inside the transaction of the change it records")
    if not events:
        return None
    documents: list[bytes] = []
    for event in events:
        if not isinstance(event.action, Action):
            raise TypeError(f"audit action must be an audit.actions.Action, got {event.action!r}")
        payload = dict(event.payload or {})
        _check_payload(payload)
        target_type, target_id = _target(event.target)
        documents.append(
            canonical_bytes(
                action=event.action._value_,  # the member's own attribute: .value is Python code
                actor=event.actor,
                target_type=target_type,
                target_id=target_id,
                payload=payload,
                created_at=None,  # stamped by the database (trigger audit_event_stamp)
            )
        )
    # One parameter: the events' canonical bytes, a line each (the encoders escape every line feed
    # inside a string, and write none between tokens), from which the statement takes the columns
    # too: each event's JSON is encoded once, and its bytes are stored exactly as they were written.
    # Then their places in the chainer's queue.
    return Write(
        "INSERT INTO audit_pending (event_id) SELECT id FROM event ORDER BY id",
        (b"\n".join(documents).decode(),),
        parts=(("event", _INSERT_EVENTS),),
    )


# Each line's columns read by json_to_record (one pass over the line, as json_to_recordset read the
# rows before: a jsonb cast and five lookups cost PostgreSQL a third more); convert_to(…, 'UTF8'):
# the line's own bytes (the database's encoding is UTF-8).
_INSERT_EVENTS = """
INSERT INTO audit_event (action, actor, target_type, target_id, payload, canonical)
SELECT r.action, r.actor, r.target_type, r.target_id, r.payload, convert_to(e.line, 'UTF8')
FROM string_to_table(%s, E'\\n') WITH ORDINALITY AS e(line, n),
    json_to_record(e.line::json) AS r(action text, actor text, target_type text, target_id text, payload jsonb)
ORDER BY e.n
RETURNING id
"""


# A model's label by its options (Options.label_lower is a Python property, computed at every read).
# By the options, not the class: a target may be a lazy object (the request's user) standing for one.
_LABELS: dict[Options[Any], str] = {}


def _label_of(meta: Options[Any]) -> str:
    label = _LABELS.get(meta)
    if label is None:
        label = _LABELS[meta] = meta.label_lower
    return label


def _target(target: Target) -> tuple[str, str | uuid.UUID]:
    """The target's type and id (a ``UUID`` as it is: the canonical encoder writes its text)."""
    if target is None:
        return "", ""
    if isinstance(target, models.Model):
        # By the primary key's attribute: ``Model.pk`` is a Python property.
        pk = getattr(target, target._meta.pk.attname)
        return _label_of(target._meta), pk if pk.__class__ is uuid.UUID else str(pk)
    kind, ident = target
    return kind, ident if ident.__class__ is uuid.UUID else str(ident)  # type: ignore[return-value]


def _check_payload(payload: dict[Any, Any], depth: int = 0) -> None:
    if depth > 2:
        raise AuditPayloadError("audit payload nests too deeply")
    for key, value in payload.items():
        # json.dumps would write 1 and "1" as the same key, and jsonb keeps only one.
        if not isinstance(key, str):
            raise AuditPayloadError(f"audit payload key {key!r} is not a string")
        if "\x00" in key:
            raise AuditPayloadError(f"audit payload key {key!r} contains a NUL character")
        if key in _FORBIDDEN_KEYS:
            raise AuditPayloadError(f"audit payload key {key!r} carries content, not ids or counts")
        _check_value(key, value, depth)


def _check_value(key: str, value: Any, depth: int) -> None:
    if isinstance(value, float):
        _check_float(key, value)
        return
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, str):
        if len(value) > _MAX_STRING:
            raise AuditPayloadError(f"audit payload value for {key!r} is longer than {_MAX_STRING} characters")
        # jsonb cannot store U+0000.
        if "\x00" in value:
            raise AuditPayloadError(f"audit payload value for {key!r} contains a NUL character")
        return
    if isinstance(value, list | tuple):
        for item in value:
            _check_value(key, item, depth + 1)
        return
    if isinstance(value, dict):
        _check_payload(value, depth + 1)
        return
    raise AuditPayloadError(f"audit payload value for {key!r} has unsupported type {type(value).__name__}")


def _check_float(key: str, value: float) -> None:
    """Accept only floats whose JSON text jsonb gives back unchanged.

    jsonb stores numbers as numeric and prints them without exponent and without a
    sign on zero: ``1e+23`` comes back as ``100000000000000000000000`` (an integer) and
    ``-0.0`` as ``0.0``, so their canonical bytes could not be rebuilt from the column.
    Python writes a float in exponent notation when it is below 1e-4 or at least 1e16.
    """
    if not math.isfinite(value):
        raise AuditPayloadError(f"audit payload value for {key!r} is not a finite number")
    text = float.__repr__(value)
    if "e" in text or (value == 0 and math.copysign(1.0, value) < 0):
        raise AuditPayloadError(
            f"audit payload value for {key!r} is a float that jsonb does not keep as written "
            "(exponent notation or negative zero); send an integer or round it"
        )


def payload_float(value: float | None) -> float | int | None:
    """The nearest number ``record()`` accepts for a float the caller does not control
    (a client's confidence, a computed ratio): below 1e-4 in magnitude it is rounded to
    four decimals (0.0 or ±0.0001), -0.0 becomes 0.0, from 1e16 on it becomes an integer."""
    if value is None or not math.isfinite(value):
        return value
    if abs(value) >= 1e16:
        return int(value)
    if "e" in float.__repr__(value):
        value = round(value, 4)
    return value + 0.0  # -0.0 + 0.0 is 0.0


@contextmanager
def job_run(job: str, *, actor: str, payload: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Audit one run of a scheduled job: ``memory.job.<job>.started``, then ``.completed``
    with the counts the job put in the yielded dict, or ``.error`` with those counts and
    the exception's type (the exception propagates). Each event commits on its own, so
    the trail shows a run that failed half-way.
    """
    started, completed, error = (Action(f"memory.job.{job}.{phase}") for phase in ("started", "completed", "error"))
    with transaction.atomic():
        record(started, actor=actor, payload=payload)
    counts: dict[str, Any] = {}
    try:
        yield counts
    except Exception as exc:
        with transaction.atomic():
            record(error, actor=actor, payload={**counts, "error_type": type(exc).__name__})
        raise
    with transaction.atomic():
        record(completed, actor=actor, payload=counts)
