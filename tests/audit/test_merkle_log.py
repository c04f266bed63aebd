"""The Merkle tree over the chain, its signed checkpoints and the ``/audit/v1/…`` routes,
against the real database (docs/audit-log.md, "The Merkle tree", "Checkpoints", "Routes").

Roots and proofs are checked against an independent RFC 6962 computation written here,
from the events' stored canonical bytes, never from the tree table itself.
"""

from __future__ import annotations

import base64
import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from rest_framework.test import APIClient

from audit import merkle
from audit.actions import Action
from audit.chain import chain_all
from audit.checkpoints import CheckpointRefused, sign_checkpoint
from audit.models import AuditCheckpoint, AuditEvent
from audit.notes import Signer, Verifier, parse_checkpoint, parse_note
from audit.services import Event, record_many

pytestmark = pytest.mark.django_db

CHECKPOINT = "/audit/v1/checkpoint"
PUBLIC_KEY = "/audit/v1/public-key"
INCLUSION = "/audit/v1/proof/inclusion"
CONSISTENCY = "/audit/v1/proof/consistency"


# --- An independent RFC 6962 reference -----------------------------------------------------


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 §2.1 MTH over leaf *hashes*."""
    if not leaves:
        return _h(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return _h(b"\x01" + mth(leaves[:k]) + mth(leaves[k:]))


def leaves_from_events() -> list[bytes]:
    """Every leaf hash, from the links' events (event id, LF, canonical bytes)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.event_id, e.canonical FROM audit_chain_link l JOIN audit_event e ON e.id = l.event_id"
            " ORDER BY l.position"
        )
        return [_h(b"\x00" + str(event_id).encode() + b"\n" + bytes(canonical)) for event_id, canonical in cursor]


def write_events(count: int) -> None:
    with transaction.atomic():
        record_many([Event(Action.STEP_CREATED, "token:agent", ("test.item", n), {"n": n}) for n in range(count)])
    chain_all()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


@pytest.fixture
def auditor(make_token: Callable[..., str]) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('audit.read', name='auditor')}")
    return client


def verifier_from(client: APIClient) -> Verifier:
    response = client.get(PUBLIC_KEY)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return Verifier.parse(response.content.decode().splitlines()[0])


# --- The tree --------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 8, 9])
def test_every_inclusion_proof_verifies_against_the_independent_root(auditor: APIClient, count: int) -> None:
    write_events(count)
    leaves = leaves_from_events()
    size = len(leaves)  # the events written plus the tokens' own creation events
    expected_root = mth(leaves)
    for position in range(1, size + 1):
        response = auditor.get(INCLUSION, {"position": position, "tree_size": size})
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["leaf_index"], body["tree_size"]) == (position - 1, size)
        assert unb64(body["leaf_hash"]) == leaves[position - 1]
        proof = [unb64(item) for item in body["audit_path"]]
        assert merkle.verify_inclusion(position - 1, size, leaves[position - 1], proof, expected_root)


def test_a_thousand_events_build_the_same_tree_as_the_reference_and_every_consistency_proof_verifies(
    auditor: APIClient,
) -> None:
    for batch in (1, 2, 500, 3, 494):  # the chainer extends the tree batch by batch
        write_events(batch)
    leaves = leaves_from_events()
    size = len(leaves)
    assert size >= 1000
    rng = random.Random(6962)
    sizes = sorted({1, 2, 7, 8, 9, 511, 512, 513, size, *(rng.randint(1, size) for _ in range(12))})
    roots = {n: mth(leaves[:n]) for n in sizes}
    for old in sizes:
        for new in sizes:
            if old > new:
                continue
            response = auditor.get(CONSISTENCY, {"from": old, "to": new})
            assert response.status_code == 200, response.content
            proof = [unb64(item) for item in response.json()["consistency"]]
            assert merkle.verify_consistency(old, new, roots[old], roots[new], proof), (old, new)
    for position in rng.sample(range(1, size + 1), 25):
        body = auditor.get(INCLUSION, {"position": position, "tree_size": size}).json()
        proof = [unb64(item) for item in body["audit_path"]]
        assert merkle.verify_inclusion(position - 1, size, leaves[position - 1], proof, roots[size])


def test_an_inclusion_proof_by_event_sequence_number_names_its_position(auditor: APIClient) -> None:
    write_events(3)
    event_id = (
        AuditEvent.objects.filter(action=Action.STEP_CREATED.value).order_by("id").values_list("id", flat=True)[1]
    )

    body = auditor.get(INCLUSION, {"event": event_id}).json()

    with connection.cursor() as cursor:
        cursor.execute("SELECT position FROM audit_chain_link WHERE event_id = %s", [event_id])
        (position,) = cursor.fetchone()
    assert (body["event_id"], body["position"], body["leaf_index"]) == (event_id, position, position - 1)


