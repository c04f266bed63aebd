"""Which patient a logged-in user is. ``reasoning.access`` builds on this for tokens."""

from __future__ import annotations

from typing import Any

from patients.models import Patient

# Access checks need the id and consent only: loading the encrypted PHI columns would
# decrypt a name, MRN and date of birth for nothing.
ACCESS_FIELDS = ("id", "user_id", "reasoning_read_consent")


def patient_for_user(user: Any) -> Patient | None:
    if user is None or not user.is_authenticated:
        return None
    return Patient.objects.only(*ACCESS_FIELDS).filter(user_id=user.pk).first()
