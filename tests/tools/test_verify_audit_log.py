"""tools/verify_audit_log.py, run as a subprocess against export directories and a fake server.

The writer here is independent of the project's audit code (and of the verifier): Ed25519 keys
from ``cryptography``, signed notes and the RFC 6962 tree built from their definitions in
docs/audit-log.md. No database.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ROOT = Path(__file__).resolve().parents[2]
VERIFIER = ROOT / "tools" / "verify_audit_log.py"
ORIGIN = "audit.example.org/audit-log"
TOKEN = "t0ken-for-the-verifier"


# --- A writer of logs, notes and exports ----------------------------------------------------------


@dataclass
class Signer:
    name: str
    private: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    @property
    def public(self) -> bytes:
        return self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def key_id(self) -> bytes:
        return hashlib.sha256(self.name.encode() + b"\n\x01" + self.public).digest()[:4]

    @property
    def label(self) -> str:
        return f"{self.name}+{self.key_id.hex()}"

    @property
    def verifier_key(self) -> str:
        encoded = base64.b64encode(b"\x01" + self.public).decode()
        return f"{self.label}+{encoded}"

    def line(self, body: str) -> str:
        signature = self.private.sign(body.encode())
        return f"\u2014 {self.name} {base64.b64encode(self.key_id + signature).decode()}\n"


def leaf_hash(event_id: int, canonical: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + str(event_id).encode() + b"\n" + canonical).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 MTH, recursively, from the definition."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = split(len(leaves))
    return node(mth(leaves[:k]), mth(leaves[k:]))


def consistency(m: int, leaves: Sequence[bytes], whole: bool = True) -> list[bytes]:
    """RFC 9162 §2.1.4.1 SUBPROOF(m, D[0:n], true)."""
    n = len(leaves)
    if m == n:
        return [] if whole else [mth(leaves)]
    k = split(n)
    if m <= k:
        return [*consistency(m, leaves[:k], whole), mth(leaves[k:])]
    return [*consistency(m - k, leaves[k:], False), mth(leaves[:k])]


def make_events(n: int, first_id: int = 100) -> list[tuple[int, bytes]]:
    return [
        (first_id + p, b'{"action":"test.event","n":%d,"pad":"%s"}' % (p, b"x" * (p % 13))) for p in range(1, n + 1)
    ]


def body(size: int, root: bytes, origin: str = ORIGIN) -> str:
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n"


def sign(text: str, *signers: Signer) -> str:
    return text + "\n" + "".join(signer.line(text) for signer in signers)


def checkpoint(events: Sequence[tuple[int, bytes]], size: int, *signers: Signer, origin: str = ORIGIN) -> str:
    return sign(body(size, mth([leaf_hash(*event) for event in events[:size]]), origin), *signers)


def write_export(
    out: Path,
    events: Sequence[tuple[int, bytes]],
    signer: Signer,
    sizes: Sequence[int] = (),
    *,
    previous: Sequence[Signer] = (),
    signed_size: int | None = None,
    version: int = 2,
) -> Path:
    """An export of ``events`` with checkpoints at ``sizes`` and the latest at ``signed_size``
    (default: all events), each signed by ``signer``; ``version`` 2 writes raw event bytes, 1 base64."""
    out.mkdir(parents=True, exist_ok=True)
    latest_size = len(events) if signed_size is None else signed_size
    all_sizes = sorted({*sizes, latest_size})
    notes = [checkpoint(events, size, signer) for size in all_sizes]
    manifest = {
        "format": f"rft-audit-export/{version}",
        "origin": ORIGIN,
        "tree_size": latest_size,
        "exported_at": "now",
    }
    (out / "manifest.json").write_text(json.dumps(manifest) + "\n")
    (out / "public-keys.txt").write_text("".join(f"{key.verifier_key}\n" for key in (signer, *previous)))
    (out / "checkpoint.txt").write_text(notes[-1])
    write_checkpoints(out, [(size, note) for size, note in zip(all_sizes, notes, strict=True)])
    write_events(out, events, version)
    return out


def write_checkpoints(out: Path, rows: Sequence[tuple[int, str]]) -> None:
    lines = [json.dumps({"id": ident, "tree_size": size, "note": note}) for ident, (size, note) in enumerate(rows, 1)]
    (out / "checkpoints.jsonl").write_text("".join(line + "\n" for line in lines))


def write_events(out: Path, events: Sequence[tuple[int, bytes]], version: int = 2) -> None:
    """``<id> <canonical bytes>`` lines (format /2), or ``<id> <base64 canonical bytes>`` (/1)."""
    encode: Callable[[bytes], bytes] = base64.b64encode if version == 1 else bytes
    (out / "events.txt").write_bytes(b"".join(b"%d %s\n" % (i, encode(c)) for i, c in events))


def root_b64(events: Sequence[tuple[int, bytes]]) -> str:
    return base64.b64encode(mth([leaf_hash(*event) for event in events])).decode()


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "AUDIT_TOKEN"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, str(VERIFIER), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=environment,
        timeout=60,
    )


def verified(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    return lines[0]


def failed(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("audit log FAILED: ")
    return lines[0].removeprefix("audit log FAILED: ")


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer(ORIGIN)


@pytest.fixture(scope="module")
def nine() -> list[tuple[int, bytes]]:
    return make_events(9)


# --- Intact logs -------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 1000])
def test_an_intact_log_verifies(tmp_path: Path, signer: Signer, n: int) -> None:
    events = make_events(n)
    sizes = sorted({0, 1, n // 3, n // 2, max(n - 1, 0)})
    out = write_export(tmp_path / "export", events, signer, [s for s in sizes if s <= n])
    line = verified(run("--key", signer.verifier_key, "--dir", out))
    assert line == f"audit log verified: {n} events, root {root_b64(events)}, signed by {signer.label}"


def test_a_worker_pool_checks_the_root_at_every_checkpoint(tmp_path: Path, signer: Signer) -> None:
    events = make_events(1000)
    out = write_export(tmp_path / "export", events, signer, range(0, 1000, 37))
    line = verified(run("--key", signer.verifier_key, "--dir", out, "--workers", "2", "--progress"))
    assert line == f"audit log verified: 1000 events, root {root_b64(events)}, signed by {signer.label}"
    # One altered byte late in the file is found on the pool too.
    canonical = events[900][1].replace(b"test", b"tost")
    write_events(out, [*events[:900], (events[900][0], canonical), *events[901:]])
    assert failed(run("--key", signer.verifier_key, "--dir", out, "--workers", "2")) == (
        "root at size 925 does not match checkpoint 26"
    )


def test_a_kept_checkpoint_that_is_a_prefix_is_consistent(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    kept = tmp_path / "last-month.note"
    kept.write_text(checkpoint(nine, 5, signer))
    line = verified(run("--key", signer.verifier_key, "--dir", out, "--trusted-checkpoint", kept))
    assert line.endswith(f"signed by {signer.label}; consistent with 1 kept checkpoint(s)")


def test_keys_from_a_file_and_a_rotation(tmp_path: Path, nine: list[tuple[int, bytes]]) -> None:
    old, new = Signer(ORIGIN), Signer(ORIGIN)
    out = write_export(tmp_path / "export", nine, new, [], previous=[old])
    write_checkpoints(
        out, [(3, checkpoint(nine, 3, old)), (6, checkpoint(nine, 6, old)), (9, checkpoint(nine, 9, new))]
    )
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{new.verifier_key}\n{old.verifier_key}\n")
    assert verified(run("--key", keys, "--dir", out)).endswith(f"signed by {new.label}")
    # Without the old key its checkpoints cannot be checked.
    assert failed(run("--key", new.verifier_key, "--dir", out)) == "checkpoint 1 is not signed by any given key"


def test_cosignatures_and_unknown_signers_are_ignored(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    out = write_export(tmp_path / "export", nine, signer, [4])
    witness = Signer("witness.example.org")
    text = body(9, mth([leaf_hash(*event) for event in nine]))
    cosignature = base64.b64encode(os.urandom(4) + (1700000000).to_bytes(8, "big") + os.urandom(64)).decode()
    note = sign(text, witness, signer) + f"\u2014 witness2.example.org {cosignature}\n"
    (out / "checkpoint.txt").write_text(note)
    assert verified(run("--key", signer.verifier_key, "--dir", out)).endswith(f"signed by {signer.label}")


# --- Tampered events -----------------------------------------------------------------------------


def test_altered_event_bytes(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    write_events(out, [*nine[:4], (nine[4][0], nine[4][1] + b" "), *nine[5:]])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == "root at size 6 does not match checkpoint 2"


def test_an_event_deleted(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    write_events(out, nine[:4] + nine[5:])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == "root at size 6 does not match checkpoint 2"


def test_two_events_swapped(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    write_events(out, [nine[0], nine[2], nine[1], *nine[3:]])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == "root at size 3 does not match checkpoint 1"


def test_a_truncated_events_file(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    write_events(out, nine[:7])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == "the log has 7 events but the checkpoint signs 9"


def test_a_forged_event_appended_after_the_checkpoint(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    write_events(out, [*nine, (999, b'{"action":"forged"}')])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "1 events are not covered by the signed checkpoint"
    )


def test_canonical_bytes_with_spaces_verify(tmp_path: Path, signer: Signer) -> None:
    events = [
        (100 + p, b'{"action":"test event","n":%d,"note":"  two  spaces , and more ","pad":"%s"}' % (p, b" " * p))
        for p in range(1, 1001)
    ]
    events[5] = (events[5][0], b" leading and trailing spaces ")
    out = write_export(tmp_path / "export", events, signer, range(0, 1000, 97))
    expected = f"audit log verified: 1000 events, root {root_b64(events)}, signed by {signer.label}"
    for workers in ("1", "2"):
        assert verified(run("--key", signer.verifier_key, "--dir", out, "--workers", workers)) == expected


MALFORMED: dict[str, tuple[Callable[[int, bytes], bytes], str]] = {
    "no space": (lambda i, c: b"%d" % i, "is not '<event id> <canonical bytes>'"),
    "id not digits": (lambda i, c: b"%dx %s" % (i, c), "is not '<event id> <canonical bytes>'"),
    "signed id": (lambda i, c: b"+%d %s" % (i, c), "is not '<event id> <canonical bytes>'"),
    "empty id": (lambda i, c: b" " + c, "is not '<event id> <canonical bytes>'"),
    "empty line": (lambda i, c: b"", "is not '<event id> <canonical bytes>'"),
    "missing event": (lambda i, c: b"%d " % i, "(event {id}) has no event bytes: the event is missing"),
}


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_line_is_named(tmp_path: Path, signer: Signer, case: str, workers: str) -> None:
    events = make_events(1000)
    out = write_export(tmp_path / "export", events, signer, [300, 600])
    change, reason = MALFORMED[case]
    lines = (out / "events.txt").read_bytes().split(b"\n")
    for number in (1, 700, 1000):  # the first line, one in a later chunk, the last
        event_id, canonical = events[number - 1]
        altered = [*lines[: number - 1], change(event_id, canonical), *lines[number:]]
        (out / "events.txt").write_bytes(b"\n".join(altered))
        assert failed(run("--key", signer.verifier_key, "--dir", out, "--workers", workers)) == (
            f"events.txt line {number} {reason.format(id=event_id)}"
        ), number


# The verifier with one hashing process made to die on its chunk 3 (a process killed under memory
# pressure, say): what is left of it must say so, not wait for that chunk forever.
DYING_WORKER = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("verify_audit_log", sys.argv.pop(1))
module = importlib.util.module_from_spec(spec)
sys.modules["verify_audit_log"] = module
spec.loader.exec_module(module)
hash_chunk = module._hash_chunk


def dying(index):
    if index == 3:
        os._exit(9)
    return hash_chunk(index)


module._hash_chunk = dying
sys.exit(module.main())
"""


