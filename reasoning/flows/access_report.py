"""Incident response from the audit log: every audited read and write that touched a patient's
data, or that an actor made, in a time window (``manage.py audit_access_report``).

The report reads the audit events themselves (not a second log). For a patient, an event touches
their data when it targets the patient (consent changes, PHI views, their decision list), one of
their flows (narrative, admin, content and raw-reasoning reads, opens and closes, outcomes), a
step of one (``payload.flow_id``) or a turn that held one (``payload.flow_ids``). For an actor
(``token:<name>``, ``user:<id>``, ``system:…``): the events it made. A window narrows either, or
stands alone. Generating a report is itself audited (``admin.audit.access_report``: who asked,
the subject's kind, the window and the row count; the patient as its target), in the same
transaction as the read.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from audit.actions import Action
from audit.models import AuditEvent
from audit.services import record
from core.errors import InvalidInput
from patients.models import Patient
from reasoning.models import ReasoningFlow

COLUMNS = ("id", "created_at", "actor", "action", "target_type", "target_id")
# Each a constant with the flows' ids as one array parameter (a patient's flows are unbounded;
# PostgreSQL takes at most 65,535 parameters a statement, and reads `x IN (…)` as `x = ANY(…)`).
_TURN_HELD = "payload->'flow_ids' ?| %s::text[]"
_FLOW_TARGETED = "target_id = ANY(%s::text[])"
_STEP_OF_FLOW = "payload->>'flow_id' = ANY(%s::text[])"


@dataclass(frozen=True)
class Report:
    rows: int
    events: QuerySet[AuditEvent]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for row in self.events.values_list(*COLUMNS).iterator(chunk_size=2000):
            yield dict(zip(COLUMNS, row, strict=True))


@transaction.atomic
def access_report(
    *,
    requested_by: str,
    patient_id: uuid.UUID | None = None,
    actor: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
) -> Report:
    """The audit events that touched ``patient_id``'s data and/or that ``actor`` made, in
    ``[since, until)``, oldest first. At least one of the four is required; an unknown patient is
    an ``InvalidInput`` naming ``patient``."""
    if patient_id is None and not actor and since is None and until is None:
        raise InvalidInput("name a patient, an actor or a time window", field="patient")
    events = AuditEvent.objects.all()
    target: Patient | None = None
    if patient_id is not None:
        target = Patient.objects.filter(pk=patient_id).first()
        if target is None:
            raise InvalidInput("no patient with this id", field="patient")
        flows = [str(pk) for pk in ReasoningFlow.objects.filter(patient_id=patient_id).values_list("pk", flat=True)]
        touched = Q(target_type=Patient._meta.label_lower, target_id=str(patient_id))
        if flows:
            targeted, step_of, turn = (
                RawSQL(sql, [flows], output_field=BooleanField())  # noqa: S611 (constants; ids are parameters)
                for sql in (_FLOW_TARGETED, _STEP_OF_FLOW, _TURN_HELD)
            )
            touched |= Q(Q(target_type=ReasoningFlow._meta.label_lower) & Q(targeted)) | Q(step_of) | Q(turn)
        events = events.filter(touched)
    if actor:
        events = events.filter(actor=actor)
    if since is not None:
        events = events.filter(created_at__gte=since)
    if until is not None:
        events = events.filter(created_at__lt=until)
    # The rows stop before the report's own event, which the record below writes.
    last = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    events = events.filter(id__lte=last).order_by("id")
    rows = events.count()
    record(
        Action.AUDIT_ACCESS_REPORT,
        actor=requested_by,
        target=target,
        payload={
            "subject": [name for name, given in (("patient", target), ("actor", actor)) if given] or ["window"],
            "actor": actor,
            "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None,
            "rows": rows,
        },
    )
    return Report(rows=rows, events=events)