def test_an_event_route_serves_the_canonical_bytes_and_leaf_hash(auditor: APIClient) -> None:
    write_events(2)
    event = AuditEvent.objects.filter(action=Action.STEP_CREATED.value).order_by("id").first()
    assert event is not None

    body = auditor.get(f"/audit/v1/events/{event.pk}").json()

    assert unb64(body["canonical"]) == bytes(event.canonical)
    assert unb64(body["leaf_hash"]) == _h(b"\x00" + str(event.pk).encode() + b"\n" + bytes(event.canonical))
    assert auditor.get("/audit/v1/events/999999999").status_code == 404


def test_the_events_route_pages_in_position_order(auditor: APIClient) -> None:
    write_events(5)
    size = len(leaves_from_events())

    first = auditor.get("/audit/v1/events", {"start": 1, "limit": 3}).json()
    rest = auditor.get("/audit/v1/events", {"start": 4, "limit": 1000}).json()

    assert first["tree_size"] == size
    assert [event["position"] for event in first["events"] + rest["events"]] == list(range(1, size + 1))


# --- Checkpoints ----------------------------------------------------------------------------


def test_a_signed_checkpoint_verifies_with_the_published_key_and_signs_the_independent_root(
    client: APIClient, auditor: APIClient
) -> None:
    write_events(9)

    signed = sign_checkpoint()

    assert signed.checkpoint is not None
    response = APIClient().get(CHECKPOINT)  # public: no token
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    note = parse_note(response.content.decode())
    checkpoint = parse_checkpoint(note.body)
    assert note.signed_by(verifier_from(APIClient()))
    assert checkpoint.tree_size == signed.tree_size
    # The tree as it was when signed: every leaf up to its size.
    assert checkpoint.root_hash == mth(leaves_from_events()[: checkpoint.tree_size])
    event = AuditEvent.objects.get(action=Action.AUDIT_CHECKPOINT_SIGNED.value)
    assert event.payload == {
        "tree_size": checkpoint.tree_size,
        "key_id": note.signatures[0][1].hex(),
        "previous_tree_size": None,
    }


def test_the_note_follows_the_checkpoint_format(client: APIClient) -> None:
    write_events(3)
    signed = sign_checkpoint()
    assert signed.checkpoint is not None

    lines = signed.checkpoint.note.split("\n")

    origin, size, root, blank, signature, end = lines
    assert " " not in origin and origin
    assert size == str(int(size)) and not (size.startswith("0") and size != "0")
    assert len(base64.b64decode(root, validate=True)) == 32
    assert blank == "" and end == ""
    assert signature.startswith("\u2014 " + origin + " ")
    assert len(base64.b64decode(signature.rsplit(" ", 1)[1])) == 4 + 64


def test_nothing_new_is_signed_until_the_tree_grows_by_more_than_checkpoint_events() -> None:
    write_events(2)
    first = sign_checkpoint()
    chain_all()  # links the checkpoint's own event
    assert first.checkpoint is not None

    again = sign_checkpoint()
    write_events(1)
    grown = sign_checkpoint()

    assert again.checkpoint is None
    assert grown.checkpoint is not None and grown.tree_size > first.tree_size


def test_a_rotated_key_signs_a_new_checkpoint_and_the_old_key_stays_published(settings: Any) -> None:
    write_events(2)
    old = Signer.parse(settings.AUDIT_LOG_SIGNING_KEY)
    assert sign_checkpoint().checkpoint is not None
    new = Signer.generate(settings.AUDIT_LOG_ORIGIN)
    settings.AUDIT_LOG_SIGNING_KEY = new.key_string
    settings.AUDIT_LOG_PREVIOUS_KEYS = [old.verifier.key_string]

    rotated = sign_checkpoint()

    assert rotated.checkpoint is not None
    assert parse_note(rotated.checkpoint.note).signed_by(new.verifier)
    published = APIClient().get(PUBLIC_KEY).content.decode().splitlines()
    assert published == [new.verifier.key_string, old.verifier.key_string]


def test_checkpoints_are_append_only() -> None:
    write_events(1)
    assert sign_checkpoint().checkpoint is not None

    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_checkpoint SET tree_size = tree_size + 1")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_tree_node")


