"""Patients: an opaque public id that flows point at.

Reasoning flows never carry PHI; they reference a patient by this id only.
"""

from __future__ import annotations

import uuid

from django.db import models


class Patient(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "patients_patient"

    def __str__(self) -> str:
        return f"patient {self.id}"
