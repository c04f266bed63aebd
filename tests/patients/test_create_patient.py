"""patients.services.create_patient: a login and its patient, audited; a taken username is a 409."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEvent
from core.errors import Conflict
from patients.models import Patient
from patients.services import create_patient

pytestmark = pytest.mark.django_db

ACTOR = "system:test"
CREATED = "patient.created"


def test_create_patient_makes_a_login_and_its_patient_and_audits_it() -> None:
    patient = create_patient(username="casey", password="pw-casey-1", actor=ACTOR, consent=True)

    assert patient.user is not None and patient.user.username == "casey"
    assert patient.reasoning_read_consent is True
    (event,) = AuditEvent.objects.filter(action=CREATED)
    assert (event.target_id, event.payload) == (str(patient.pk), {"reasoning_read_consent": True})


def test_taken_username_is_a_conflict_on_the_username() -> None:
    get_user_model().objects.create_user(username="casey", password="pw-first-1")

    with pytest.raises(Conflict) as caught:
        create_patient(username="casey", password="pw-casey-1", actor=ACTOR)

    assert (caught.value.detail, caught.value.field) == ("user 'casey' already exists", "username")
    assert not Patient.objects.exists()
    assert not AuditEvent.objects.filter(action=CREATED).exists()


def test_username_taken_between_the_check_and_the_insert_is_the_same_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager = get_user_model().objects
    real_create = manager.create_user

    def rival_first(**fields: Any) -> Any:
        # A concurrent create_patient for the same name inserts after our exists-check.
        real_create(username=fields["username"], password="pw-rival-1")
        return real_create(**fields)

    monkeypatch.setattr(manager, "create_user", rival_first)

    with pytest.raises(Conflict) as caught:
        create_patient(username="casey", password="pw-casey-1", actor=ACTOR)

    assert (caught.value.detail, caught.value.field) == ("user 'casey' already exists", "username")
    assert not Patient.objects.exists()
    assert not AuditEvent.objects.filter(action=CREATED).exists()
    # The unique violation was contained in a savepoint: the caller's transaction still works.
    assert not get_user_model().objects.filter(username="casey").exists()
