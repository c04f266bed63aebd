"""Patients: PHI encrypted at rest, the create_patient command, consent changes, key rotation."""

from __future__ import annotations

import json
import uuid
from datetime import date
from io import StringIO
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from encrypted_model_fields import fields as encrypted_fields
from rest_framework.test import APIClient

from audit.models import AuditEvent
from patients.models import Patient
from patients.services import create_patient, set_reasoning_read_consent

pytestmark = pytest.mark.django_db

PHI: dict[str, Any] = {
    "name": "Jordan Quillfeather",
    "date_of_birth": date(1962, 3, 14),
    "mrn": "MRN-99887766",
    "phone": "+1 555 010 4477",
    "email": "jordan.quillfeather@example.org",
}
# Every plaintext fragment that must not show up in a stored row or an audit payload.
PHI_FRAGMENTS = [
    "Jordan",
    "Quillfeather",
    "1962-03-14",
    "99887766",
    "555 010 4477",
    "jordan.quillfeather@example.org",
]
ENCRYPTED_PATIENT_COLUMNS = ["name", "date_of_birth", "mrn", "phone", "email"]
ENCRYPTED_STEP_COLUMNS = ["inputs_pii", "outputs_pii", "reasoning_content"]


def make_patient(username: str = "jordan", *, consent: bool = False, **phi: Any) -> Patient:
    return create_patient(username=username, password="pw-Jq-2931", actor="system:test", consent=consent, **phi)