def test_a_hashing_process_that_dies_is_named(tmp_path: Path, signer: Signer) -> None:
    out = write_export(tmp_path / "export", make_events(1000), signer, [300, 600])
    arguments = ["--key", signer.verifier_key, "--dir", str(out), "--workers", "2"]
    result = subprocess.run(
        [sys.executable, "-c", DYING_WORKER, str(VERIFIER), *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        "verify_audit_log.py: error: a hashing process stopped before it was done (exit code 9); "
        "run again, or with --workers 1"
    )
    # Nothing is left running.
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(out) not in running


def test_the_last_line_may_lack_its_line_feed(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6])
    (out / "events.txt").write_bytes((out / "events.txt").read_bytes().removesuffix(b"\n"))
    assert verified(run("--key", signer.verifier_key, "--dir", out)).startswith("audit log verified: 9 events")
    (out / "events.txt").write_bytes((out / "events.txt").read_bytes().rpartition(b"\n")[0] + b"\n109 ")
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "events.txt line 9 (event 109) has no event bytes: the event is missing"
    )


def test_an_unknown_export_format(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3])
    manifest = json.loads((out / "manifest.json").read_text())
    for name in ("rft-audit-export/4", ["rft-audit-export/2"]):
        (out / "manifest.json").write_text(json.dumps({**manifest, "format": name}))
        result = run("--key", signer.verifier_key, "--dir", out)
        assert result.returncode == 2
        assert "is not an rft-audit-export/1, rft-audit-export/2 or rft-audit-export/3 manifest" in result.stderr


