"""State changes for patients, each with its audit event in the same transaction."""

from __future__ import annotations

import uuid
from datetime import date

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import record
from core.errors import Conflict, InvalidInput
from patients.models import Patient


@transaction.atomic
def create_patient(
    *,
    username: str,
    password: str,
    actor: str,
    name: str = "",
    date_of_birth: date | None = None,
    mrn: str = "",
    phone: str = "",
    email: str = "",
    consent: bool = False,
) -> Patient:
    """Create a login and the patient it belongs to."""
    user_model = get_user_model()
    if not username or not password:
        raise InvalidInput("username and password are required", field="username")
    taken = Conflict(f"user {username!r} already exists", field="username")
    if user_model.objects.filter(username=username).exists():
        raise taken
    try:
        with transaction.atomic():  # a savepoint: the unique username decides concurrent creations
            user = user_model.objects.create_user(username=username, password=password)
    except IntegrityError:
        raise taken from None
    patient = Patient.objects.create(
        user=user,
        name=name,
        date_of_birth=date_of_birth,
        mrn=mrn,
        phone=phone,
        email=email,
        reasoning_read_consent=consent,
        consent_changed_at=timezone.now() if consent else None,
    )
    record(Action.PATIENT_CREATED, actor=actor, target=patient, payload={"reasoning_read_consent": consent})
    return patient


@transaction.atomic
def set_reasoning_read_consent(patient_id: uuid.UUID, *, granted: bool, actor: str) -> bool:
    """Set the patient's consent; return whether it changed. Each change is audited."""
    return _set_flag(
        patient_id, "reasoning_read_consent", "consent_changed_at", granted, Action.PATIENT_CONSENT_CHANGED, actor
    )


@transaction.atomic
def set_legal_hold(patient_id: uuid.UUID, *, held: bool, actor: str) -> bool:
    """Put the patient under legal hold, or lift it; return whether it changed. While it
    holds, retention keeps every partition that holds one of the patient's flows. Each change
    is audited."""
    return _set_flag(patient_id, "legal_hold", "legal_hold_changed_at", held, Action.PATIENT_LEGAL_HOLD_CHANGED, actor)


def _set_flag(patient_id: uuid.UUID, flag: str, changed_at: str, value: bool, action: Action, actor: str) -> bool:
    """Set one of the patient's boolean flags with its change time, audited when it changed."""
    changed = (
        Patient.objects.filter(pk=patient_id)
        .exclude(**{flag: value})
        .update(**{flag: value, changed_at: timezone.now()})
    )
    if changed:
        record(action, actor=actor, target=("patients.patient", patient_id), payload={flag: value})
    return bool(changed)


@transaction.atomic
def record_phi_view(patient_id: uuid.UUID, *, actor: str) -> None:
    """Audit that someone was shown a patient's decrypted PHI (HIPAA access trail)."""
    record(Action.PATIENT_PHI_VIEWED, actor=actor, target=("patients.patient", patient_id))
