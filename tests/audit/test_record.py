"""audit.record(): the one way to write an audit event."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from django.db import connection, transaction
from django.utils.functional import SimpleLazyObject

from audit.actions import Action
from audit.models import AuditEvent, AuditPending
from audit.services import AuditPayloadError, record
from reasoning.models import ApiToken
from tests.factories import rebuilt_canonical


class Boom(Exception):
    """The caller's change failed after the event was written."""


@pytest.mark.django_db(transaction=True)
def test_record_outside_a_transaction_raises_and_writes_nothing() -> None:
    with pytest.raises(RuntimeError, match="inside the transaction"):
        record(Action.FLOW_STARTED, actor="system:test")

    assert not AuditEvent.objects.exists()
    assert not AuditPending.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_rolled_back_transaction_leaves_neither_event_nor_pending_row() -> None:
    event_ids: list[int] = []
    with pytest.raises(Boom), transaction.atomic():
        event_ids.append(record(Action.FLOW_STARTED, actor="system:test", payload={"steps": 1}))
        # Visible inside the transaction, so the rollback below is what removes it.
        assert AuditEvent.objects.filter(pk=event_ids[0]).exists()
        assert AuditPending.objects.filter(event_id=event_ids[0]).exists()
        raise Boom

    assert not AuditEvent.objects.filter(pk=event_ids[0]).exists()
    assert not AuditPending.objects.filter(event_id=event_ids[0]).exists()


@pytest.mark.django_db(transaction=True)
def test_committed_transaction_keeps_the_event_and_queues_it_for_chaining() -> None:
    with transaction.atomic():
        event_id = record(
            Action.STEP_CREATED,
            actor="token:agent",
            target=("reasoning.reasoningflow", "flow-1"),
            payload={"step_count": 2},
        )

    event = AuditEvent.objects.get(pk=event_id)
    assert (event.action, event.actor, event.target_type, event.target_id, event.payload) == (
        "reasoning.step.created",
        "token:agent",
        "reasoning.reasoningflow",
        "flow-1",
        {"step_count": 2},
    )
    assert list(AuditPending.objects.values_list("event_id", flat=True)) == [event_id]


def test_sequence_numbers_increase_in_write_order(db: None) -> None:
    first = record(Action.FLOW_STARTED, actor="system:test")
    second = record(Action.STEP_CREATED, actor="system:test")
    third = record(Action.FLOW_COMPLETED, actor="system:test")

    assert first < second < third
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.flow.completed",
    ]


def test_stored_canonical_bytes_encode_the_stored_columns(db: None) -> None:
    event_id = record(
        Action.FLOW_COMPLETED,
        actor="token:agent",
        target=("reasoning.reasoningflow", "flow-9"),
        payload={"step_count": 3, "kinds": ["retrieval", "verdict"], "ok": True},
    )

    event = AuditEvent.objects.get(pk=event_id)
    stored = bytes(event.canonical)
    assert stored == rebuilt_canonical(event)
    document = json.loads(stored)
    assert document["payload"] == {"step_count": 3, "kinds": ["retrieval", "verdict"], "ok": True}
    assert document["created_at"] == event.created_at.astimezone(UTC).isoformat()


# --- payload checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["summary_text", "inputs", "outputs", "reasoning_content", "rationale", "outcome_summary", "token", "email"],
)
def test_payload_with_a_content_key_is_refused(db: None, key: str) -> None:
    with pytest.raises(AuditPayloadError, match=repr(key)):
        record(Action.STEP_CREATED, actor="system:test", payload={key: "x"})

    assert not AuditEvent.objects.exists()
    assert not AuditPending.objects.exists()


@pytest.mark.parametrize(
    "payload",
    [
        {"step": {"summary_text": "Retrieved guidelines"}},
        {"steps": [{"reasoning_content": "Let me think"}]},
        {"outer": {"inner": {"inputs": {}}}},
    ],
    ids=["nested-dict", "dict-in-list", "two-levels-deep"],
)
def test_content_key_nested_inside_the_payload_is_refused(db: None, payload: dict[str, Any]) -> None:
    with pytest.raises(AuditPayloadError, match="carries content"):
        record(Action.STEP_CREATED, actor="system:test", payload=payload)

    assert not AuditEvent.objects.exists()