# --- Format /3 (after retention dropped a prefix) ---------------------------------------------------


def edge(leaves: Sequence[bytes]) -> list[list[object]]:
    """The right edge of the tree of ``leaves``: one [level, base64 hash] per set bit of its
    size, largest subtree first."""
    out: list[list[object]] = []
    offset, size = 0, len(leaves)
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            out.append([level, base64.b64encode(mth(leaves[offset : offset + (1 << level)])).decode()])
            offset += 1 << level
    return out


def drop_prefix(out: Path, events: Sequence[tuple[int, bytes]], start: int) -> None:
    """Turn the export in ``out`` into format /3: positions 1..start dropped by retention."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(
        {"format": "rft-audit-export/3", "start": start, "start_edge": edge([leaf_hash(*e) for e in events[:start]])}
    )
    (out / "manifest.json").write_text(json.dumps(manifest))
    write_events(out, events[start:])


@pytest.mark.parametrize("start", [1, 3, 4, 7])
def test_an_export_after_retention_verifies_from_the_tree_edge_at_its_start(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]], start: int
) -> None:
    out = write_export(tmp_path / "export", nine, signer, [2, 4, 8])
    drop_prefix(out, nine, start)

    line = verified(run("--key", signer.verifier_key, "--dir", out, "--workers", "1"))
    assert line.startswith(f"audit log verified: 9 events, root {root_b64(nine)}")
    assert f"the first {start} were dropped by retention" in line


def test_a_forged_start_edge_or_an_altered_event_after_it_fails(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    out = write_export(tmp_path / "export", nine, signer, [8])
    drop_prefix(out, nine, 4)
    manifest = json.loads((out / "manifest.json").read_text())
    forged = [[2, base64.b64encode(leaf_hash(1, b"{}")).decode()]]
    (out / "manifest.json").write_text(json.dumps({**manifest, "start_edge": forged}))
    # A checkpoint at the start checks the edge at once (here: the stored one at 4 is not there,
    # the one at 8 is the first to see it).
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == ("root at size 8 does not match checkpoint 1")

    drop_prefix(out, nine, 4)
    altered = [*nine[:6], (nine[6][0], nine[6][1].replace(b"test", b"TEST")), *nine[7:]]
    write_events(out, altered[4:])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == "root at size 8 does not match checkpoint 1"


def test_a_malformed_start_edge_or_a_kept_checkpoint_inside_the_dropped_prefix_is_refused(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    out = write_export(tmp_path / "export", nine, signer)
    drop_prefix(out, nine, 5)
    manifest = json.loads((out / "manifest.json").read_text())
    for bad in (
        {"start": 0},
        {"start": "5"},
        {"start_edge": "x"},
        {"start_edge": [[2, "not base64"], [0, manifest["start_edge"][1][1]]]},
        {"start_edge": manifest["start_edge"][:1]},  # 5 = 4 + 1: two nodes
    ):
        (out / "manifest.json").write_text(json.dumps({**manifest, **bad}))
        result = run("--key", signer.verifier_key, "--dir", out)
        assert result.returncode == 2, (bad, result.stderr)
        assert "start" in result.stderr

    (out / "manifest.json").write_text(json.dumps(manifest))
    kept = tmp_path / "kept.txt"
    kept.write_text(checkpoint(nine, 3, signer))
    result = run("--key", signer.verifier_key, "--dir", out, "--trusted-checkpoint", kept)
    assert result.returncode == 2
    assert "inside the 5 events dropped by retention" in result.stderr


# --- Format /1 (base64 event lines) ----------------------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_format_1_export_verifies_and_fails_once_altered(tmp_path: Path, signer: Signer, workers: str) -> None:
    events = make_events(1000)
    out = write_export(tmp_path / "export", events, signer, range(0, 1000, 37), version=1)
    assert b"{" not in (out / "events.txt").read_bytes()  # base64 indeed
    line = verified(run("--key", signer.verifier_key, "--dir", out, "--workers", workers))
    assert line == f"audit log verified: 1000 events, root {root_b64(events)}, signed by {signer.label}"
    canonical = events[900][1].replace(b"test", b"tost")
    write_events(out, [*events[:900], (events[900][0], canonical), *events[901:]], version=1)
    assert failed(run("--key", signer.verifier_key, "--dir", out, "--workers", workers)) == (
        "root at size 925 does not match checkpoint 26"
    )


def test_format_1_a_malformed_line_and_a_missing_event(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    out = write_export(tmp_path / "export", nine, signer, [3, 6], version=1)
    good = (out / "events.txt").read_bytes().split(b"\n")
    (out / "events.txt").write_bytes(b"\n".join([*good[:3], good[3].replace(b" ", b"  "), *good[4:]]))
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "events.txt line 4 is not '<event id> <base64 canonical bytes>'"
    )
    (out / "events.txt").write_bytes(b"\n".join([*good[:2], b"103 ", *good[3:]]))
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "events.txt line 3 (event 103) has no event bytes: the event is missing"
    )
    (out / "events.txt").write_bytes(b"\n".join([*good[:4], good[4][:-2] + b"!=", *good[5:]]))
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "events.txt line 5 is not '<event id> <base64 canonical bytes>': the bytes are not base64"
    )
    # Raw bytes in a format /1 export are not base64.
    write_events(out, nine, version=2)
    assert failed(run("--key", signer.verifier_key, "--dir", out)).startswith("events.txt line 1 is not ")


# --- Rewrites re-signed by an attacker -------------------------------------------------------------


def test_a_truncated_tail_re_signed_with_another_key(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    attacker = Signer(ORIGIN)
    out = write_export(tmp_path / "export", nine[:6], attacker, [3])
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == f"the checkpoint is not signed by {signer.label}"


def test_a_truncated_tail_re_signed_with_the_key_contradicts_a_kept_checkpoint(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(nine, 8, signer))
    out = write_export(tmp_path / "export", nine[:6], signer, [3])
    assert verified(run("--key", signer.verifier_key, "--dir", out)).startswith("audit log verified: 6 events")
    assert failed(run("--key", signer.verifier_key, "--dir", out, "--trusted-checkpoint", kept)) == (
        f"fork: kept checkpoint {kept} signs size 8 but the latest checkpoint signs only 6"
    )


def test_a_rewrite_re_signed_with_the_key_contradicts_a_kept_checkpoint(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]
) -> None:
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(nine, 4, signer))
    rewritten = [*nine[:1], (nine[1][0], b'{"action":"rewritten"}'), *nine[2:]]
    out = write_export(tmp_path / "export", rewritten, signer, [2, 5])
    assert failed(run("--key", signer.verifier_key, "--dir", out, "--trusted-checkpoint", kept)) == (
        f"fork: kept checkpoint {kept} has another root at size 4 than the log"
    )


def test_a_kept_checkpoint_from_another_origin(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    other = Signer("other.example.org/log")
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(nine, 4, other, origin="other.example.org/log"))
    out = write_export(tmp_path / "export", nine, signer, [4])
    result = run("--key", signer.verifier_key, "--key", other.verifier_key, "--dir", out, "--trusted-checkpoint", kept)
    assert failed(result) == f"kept checkpoint {kept} is for origin other.example.org/log, not {ORIGIN}"


# --- Signatures and formats --------------------------------------------------------------------------


def test_a_bad_signature(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [4])
    note = (out / "checkpoint.txt").read_text()
    text, _, line = note.partition("\n\n")
    name, encoded = line.removeprefix("\u2014 ").split()
    raw = bytearray(base64.b64decode(encoded))
    raw[10] ^= 1
    (out / "checkpoint.txt").write_text(f"{text}\n\n\u2014 {name} {base64.b64encode(raw).decode()}\n")
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        f"the checkpoint has a bad signature by {signer.label}"
    )


def test_a_checkpoint_signed_by_a_rotated_out_key(tmp_path: Path, nine: list[tuple[int, bytes]]) -> None:
    old, new = Signer(ORIGIN), Signer(ORIGIN)
    out = write_export(tmp_path / "export", nine, old, [4])
    assert failed(run("--key", new.verifier_key, "--key", old.verifier_key, "--dir", out)) == (
        f"the checkpoint is signed by a rotated-out key ({old.label})"
    )


FORMATS: dict[str, tuple[Callable[[str], str], str]] = {
    "leading zero": (
        lambda t: t.replace("\n9\n", "\n09\n"),
        "the checkpoint size '09' is not a decimal number without leading zeros",
    ),
    "space in origin": (
        lambda t: t.replace(ORIGIN, "audit.example.org/audit log"),
        "the checkpoint has an origin that is empty or holds a space or control character",
    ),
    "bad base64": (lambda t: t.replace("=\n", "*\n", 1), "the checkpoint root hash is not standard base64"),
    "31-byte root": (
        lambda t: t.replace(t.split("\n")[2], base64.b64encode(os.urandom(31)).decode()),
        "the checkpoint root hash is 31 bytes, not 32",
    ),
}


@pytest.mark.parametrize("case", FORMATS)
def test_format_violations_in_a_signed_body(
    tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]], case: str
) -> None:
    change, reason = FORMATS[case]
    out = write_export(tmp_path / "export", nine, signer, [4])
    text = change(body(9, mth([leaf_hash(*event) for event in nine])))
    (out / "checkpoint.txt").write_text(sign(text, signer))  # signed: only the format is wrong
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == reason


def test_a_missing_blank_line_and_no_signature(tmp_path: Path, signer: Signer, nine: list[tuple[int, bytes]]) -> None:
    out = write_export(tmp_path / "export", nine, signer, [4])
    note = (out / "checkpoint.txt").read_text()
    (out / "checkpoint.txt").write_text(note.replace("\n\n", "\n"))
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "the checkpoint has no blank line before its signatures"
    )
    (out / "checkpoint.txt").write_text(note.replace("\n\n", "\n\n\n"))
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == (
        "the checkpoint has more than one blank line before its signatures"
    )
    (out / "checkpoint.txt").write_text(note.partition("\n\n")[0] + "\n\n")
    assert failed(run("--key", signer.verifier_key, "--dir", out)) == "the checkpoint has no signature lines"


def test_unreadable_inputs_and_usage_errors(tmp_path: Path, signer: Signer) -> None:
    missing = tmp_path / "nowhere"
    result = run("--key", signer.verifier_key, "--dir", missing)
    assert result.returncode == 2
    assert f"cannot read {missing / 'manifest.json'}" in result.stderr
    assert run("--dir", tmp_path).returncode == 2  # no --key
    assert run("--key", "not-a-key", "--dir", tmp_path).returncode == 2
    assert run("--key", signer.verifier_key, "--dir", tmp_path, "--url", "http://x").returncode == 2


# --- Online ----------------------------------------------------------------------------------------


@dataclass
class FakeLog:
    events: list[tuple[int, bytes]]
    note: str
    bad_proof: bool = False
    bad_leaf_at: int = 0
    dropped: int = 0  # positions 1..dropped dropped by retention: served without bytes
    requests: list[str] = field(default_factory=list)


def handler_for(log: FakeLog) -> type[BaseHTTPRequestHandler]:
    leaves = [leaf_hash(*event) for event in log.events]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def send(self, status: int, payload: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = {key: int(value) for key, value in urllib.parse.parse_qsl(url.query)}
            log.requests.append(self.path)
            if url.path == "/audit/v1/checkpoint":
                return self.send(200, log.note.encode(), "text/plain; charset=utf-8")
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.send(401, b'{"detail": "no token"}')
            if url.path == "/audit/v1/events":
                start, limit = query["start"], min(query.get("limit", 1000), 1000)
                rows = []
                for position in range(start, min(start + limit, len(log.events) + 1)):
                    event_id, canonical = log.events[position - 1]
                    leaf = leaves[position - 1] if position != log.bad_leaf_at else bytes(32)
                    rows.append(
                        {
                            "position": position,
                            "event_id": event_id,
                            "canonical": None if position <= log.dropped else base64.b64encode(canonical).decode(),
                            "leaf_hash": base64.b64encode(leaf).decode(),
                        }
                    )
                answer = {
                    "tree_size": len(leaves),
                    "dropped_through": log.dropped,
                    "start_edge": edge(leaves[: log.dropped]),
                    "events": rows,
                }
                return self.send(200, json.dumps(answer).encode())
            if url.path == "/audit/v1/proof/consistency":
                proof = consistency(query["from"], leaves[: query["to"]])
                if log.bad_proof:
                    proof[-1] = hashlib.sha256(proof[-1]).digest()
                hashes = [base64.b64encode(h).decode() for h in proof]
                answer = {"first": query["from"], "second": query["to"], "consistency": hashes}
                return self.send(200, json.dumps(answer).encode())
            return self.send(404, b"{}")

    return Handler


@pytest.fixture
def serve() -> Iterator[list[ThreadingHTTPServer]]:
    servers: list[ThreadingHTTPServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def start(servers: list[ThreadingHTTPServer], log: FakeLog) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(log))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_online_a_log_verifies_page_by_page_up_to_the_checkpoint(
    tmp_path: Path, signer: Signer, serve: list[ThreadingHTTPServer]
) -> None:
    events = make_events(2100)
    log = FakeLog(events, checkpoint(events, 2050, signer))  # the tree grew after the checkpoint
    base = start(serve, log)
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(events, 1234, signer))
    result = run(
        "--key", signer.verifier_key, "--url", base + "/", "--trusted-checkpoint", kept, env={"AUDIT_TOKEN": TOKEN}
    )
    assert verified(result) == (
        f"audit log verified: 2050 events, root {root_b64(events[:2050])}, signed by {signer.label}"
        "; consistent with 1 kept checkpoint(s)"
    )
    assert [path for path in log.requests if path.startswith("/audit/v1/events")] == [
        "/audit/v1/events?start=1&limit=1000",
        "/audit/v1/events?start=1001&limit=1000",
        "/audit/v1/events?start=2001&limit=50",
    ]
    assert "/audit/v1/proof/consistency?from=1234&to=2050" in log.requests


def test_online_after_retention_the_walk_goes_on_from_the_servers_tree_edge(
    tmp_path: Path, signer: Signer, serve: list[ThreadingHTTPServer]
) -> None:
    events = make_events(1500)
    log = FakeLog(events, checkpoint(events, 1500, signer), dropped=1100)
    base = start(serve, log)
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(events, 700, signer))  # inside the dropped prefix: a consistency proof checks it
    line = verified(run("--key", signer.verifier_key, "--url", base, "--token", TOKEN, "--trusted-checkpoint", kept))
    assert line.startswith(f"audit log verified: 1500 events, root {root_b64(events)}")
    assert "the first 1100 were dropped by retention" in line
    assert "consistent with 1 kept checkpoint(s)" in line
    assert [path for path in log.requests if path.startswith("/audit/v1/events")] == [
        "/audit/v1/events?start=1&limit=1000",
        "/audit/v1/events?start=1101&limit=400",
    ]

    # A server that forges its edge is caught by the signed root.
    forged = FakeLog(events, checkpoint(events, 1500, signer), dropped=1100)
    forged.events = [(1, b"{}"), *events[1:]]  # the edge is built from what it serves
    assert failed(run("--key", signer.verifier_key, "--url", start(serve, forged), "--token", TOKEN)) == (
        "root at size 1500 does not match the checkpoint"
    )


def test_online_without_a_token_the_server_says_401(signer: Signer, serve: list[ThreadingHTTPServer]) -> None:
    events = make_events(5)
    base = start(serve, FakeLog(events, checkpoint(events, 5, signer)))
    result = run("--key", signer.verifier_key, "--url", base)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(f"GET {base}/audit/v1/events?start=1&limit=5: HTTP 401 Unauthorized")
    assert verified(run("--key", signer.verifier_key, "--url", base, "--token", TOKEN)).startswith(
        "audit log verified: 5 events"
    )


def test_online_a_consistency_proof_that_does_not_verify(
    tmp_path: Path, signer: Signer, serve: list[ThreadingHTTPServer]
) -> None:
    events = make_events(9)
    base = start(serve, FakeLog(events, checkpoint(events, 9, signer), bad_proof=True))
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(events, 5, signer))
    result = run("--key", signer.verifier_key, "--url", base, "--token", TOKEN, "--trusted-checkpoint", kept)
    assert failed(result) == (
        f"fork: the server's consistency proof from kept checkpoint {kept} (size 5) to size 9 does not verify"
    )


def test_online_a_leaf_hash_that_does_not_match_and_a_rewritten_log(
    tmp_path: Path, signer: Signer, serve: list[ThreadingHTTPServer]
) -> None:
    events = make_events(9)
    base = start(serve, FakeLog(events, checkpoint(events, 9, signer), bad_leaf_at=3))
    assert failed(run("--key", signer.verifier_key, "--url", base, "--token", TOKEN)) == (
        "the server's leaf hash at position 3 does not match its event bytes"
    )
    kept = tmp_path / "kept.note"
    kept.write_text(checkpoint(events, 6, signer))
    rewritten = [*events[:4], (events[4][0], b"{}"), *events[5:]]
    base = start(serve, FakeLog(rewritten, checkpoint(rewritten, 9, signer)))
    result = run("--key", signer.verifier_key, "--url", base, "--token", TOKEN, "--trusted-checkpoint", kept)
    assert failed(result) == f"fork: kept checkpoint {kept} has another root at size 6 than the log"
