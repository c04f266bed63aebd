"""``audit_export --out DIR`` and the standalone verifier run on its output, as an auditor
would: a subprocess of ``tools/verify_audit_log.py`` that imports nothing from the project,
on the real export (docs/audit-log.md, "Export and the standalone verifier")."""

from __future__ import annotations

import json
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from audit.actions import Action
from audit.chain import chain_all
from audit.checkpoints import signer
from audit.models import AuditCheckpoint
from audit.services import Event, record_many

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
VERIFIER = REPO / "tools" / "verify_audit_log.py"


def write(count: int) -> None:
    with transaction.atomic():
        record_many(
            [
                Event(
                    Action.STEP_CREATED, "token:agent", ("test.item", n), {"n": n, "note": "raw bytes, spaces and all"}
                )
                for n in range(count)
            ]
        )


def export(out: Path) -> str:
    stdout = StringIO()
    call_command("audit_export", "--out", str(out), "--no-progress", stdout=stdout, stderr=StringIO())
    return stdout.getvalue()


def run_verifier(*args: str) -> subprocess.CompletedProcess[str]:
    # -I: isolated, so nothing of the project (or its virtualenv's site) leaks into the verifier.
    return subprocess.run(
        [sys.executable, "-I", str(VERIFIER), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_export_holds_every_event_every_checkpoint_and_the_keys(tmp_path: Path) -> None:
    write(6)

    message = export(tmp_path / "audit")

    out = tmp_path / "audit"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "rft-audit-export/2"
    size = manifest["tree_size"]
    assert message.strip() == f"exported {size} events and 1 checkpoints to {out}"
    lines = (out / "events.txt").read_bytes().split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == size
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.event_id, e.canonical FROM audit_chain_link l JOIN audit_event e ON e.id = l.event_id"
            " ORDER BY l.position"
        )
        expected = [b"%d %s" % (event_id, bytes(canonical)) for event_id, canonical in cursor]
    assert lines == expected[:size]
    assert (out / "public-keys.txt").read_text() == signer().verifier.key_string + "\n"
    latest = AuditCheckpoint.objects.order_by("-id").first()
    assert latest is not None and (out / "checkpoint.txt").read_text() == latest.note
    stored = [json.loads(line) for line in (out / "checkpoints.jsonl").read_text().splitlines()]
    assert [row["tree_size"] for row in stored] == [size]


def test_an_export_refuses_a_directory_that_holds_one(tmp_path: Path) -> None:
    write(1)
    export(tmp_path / "audit")

    with pytest.raises(CommandError, match="already holds an export"):
        export(tmp_path / "audit")


@pytest.mark.skipif(not VERIFIER.exists(), reason="tools/verify_audit_log.py is not there")
def test_the_standalone_verifier_accepts_the_real_export_and_refuses_it_once_altered(tmp_path: Path) -> None:
    write(5)
    chain_all()
    old = tmp_path / "old"
    export(old)
    write(4)
    new = tmp_path / "new"
    export(new)
    key = signer().verifier.key_string

    ok = run_verifier("--key", key, "--dir", str(new), "--trusted-checkpoint", str(old / "checkpoint.txt"))

    assert ok.returncode == 0, ok.stderr
    size = json.loads((new / "manifest.json").read_text())["tree_size"]
    assert ok.stdout.startswith(f"audit log verified: {size} events, root ")
    assert "consistent with 1 kept checkpoint" in ok.stdout

    events = (new / "events.txt").read_bytes().split(b"\n")
    assert b'"n":2' in events[2]
    events[2] = events[2].replace(b'"n":2', b'"n":7')
    (new / "events.txt").write_bytes(b"\n".join(events))

    broken = run_verifier("--key", key, "--dir", str(new))

    assert broken.returncode == 1
    assert broken.stderr.startswith("audit log FAILED: ")