def test_payload_string_longer_than_200_characters_is_refused(db: None) -> None:
    with pytest.raises(AuditPayloadError, match="longer than 200"):
        record(Action.STEP_CREATED, actor="system:test", payload={"kind": "a" * 201})

    assert not AuditEvent.objects.exists()


def test_payload_string_of_exactly_200_characters_is_accepted(db: None) -> None:
    event_id = record(Action.STEP_CREATED, actor="system:test", payload={"kind": "a" * 200})

    assert AuditEvent.objects.get(pk=event_id).payload == {"kind": "a" * 200}


def test_over_long_string_inside_a_list_is_refused(db: None) -> None:
    with pytest.raises(AuditPayloadError, match="'kinds'"):
        record(Action.STEP_CREATED, actor="system:test", payload={"kinds": ["retrieval", "b" * 201]})

    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    "value",
    [datetime(2025, 1, 1, tzinfo=UTC), b"bytes", {"a", "b"}, object()],
    ids=["datetime", "bytes", "set", "object"],
)
def test_payload_value_of_unsupported_type_is_refused(db: None, value: object) -> None:
    with pytest.raises(AuditPayloadError, match="unsupported type"):
        record(Action.STEP_CREATED, actor="system:test", payload={"value": value})

    assert not AuditEvent.objects.exists()


def test_payload_nested_more_than_three_levels_is_refused(db: None) -> None:
    with pytest.raises(AuditPayloadError, match="nests too deeply"):
        record(Action.STEP_CREATED, actor="system:test", payload={"a": {"b": {"c": {"d": 1}}}})

    assert not AuditEvent.objects.exists()


def test_payload_of_ids_labels_and_counts_is_stored_as_given(db: None) -> None:
    flow_id = str(uuid.uuid4())
    payload = {
        "flow_id": flow_id,
        "step_count": 4,
        "confidence": 0.75,
        "expires": False,
        "patient": None,
        "kinds": ["retrieval", "verdict"],
        "a": {"b": {"c": 1}},
    }

    event_id = record(Action.FLOW_COMPLETED, actor="system:test", payload=payload)

    assert AuditEvent.objects.get(pk=event_id).payload == payload


def test_plain_string_action_is_refused(db: None) -> None:
    with pytest.raises(TypeError, match=r"audit\.actions\.Action"):
        record("reasoning.flow.started", actor="system:test")  # type: ignore[arg-type]

    assert not AuditEvent.objects.exists()


# --- targets ----------------------------------------------------------------------


def test_target_given_as_a_model_is_stored_as_its_label_and_primary_key(make_token: Callable[..., str]) -> None:
    make_token("reasoning.read", name="target-token")
    token = ApiToken.objects.get(name="target-token")

    event_id = record(Action.API_TOKEN_REVOKED, actor="system:test", target=token)

    event = AuditEvent.objects.get(pk=event_id)
    assert (event.target_type, event.target_id) == ("reasoning.apitoken", str(token.pk))


def test_a_lazy_target_is_stored_as_the_model_it_stands_for(make_token: Callable[..., str]) -> None:
    """A request's user is a lazy object: its label and key are the model's, as for the model."""
    make_token("reasoning.read", name="lazy-token")
    token = ApiToken.objects.get(name="lazy-token")

    lazy = cast(ApiToken, SimpleLazyObject(lambda: token))  # as django-stubs types request.user

    event_id = record(Action.API_TOKEN_REVOKED, actor="system:test", target=lazy)

    event = AuditEvent.objects.get(pk=event_id)
    assert (event.target_type, event.target_id) == ("reasoning.apitoken", str(token.pk))


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            ("reasoning.reasoningflow", uuid.UUID("6f1c8f0e-4f3b-4c5e-9a51-0d4c1f3b2a10")),
            "6f1c8f0e-4f3b-4c5e-9a51-0d4c1f3b2a10",
        ),
        (("patients.patient", 42), "42"),
        (("reasoning.reasoningstep", "step-7"), "step-7"),
    ],
    ids=["uuid", "int", "str"],
)
def test_target_given_as_type_and_id_stores_the_id_as_text(db: None, target: tuple[str, object], expected: str) -> None:
    event_id = record(Action.STEP_CREATED, actor="system:test", target=target)

    event = AuditEvent.objects.get(pk=event_id)
    assert (event.target_type, event.target_id) == (target[0], expected)