def test_the_signer_refuses_a_tree_that_contradicts_the_latest_checkpoint() -> None:
    write_events(4)
    signed = sign_checkpoint()
    assert signed.checkpoint is not None
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_tree_node DISABLE TRIGGER audit_tree_node_append_only")
        cursor.execute("UPDATE audit_tree_node SET hash = sha256(hash)")  # a rewritten history
        cursor.execute("ALTER TABLE audit_tree_node ENABLE TRIGGER audit_tree_node_append_only")
    write_events(1)

    with pytest.raises(CheckpointRefused, match="differs from checkpoint"):
        sign_checkpoint()

    assert AuditCheckpoint.objects.count() == 1
    assert AuditEvent.objects.filter(action=Action.AUDIT_CHECKPOINT_REFUSED.value).count() == 1


# --- Access and bad input ------------------------------------------------------------------


def test_proofs_and_events_need_audit_read_or_admin(auditor: APIClient, operator: APIClient, agent: APIClient) -> None:
    write_events(2)
    routes = [f"{INCLUSION}?position=1", f"{CONSISTENCY}?from=1", "/audit/v1/events", "/audit/v1/events/1"]
    for route in routes:
        assert APIClient().get(route).status_code == 401, route
        assert agent.get(route).status_code == 403, route
        assert auditor.get(route).status_code in (200, 404), route
        assert operator.get(route).status_code in (200, 404), route
    assert APIClient().get(PUBLIC_KEY).status_code == 200
    assert APIClient().get("/audit/v1/checkpoints").status_code == 200


@pytest.mark.parametrize(
    ("route", "params", "field"),
    [
        (INCLUSION, {}, "position"),
        (INCLUSION, {"position": "x"}, "position"),
        (INCLUSION, {"position": "0"}, "position"),
        (INCLUSION, {"position": "1", "event": "1"}, "position"),
        (INCLUSION, {"position": "999999"}, "position"),
        (INCLUSION, {"position": "1", "tree_size": "999999"}, "tree_size"),
        (INCLUSION, {"event": "-3"}, "event"),
        (CONSISTENCY, {}, "from"),
        (CONSISTENCY, {"from": "5", "to": "2"}, "from"),
        (CONSISTENCY, {"from": "1", "to": "99999999"}, "to"),
        (CONSISTENCY, {"from": "1e3"}, "from"),
        ("/audit/v1/events", {"limit": "5000"}, "limit"),
        ("/audit/v1/events", {"limit": ""}, "limit"),
        ("/audit/v1/events", {"start": ""}, "start"),
        ("/audit/v1/checkpoints", {"since": "soon"}, "since"),
    ],
)
def test_bad_parameters_are_400s_naming_the_field(
    auditor: APIClient, route: str, params: dict[str, str], field: str
) -> None:
    write_events(3)

    response = auditor.get(route, params)

    assert response.status_code == 400, response.content
    assert field in response.json()


def test_the_checkpoint_route_is_404_before_the_first_checkpoint() -> None:
    response = APIClient().get(CHECKPOINT)

    assert response.status_code == 404
    assert "no checkpoint" in response.json()["detail"]


def test_the_checkpoint_job_runs_every_minute_and_signs_only_when_the_tree_grew() -> None:
    from audit import jobs
    from reasoning.management.commands.setup_schedules import collect_schedules

    (spec,) = (spec for spec in collect_schedules() if spec["name"] == "audit.checkpoint")
    assert (spec["func"], spec["schedule_type"], spec["minutes"]) == ("audit.jobs.sign_checkpoint", "I", 1)
    write_events(2)

    signed_size = jobs.sign_checkpoint()
    chain_all()

    assert signed_size == len(leaves_from_events()) - 1  # all but the checkpoint's own event
    assert jobs.sign_checkpoint() is None


def test_audit_checkpoint_prints_the_signed_note_and_exits_1_when_refused() -> None:
    from io import StringIO

    from django.core.management import call_command

    write_events(2)
    out, err = StringIO(), StringIO()
    call_command("audit_checkpoint", "--chain-first", stdout=out, stderr=err)
    note = out.getvalue()
    assert parse_note(note).signed_by(Signer.parse(settings_key()).verifier)
    assert err.getvalue().startswith("signed checkpoint ")

    again = StringIO()
    call_command("audit_checkpoint", stdout=StringIO(), stderr=again)
    assert "the tree did not grow" in again.getvalue()

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_tree_node DISABLE TRIGGER audit_tree_node_append_only")
        cursor.execute("UPDATE audit_tree_node SET hash = sha256(hash)")
        cursor.execute("ALTER TABLE audit_tree_node ENABLE TRIGGER audit_tree_node_append_only")
    refused = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("audit_checkpoint", "--force", stdout=StringIO(), stderr=refused)
    assert exited.value.code == 1
    assert refused.getvalue().startswith("audit checkpoint REFUSED: ")


def settings_key() -> str:
    from django.conf import settings

    return str(settings.AUDIT_LOG_SIGNING_KEY)