def row_as_text(table: str, pk: uuid.UUID | str) -> list[str | None]:
    """One row read with raw SQL, every column cast to text."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} LIMIT 0")
        columns = [column.name for column in cursor.description]
        cursor.execute(f"SELECT {', '.join(f'{c}::text' for c in columns)} FROM {table} WHERE id = %s", [pk])
        row = cursor.fetchone()
    assert row is not None
    return list(row)


def stored_tokens(table: str, columns: list[str], pk: uuid.UUID | str) -> dict[str, str | None]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE id = %s", [pk])
        row = cursor.fetchone()
    assert row is not None
    return dict(zip(columns, row, strict=True))


def audit_text() -> str:
    """Every stored audit payload and canonical encoding, as one string to search."""
    parts = []
    for payload, canonical in AuditEvent.objects.values_list("payload", "canonical"):
        parts.append(json.dumps(payload, ensure_ascii=False))
        parts.append(bytes(canonical).decode())
    return "\n".join(parts)


def run_create_patient(*args: str) -> list[str]:
    out = StringIO()
    call_command("create_patient", *args, stdout=out)
    return out.getvalue().splitlines()


# --- PHI at rest ------------------------------------------------------------------------


def test_phi_is_not_readable_in_the_patients_table_but_the_orm_returns_it() -> None:
    patient = make_patient(**PHI)

    cells = row_as_text("patients_patient", patient.pk)

    stored = "\n".join(cell for cell in cells if cell is not None).lower()
    for fragment in PHI_FRAGMENTS:
        assert fragment.lower() not in stored, f"{fragment!r} is stored in plaintext"
    loaded = Patient.objects.get(pk=patient.pk)
    assert {field: getattr(loaded, field) for field in PHI} == PHI


def test_patient_created_audit_event_carries_no_phi() -> None:
    patient = make_patient(**PHI)

    event = AuditEvent.objects.get(action="patient.created")

    assert event.target_id == str(patient.pk)
    assert event.payload == {"reasoning_read_consent": False}
    for fragment in PHI_FRAGMENTS:
        assert fragment not in audit_text()


def test_patient_string_never_shows_the_name() -> None:
    patient = make_patient(**PHI)

    assert "Jordan" not in str(patient)
    assert str(patient.pk) in str(patient)


# --- create_patient command -------------------------------------------------------------


def test_create_patient_with_consent_prints_the_patient_id_alone_on_the_last_line() -> None:
    lines = run_create_patient("--username", "casey", "--password", "pw-casey-1", "--consent")

    patient_id = uuid.UUID(lines[-1])
    assert lines[-1] == str(patient_id)
    patient = Patient.objects.get(pk=patient_id)
    assert patient.user is not None
    assert patient.user.username == "casey"
    assert patient.user.check_password("pw-casey-1")
    assert patient.reasoning_read_consent is True
    assert patient.consent_changed_at is not None


def test_create_patient_without_consent_leaves_consent_off() -> None:
    lines = run_create_patient("--username", "casey", "--password", "pw-casey-1")

    patient = Patient.objects.get(pk=uuid.UUID(lines[-1]))
    assert patient.reasoning_read_consent is False
    assert patient.consent_changed_at is None


def test_create_patient_command_stores_the_phi_options_encrypted() -> None:
    lines = run_create_patient(
        "--username",
        "jordan",
        "--password",
        "pw-Jq-2931",
        "--name",
        PHI["name"],
        "--date-of-birth",
        "1962-03-14",
        "--mrn",
        PHI["mrn"],
        "--phone",
        PHI["phone"],
        "--email",
        PHI["email"],
    )

    patient_id = uuid.UUID(lines[-1])
    stored = "\n".join(cell for cell in row_as_text("patients_patient", patient_id) if cell is not None)
    for fragment in PHI_FRAGMENTS:
        assert fragment not in stored
    loaded = Patient.objects.get(pk=patient_id)
    assert {field: getattr(loaded, field) for field in PHI} == PHI
    # Nothing the command printed repeats the PHI it was given.
    for fragment in PHI_FRAGMENTS:
        assert fragment not in "\n".join(lines)


def test_create_patient_with_a_taken_username_is_a_command_error() -> None:
    run_create_patient("--username", "casey", "--password", "pw-casey-1")

    with pytest.raises(CommandError, match="username"):
        run_create_patient("--username", "casey", "--password", "another-pw-2")

    assert Patient.objects.count() == 1


def test_create_patient_with_a_malformed_date_of_birth_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="date-of-birth"):
        run_create_patient("--username", "casey", "--password", "pw-casey-1", "--date-of-birth", "14/03/1962")

    assert not Patient.objects.exists()


# --- Consent ------------------------------------------------------------------------------


def consent_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="patient.reasoning_read_consent.changed").order_by("id"))


def test_granting_consent_flips_it_returns_true_and_audits_once_without_phi() -> None:
    patient = make_patient(**PHI)

    changed = set_reasoning_read_consent(patient.pk, granted=True, actor="user:test")

    assert changed is True
    patient.refresh_from_db()
    assert patient.reasoning_read_consent is True
    assert patient.consent_changed_at is not None
    (event,) = consent_events()
    assert event.actor == "user:test"
    assert (event.target_type, event.target_id) == ("patients.patient", str(patient.pk))
    assert event.payload == {"reasoning_read_consent": True}
    canonical = bytes(event.canonical).decode()
    for fragment in PHI_FRAGMENTS:
        assert fragment not in canonical


def test_revoking_consent_flips_it_back_and_audits_the_new_value() -> None:
    patient = make_patient(consent=True)

    changed = set_reasoning_read_consent(patient.pk, granted=False, actor="user:test")

    assert changed is True
    patient.refresh_from_db()
    assert patient.reasoning_read_consent is False
    (event,) = consent_events()
    assert event.payload == {"reasoning_read_consent": False}


def test_setting_the_same_consent_again_returns_false_and_writes_nothing() -> None:
    patient = make_patient()
    set_reasoning_read_consent(patient.pk, granted=True, actor="user:test")
    patient.refresh_from_db()
    changed_at = patient.consent_changed_at

    changed = set_reasoning_read_consent(patient.pk, granted=True, actor="user:test")

    assert changed is False
    assert len(consent_events()) == 1
    patient.refresh_from_db()
    assert patient.reasoning_read_consent is True
    assert patient.consent_changed_at == changed_at


# --- Key rotation ---------------------------------------------------------------------------


def test_rotate_encryption_key_re_encrypts_every_value_under_the_new_key(
    monkeypatch: pytest.MonkeyPatch, agent: APIClient
) -> None:
    patient = make_patient(**PHI)
    flow = agent.post(
        "/api/reasoning/flows", {"trigger_type": "user_question", "patient_id": str(patient.pk)}, format="json"
    )
    assert flow.status_code == 201, flow.content
    steps = agent.post(
        f"/api/reasoning/flows/{flow.json()['id']}/steps/batch",
        {
            "steps": [
                {
                    "kind": "retrieval",
                    "agent": "researcher",
                    "summary_text": "Looked up the chart",
                    "inputs": {"patient_name": PHI["name"], "query_kind": "chart"},
                    "outputs": {"patient_mrn": PHI["mrn"], "found": True},
                    "pii_fields": ["patient_name", "patient_mrn"],
                    "reasoning_content": "Thinking about the chart before answering.",
                },
                {"kind": "verdict", "agent": "critic", "summary_text": "Checked the answer"},
            ]
        },
        format="json",
    )
    assert steps.status_code == 201, steps.content
    with_pii, without_pii = (step["id"] for step in steps.json()["steps"])
    before = stored_tokens("patients_patient", ENCRYPTED_PATIENT_COLUMNS, patient.pk)
    old = Fernet(settings.FIELD_ENCRYPTION_KEY[0])
    new_key = Fernet.generate_key()
    monkeypatch.setattr(encrypted_fields, "CRYPTER", MultiFernet([Fernet(new_key), old]))

    call_command("rotate_encryption_key", stdout=StringIO(), stderr=StringIO())

    new_only = Fernet(new_key)

    def decrypt(token: str | None) -> str:
        assert token is not None
        with pytest.raises(InvalidToken):
            old.decrypt(token.encode())  # really re-encrypted, not just still readable
        return new_only.decrypt(token.encode()).decode()

    patient_tokens = stored_tokens("patients_patient", ENCRYPTED_PATIENT_COLUMNS, patient.pk)
    assert {column: decrypt(token) for column, token in patient_tokens.items()} == {
        "name": PHI["name"],
        "date_of_birth": "1962-03-14",
        "mrn": PHI["mrn"],
        "phone": PHI["phone"],
        "email": PHI["email"],
    }
    assert all(patient_tokens[column] != before[column] for column in ENCRYPTED_PATIENT_COLUMNS)
    step_tokens = stored_tokens("reasoning_step", ENCRYPTED_STEP_COLUMNS, with_pii)
    assert json.loads(decrypt(step_tokens["inputs_pii"])) == {"patient_name": PHI["name"]}
    assert json.loads(decrypt(step_tokens["outputs_pii"])) == {"patient_mrn": PHI["mrn"]}
    assert decrypt(step_tokens["reasoning_content"]) == "Thinking about the chart before answering."
    # Empty columns stay empty.
    assert stored_tokens("reasoning_step", ENCRYPTED_STEP_COLUMNS, without_pii) == dict.fromkeys(ENCRYPTED_STEP_COLUMNS)
    # With only the new key configured, the ORM reads the same values.
    monkeypatch.setattr(encrypted_fields, "CRYPTER", MultiFernet([new_only]))
    loaded = Patient.objects.get(pk=patient.pk)
    assert {field: getattr(loaded, field) for field in PHI} == PHI
    rotated = {
        event.target_id: event
        for event in AuditEvent.objects.filter(action="admin.field_encryption.rotated", target_type="table")
    }
    assert {"patients_patient", "reasoning_step"} <= set(rotated)
    assert rotated["patients_patient"].payload == {"values": 5}
    assert rotated["reasoning_step"].payload == {"values": 3}
    assert rotated["patients_patient"].actor == "system:cli"
