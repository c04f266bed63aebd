"""Every change to the processor registry, and the one gate outbound text passes.

``register`` and ``set_status`` write a ``Processor`` row and its audit event in one
transaction. ``check_outbound`` is asked before every call that sends text off this host
(the vendor embedding clients, the research dispatcher webhook): it returns when the
processor may receive the text and raises ``ProcessorNotActive`` otherwise.
"""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import record
from core.errors import InvalidInput, NotFound, ServiceError
from processors.catalogue import KNOWN, is_builtin
from processors.models import Processor

Status = Processor.Status
PROCESSOR_NOT_ACTIVE = "processor_not_active"
# The gate's decisions are written by whatever process sends the text (a web worker, a job).
GATE_ACTOR = "system:processor_gate"
REASON_MAX = 200
# How long the once-an-hour refusal rows are kept (they only decide who audits the current hour).
REFUSAL_ROWS_KEPT = timedelta(days=1)


class ProcessorNotActive(ServiceError):
    """The processor may not receive this text. ``cause`` says why, as a label:
    ``not_registered``, ``pending_compliance``, ``revoked``, ``agreement_expired`` or
    ``category_not_covered``. The message names the processor and the cause, never the text."""

    status_code = 403
    code = PROCESSOR_NOT_ACTIVE

    def __init__(self, key: str, cause: str) -> None:
        super().__init__(f"processor {key!r} may not receive text: {cause}")
        self.key = key
        self.cause = cause


def _target(key: str) -> tuple[str, str]:
    return ("processors.processor", key)


def _agreement_payload(row: Processor) -> dict[str, str | None]:
    return {
        "agreement_ref": row.agreement_ref,
        "agreement_signed_on": row.agreement_signed_on.isoformat() if row.agreement_signed_on else None,
        "agreement_expires_on": row.agreement_expires_on.isoformat() if row.agreement_expires_on else None,
    }


@transaction.atomic
def register(key: str, *, actor: str, status: str | None = None) -> tuple[Processor, bool]:
    """Create the registry row of a catalogue processor; idempotent. Returns ``(row, created)``.

    A new row takes its name, categories and host flag from ``processors.catalogue``;
    built-ins are always ``active``, others start ``pending_compliance`` unless ``status``
    says otherwise. An existing row is returned unchanged (status changes are
    ``set_status``). Audited as ``processor.registered`` when created.
    """
    known = KNOWN.get(key)
    if known is None:
        raise NotFound(f"no processor {key!r} in the catalogue (known: {', '.join(sorted(KNOWN))})", field="key")
    if status is not None and status not in Status.values:
        raise InvalidInput(f"must be one of {', '.join(Status.values)}", field="status")
    initial = Status.ACTIVE if not known.leaves_host else (status or Status.PENDING_COMPLIANCE)
    row, created = Processor.objects.get_or_create(
        key=key,
        defaults={
            "display_name": known.display_name,
            "leaves_host": known.leaves_host,
            "data_categories": list(known.data_categories),
            "status": initial,
            "changed_by": actor,
            "changed_at": timezone.now(),
        },
    )
    if created:
        record(
            Action.PROCESSOR_REGISTERED,
            actor=actor,
            target=_target(key),
            payload={"key": key, "status": row.status, "leaves_host": row.leaves_host},
        )
    return row, created


