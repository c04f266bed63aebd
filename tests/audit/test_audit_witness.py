"""``audit_witness`` against the real server on loopback (live_server): it keeps the latest
checkpoint, checks each new one's signature and its consistency proof from the one it kept,
and fails loudly on a fork (docs/audit-log.md, "Witnessing")."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.management import call_command
from django.db import connection, transaction
from pytest_django.live_server_helper import LiveServer

from audit import tree
from audit.actions import Action
from audit.chain import chain_all
from audit.checkpoints import sign_checkpoint, signer
from audit.notes import Signer, parse_note
from audit.services import Event, record_many

pytestmark = pytest.mark.django_db(transaction=True)


def write(count: int) -> None:
    with transaction.atomic():
        record_many([Event(Action.STEP_CREATED, "token:agent", ("test.item", n), {"n": n}) for n in range(count)])
    chain_all()


def witness(live_server: LiveServer, state: Path, token: str, *extra: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    args = ["--url", live_server.url, "--state", str(state), "--token", token, *extra]
    try:
        call_command("audit_witness", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        assert isinstance(exc.code, int)
        return exc.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.fixture
def token(make_token: Callable[..., str]) -> str:
    return make_token("audit.read", name="witness")


def test_the_witness_keeps_the_first_checkpoint_then_accepts_a_consistent_growth(
    live_server: LiveServer, tmp_path: Path, token: str
) -> None:
    state = tmp_path / "state.json"
    write(3)
    first = sign_checkpoint()
    key = signer().verifier.key_string

    code, _, err = witness(live_server, state, token, "--key", key)
    assert (code, err.strip()) == (0, f"audit log consistent: tree size {first.tree_size} (first checkpoint kept)")

    write(5)
    second = sign_checkpoint()
    code, _, err = witness(live_server, state, token)  # the key is kept in the state now

    assert code == 0, err
    assert err.strip() == f"audit log consistent: tree size {second.tree_size} (from {first.tree_size})"
    assert json.loads(state.read_text())["checkpoint"].split("\n")[1] == str(second.tree_size)


def test_a_rewritten_history_is_a_fork(live_server: LiveServer, tmp_path: Path, token: str, settings: object) -> None:
    state = tmp_path / "state.json"
    write(4)
    sign_checkpoint()
    assert witness(live_server, state, token, "--key", signer().verifier.key_string)[0] == 0
    # The database owner rewrites every leaf, then gets a new checkpoint signed over the
    # rewrite (the signing key sits beside the database): only the witness can tell.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_tree_node DISABLE TRIGGER audit_tree_node_append_only")
        cursor.execute("ALTER TABLE audit_checkpoint DISABLE TRIGGER audit_checkpoint_append_only")
        cursor.execute("DELETE FROM audit_tree_node")
        cursor.execute("DELETE FROM audit_checkpoint")
        cursor.execute("ALTER TABLE audit_checkpoint ENABLE TRIGGER audit_checkpoint_append_only")
        size = tree.tree_size(cursor)
        forged = [hashlib.sha256(b"forged %d" % n).digest() for n in range(size)]
        tree.extend(cursor, 0, forged)
        cursor.execute("ALTER TABLE audit_tree_node ENABLE TRIGGER audit_tree_node_append_only")
    write(2)
    sign_checkpoint()

    code, _, err = witness(live_server, state, token)

    assert code == 1
    assert "FORK" in err and "does not extend" in err


def test_a_checkpoint_signed_by_another_key_is_refused(live_server: LiveServer, tmp_path: Path, token: str) -> None:
    write(2)
    sign_checkpoint()
    stranger = Signer.generate("localhost/rft-audit-log").verifier.key_string

    code, _, err = witness(live_server, tmp_path / "state.json", token, "--key", stranger)

    assert code == 1
    assert "BAD SIGNATURE" in err
    assert not (tmp_path / "state.json").exists()


def test_an_unreachable_log_exits_2(tmp_path: Path) -> None:
    out, err = StringIO(), StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command(
            "audit_witness",
            "--url",
            "http://127.0.0.1:9",
            "--state",
            str(tmp_path / "s.json"),
            "--key",
            signer().verifier.key_string,
            stdout=out,
            stderr=err,
        )
    assert exited.value.code == 2
    assert "GET http://127.0.0.1:9/audit/v1/checkpoint" in err.getvalue()


def test_the_witness_cosigns_with_a_tlog_cosignature_line(live_server: LiveServer, tmp_path: Path, token: str) -> None:
    write(2)
    sign_checkpoint()
    mine = Signer.generate("witness.example/w1")
    key_file = tmp_path / "witness.key"
    key_file.write_text(mine.key_string)

    code, out, _ = witness(
        live_server,
        tmp_path / "state.json",
        token,
        "--key",
        signer().verifier.key_string,
        "--cosign-key",
        str(key_file),
    )

    assert code == 0
    note = parse_note(out)
    assert [name for name, _, _ in note.signatures] == ["localhost/rft-audit-log", "witness.example/w1"]
    _, key_id, raw = note.signatures[1]
    public = mine.verifier.public_key
    assert key_id == hashlib.sha256(b"witness.example/w1\n\x04" + public).digest()[:4]
    timestamp = int.from_bytes(raw[:8], "big")
    message = f"cosignature/v1\ntime {timestamp}\n{note.body}".encode()
    Ed25519PublicKey.from_public_bytes(public).verify(raw[8:], message)  # raises when wrong
    assert base64.b64encode(key_id + raw).decode() in out


def test_the_standalone_verifier_checks_the_live_log_online(
    live_server: LiveServer, tmp_path: Path, token: str
) -> None:
    import subprocess
    import sys

    verifier = Path(__file__).resolve().parents[2] / "tools" / "verify_audit_log.py"
    write(3)
    sign_checkpoint()
    kept = tmp_path / "kept.note"
    kept.write_text(_latest_note())
    write(4)
    sign_checkpoint()
    key = signer().verifier.key_string

    run = subprocess.run(
        [
            sys.executable,
            "-I",
            str(verifier),
            "--key",
            key,
            "--url",
            live_server.url,
            "--token",
            token,
            "--trusted-checkpoint",
            str(kept),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("audit log verified: ") and "consistent with 1 kept checkpoint" in run.stdout


def _latest_note() -> str:
    from audit.checkpoints import latest_checkpoint

    latest = latest_checkpoint()
    assert latest is not None
    return latest.note
