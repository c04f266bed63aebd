"""Patients: an opaque public id that flows point at, and the patient's PHI, encrypted.

Reasoning flows never carry PHI; they reference a patient by ``id`` only. Name, date of
birth, MRN, phone and e-mail are Fernet-encrypted at rest (``FIELD_ENCRYPTION_KEY``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from encrypted_model_fields.fields import EncryptedCharField, EncryptedDateField, EncryptedEmailField


class Patient(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="patient"
    )
    name = EncryptedCharField(max_length=200, blank=True, default="")
    date_of_birth = EncryptedDateField(null=True, blank=True)
    mrn = EncryptedCharField("MRN", max_length=64, blank=True, default="")
    phone = EncryptedCharField(max_length=40, blank=True, default="")
    email = EncryptedEmailField(blank=True, default="")
    # The patient's opt-in to reading the reasoning behind decisions about them.
    # Changed only through patients.services.set_reasoning_read_consent (audited).
    reasoning_read_consent = models.BooleanField(default=False)
    consent_changed_at = models.DateTimeField(null=True, blank=True)
    # Keeps every month of steps that holds one of the patient's flows from retention
    # (partitions.retention). Changed only through patients.services.set_legal_hold (audited).
    legal_hold = models.BooleanField(default=False)
    legal_hold_changed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "patients_patient"

    def __str__(self) -> str:
        # Never the name: this string shows up in logs and admin breadcrumbs.
        return f"patient {self.id}"