@pytest.mark.parametrize("payload", [{"count": 2}, {"ratio": 0.25}], ids=["msgspec", "json.dumps"])
def test_a_uuid_target_is_written_in_its_canonical_bytes_as_its_text(db: None, payload: dict[str, Any]) -> None:
    # Both encoders (a float payload goes through json.dumps) write the id as str() does.
    target = uuid.UUID("6f1c8f0e-4f3b-4c5e-9a51-0d4c1f3b2a10")
    event_id = record(
        Action.STEP_CREATED, actor="system:test", target=("reasoning.reasoningstep", target), payload=payload
    )

    event = AuditEvent.objects.get(pk=event_id)
    assert json.loads(bytes(event.canonical))["target_id"] == str(target) == event.target_id
    assert bytes(event.canonical) == rebuilt_canonical(event)


def test_event_without_target_stores_empty_type_and_id(db: None) -> None:
    event_id = record(Action.JOB_FLOW_DECAY_STARTED, actor="system:reasoning_flow_decay")

    event = AuditEvent.objects.get(pk=event_id)
    assert (event.target_type, event.target_id) == ("", "")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_payload_with_a_non_finite_number_is_refused(db: None, value: float) -> None:
    # JSON has no NaN or Infinity; the payload check must refuse it, not the database.
    with pytest.raises(AuditPayloadError):
        record(Action.FLOW_COMPLETED, actor="system:test", payload={"confidence": value})

    assert not AuditEvent.objects.exists()


# --- payloads whose canonical bytes could not be rebuilt from jsonb --------------------


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        ({1: "one"}, "1"),
        ({"outer": {2.5: "x"}}, "2.5"),
        ({"outer": {None: 1}}, "None"),
    ],
    ids=["int-key", "nested-float-key", "nested-none-key"],
)
def test_payload_with_a_non_string_key_is_refused_naming_the_key(db: None, payload: dict[Any, Any], key: str) -> None:
    with pytest.raises(AuditPayloadError, match=f"key {key} is not a string"):
        record(Action.FLOW_COMPLETED, actor="system:test", payload=payload)

    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    "value", [1e23, 1e16, 1.5e-7, 0.00009, -0.0, -1e20], ids=["1e23", "1e16", "1.5e-7", "9e-5", "-0.0", "-1e20"]
)
def test_payload_float_that_jsonb_would_rewrite_is_refused_without_echoing_it(db: None, value: float) -> None:
    with pytest.raises(AuditPayloadError, match="'latency_ms' is a float that jsonb does not keep") as caught:
        record(Action.FLOW_COMPLETED, actor="system:test", payload={"latency_ms": value})

    assert repr(value) not in str(caught.value)
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("value", [0.85, 0.0001, 9999999999999998.0, 1.0, 0.0, -3.25, 0.1 + 0.2])
def test_payload_float_written_without_exponent_round_trips_through_jsonb(db: None, value: float) -> None:
    event_id = record(Action.FLOW_COMPLETED, actor="system:test", payload={"confidence": value})

    # jsonb prints the number exactly as json.dumps wrote it into the canonical bytes.
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload->>'confidence' FROM audit_event WHERE id = %s", [event_id])
        row = cursor.fetchone()
    assert row is not None
    assert row[0] == json.dumps(value)


@pytest.mark.parametrize(
    "payload", [{"label": "a\x00b"}, {"ids": ["ok", "\x00"]}, {"bad\x00key": 1}], ids=["value", "in-list", "key"]
)
def test_payload_with_a_nul_character_is_refused_without_echoing_it(db: None, payload: dict[str, Any]) -> None:
    with pytest.raises(AuditPayloadError, match="contains a NUL character") as caught:
        record(Action.FLOW_COMPLETED, actor="system:test", payload=payload)

    assert "a\x00b" not in str(caught.value)
    assert not AuditEvent.objects.exists()