@transaction.atomic
def set_status(
    key: str,
    status: str,
    *,
    actor: str,
    reason: str,
    agreement_ref: str | None = None,
    agreement_signed_on: date | None = None,
    agreement_expires_on: date | None = None,
) -> Processor:
    """Change a processor's status and agreement details; audited as ``processor.status_changed``.

    ``reason`` (required, at most 200 characters: the operator's words about the agreement,
    never patient data) goes into the audit event. Agreement fields left ``None`` keep their
    value. A catalogue processor with no row yet is registered first. Built-ins are always
    active: another status for them is refused.
    """
    reason = " ".join((reason or "").split())
    if not reason:
        raise InvalidInput("is required: say why the status changes", field="reason")
    if len(reason) > REASON_MAX:
        raise InvalidInput(f"must be at most {REASON_MAX} characters", field="reason")
    if status not in Status.values:
        raise InvalidInput(f"must be one of {', '.join(Status.values)}", field="status")
    if is_builtin(key) and status != Status.ACTIVE:
        raise InvalidInput(f"{key!r} is built in and never leaves this host: it is always active", field="status")
    if not Processor.objects.filter(key=key).exists():
        register(key, actor=actor)
    row = Processor.objects.select_for_update().get(key=key)
    previous = row.status
    row.status = status
    if agreement_ref is not None:
        row.agreement_ref = agreement_ref.strip()
    if agreement_signed_on is not None:
        row.agreement_signed_on = agreement_signed_on
    if agreement_expires_on is not None:
        row.agreement_expires_on = agreement_expires_on
    if row.agreement_signed_on and row.agreement_expires_on and row.agreement_expires_on < row.agreement_signed_on:
        raise InvalidInput("must not be before the signing date", field="agreement_expires_on")
    if len(row.agreement_ref) > REASON_MAX:
        raise InvalidInput(f"must be at most {REASON_MAX} characters", field="agreement_ref")
    row.changed_by = actor
    row.changed_at = timezone.now()
    row.save()
    record(
        Action.PROCESSOR_STATUS_CHANGED,
        actor=actor,
        target=_target(key),
        payload={"key": key, "from": previous, "to": status, "reason": reason, **_agreement_payload(row)},
    )
    return row


def check_outbound(key: str, *, category: str, count: int) -> None:
    """Return when processor ``key`` may receive ``count`` texts of ``category``; else raise
    ``ProcessorNotActive``. Call it before every outbound call, outside a transaction.

    1. A built-in (never leaves the host): allowed, without a query.
    2. No row: ``not_registered``. A category the row does not list: ``category_not_covered``.
    3. ``active``: allowed, unless ``agreement_expires_on`` is past (``agreement_expired``).
    4. ``pending_compliance``: allowed only with PROCESSOR_DEV_OVERRIDE, and then audited as
       ``processor.text_sent_under_override`` with the category and count, on every call.
    5. ``revoked``, or pending without the override: refused.
    A refusal is audited as ``processor.outbound_refused`` once per processor, cause and hour.
    """
    if is_builtin(key):
        return
    row = Processor.objects.filter(key=key).values_list("status", "data_categories", "agreement_expires_on").first()
    cause: str
    if row is None:
        cause = "not_registered"
    else:
        status, categories, expires_on = row
        if category not in categories:
            cause = "category_not_covered"
        elif status == Status.ACTIVE:
            if expires_on is None or expires_on >= timezone.localdate():
                return
            cause = "agreement_expired"
        elif status == Status.PENDING_COMPLIANCE and settings.PROCESSOR_DEV_OVERRIDE:
            with transaction.atomic():
                record(
                    Action.PROCESSOR_TEXT_SENT_UNDER_OVERRIDE,
                    actor=GATE_ACTOR,
                    target=_target(key),
                    payload={"key": key, "category": category, "count": count},
                )
            return
        else:
            cause = str(status)
    _record_refusal(key, cause, category=category, count=count)
    raise ProcessorNotActive(key, cause)


def _record_refusal(key: str, cause: str, *, category: str, count: int) -> None:
    """Audit the first refusal of the hour for (key, cause). A concurrent refusal waits on
    the unique index and then inserts nothing, so the hour is audited exactly once."""
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO processors_processorrefusal (processor_key, cause, hour, created_at)
            VALUES (%s, %s, %s, now())
            ON CONFLICT (processor_key, cause, hour) DO NOTHING
            RETURNING id
            """,
            [key, cause, hour],
        )
        if cursor.fetchone() is None:
            return
        # The rows only decide who audits the current hour; keep a day of them to look at and
        # drop the rest here, at most once per processor, cause and hour (the audit event stays).
        cursor.execute("DELETE FROM processors_processorrefusal WHERE hour < %s", [hour - REFUSAL_ROWS_KEPT])
        record(
            Action.PROCESSOR_OUTBOUND_REFUSED,
            actor=GATE_ACTOR,
            target=_target(key),
            payload={"key": key, "cause": cause, "category": category, "count": count, "hour": hour.isoformat()},
        )
