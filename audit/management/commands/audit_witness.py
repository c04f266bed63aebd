"""Witness the audit log from outside: fetch its latest checkpoint, check the signature and
that it extends the last checkpoint this witness saw (a consistency proof), and keep it.

Run it from cron on another machine (docs/audit-log.md, "Witnessing"). Exit 0: consistent
(or first run); exit 1: FORK or bad signature (loud on stderr: the log was rewritten, or
someone signs in its name); exit 2: the log could not be reached or answered nonsense.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from audit import merkle
from audit.notes import (
    COSIGNATURE_V1,
    SIGNATURE_PREFIX,
    Checkpoint,
    NoteError,
    Signer,
    Verifier,
    key_id,
    parse_checkpoint,
    parse_note,
)

EXIT_FORK = 1
EXIT_UNREACHABLE = 2


def cosignature_line(witness: Signer, body: str, timestamp: int) -> str:
    """A C2SP tlog-cosignature/v1 line: the witness signs "cosignature/v1", the time and the
    checkpoint body; key id over the 0x04 key type; signature = 8-byte time || Ed25519."""
    message = f"cosignature/v1\ntime {timestamp}\n{body}".encode()
    private = Ed25519PrivateKey.from_private_bytes(witness.seed)
    public = witness.verifier.public_key
    kid = key_id(witness.name, public, COSIGNATURE_V1)
    signature = timestamp.to_bytes(8, "big") + private.sign(message)
    return f"{SIGNATURE_PREFIX}{witness.name} {base64.b64encode(kid + signature).decode()}\n"


class Command(BaseCommand):
    help = (
        "Fetch BASE/audit/v1/checkpoint, verify its signature with --key and its consistency with the last "
        "checkpoint kept in --state, then keep it. Exit 1 on a fork or a bad signature, 2 when unreachable."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", required=True, help="The log's base URL, e.g. https://rft.example.org")
        parser.add_argument("--state", required=True, type=Path, help="A file this witness keeps between runs.")
        parser.add_argument(
            "--key", help="The log's verifier key (or a file holding it). Default: the one kept in --state."
        )
        parser.add_argument("--token", help="An audit.read token for the consistency proof (or env AUDIT_TOKEN).")
        parser.add_argument(
            "--cosign-key",
            help="The witness's own signing key (PRIVATE+KEY+…, or a file): print the note with a "
            "tlog-cosignature/v1 line added.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        base = options["url"].rstrip("/")
        state_path: Path = options["state"]
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
        key_text = str(_read(options["key"]) if options["key"] else state.get("key") or "")
        if not key_text:
            self._fail(EXIT_UNREACHABLE, "no --key given and none kept in --state: pass the log's verifier key once")
        try:
            verifier = Verifier.parse(key_text)
        except NoteError as exc:
            self._fail(EXIT_UNREACHABLE, f"--key: {exc}")
        token = options["token"] or settings.AUDIT_TOKEN  # AUDIT_TOKEN or AUDIT_TOKEN_FILE
        note = self._get(f"{base}/audit/v1/checkpoint", token="").decode()
        try:
            signed = parse_note(note)
            checkpoint = parse_checkpoint(signed.body)
        except NoteError as exc:
            self._fail(EXIT_FORK, f"the checkpoint does not parse: {exc}")
        if not signed.signed_by(verifier):
            self._fail(EXIT_FORK, f"BAD SIGNATURE: the checkpoint is not signed by {verifier.key_string}")
        kept = state.get("checkpoint")
        if kept:
            old = parse_checkpoint(parse_note(kept).body)
            self._check_consistent(base, token, old, checkpoint)
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps({"key": verifier.key_string, "checkpoint": note}, indent=2) + "\n")
        previous = f" (from {old.tree_size})" if kept else " (first checkpoint kept)"
        self.stderr.write(f"audit log consistent: tree size {checkpoint.tree_size}{previous}")
        if options["cosign_key"]:
            witness = Signer.parse(_read(options["cosign_key"]))
            self.stdout.write(note + cosignature_line(witness, signed.body, int(time.time())), ending="")

    def _check_consistent(self, base: str, token: str, old: Checkpoint, new: Checkpoint) -> None:
        if old.origin != new.origin:
            self._fail(EXIT_FORK, f"FORK: the log's origin changed from {old.origin!r} to {new.origin!r}")
        if new.tree_size < old.tree_size:
            self._fail(EXIT_FORK, f"FORK: the log shrank from {old.tree_size} to {new.tree_size} leaves")
        if new.tree_size == old.tree_size:
            if new.root_hash != old.root_hash:
                self._fail(EXIT_FORK, f"FORK: two different roots signed for tree size {new.tree_size}")
            return
        body = self._get(f"{base}/audit/v1/proof/consistency?from={old.tree_size}&to={new.tree_size}", token=token)
        try:
            proof = [base64.b64decode(item, validate=True) for item in json.loads(body)["consistency"]]
        except (ValueError, KeyError, TypeError):
            self._fail(EXIT_UNREACHABLE, "the consistency proof is not the documented JSON")
        if not merkle.verify_consistency(old.tree_size, new.tree_size, old.root_hash, new.root_hash, proof):
            self._fail(
                EXIT_FORK,
                f"FORK: the tree of {new.tree_size} leaves does not extend "
                f"the one of {old.tree_size} this witness kept",
            )

    def _get(self, url: str, *, token: str) -> bytes:
        if not url.startswith(("http://", "https://")):
            self._fail(EXIT_UNREACHABLE, f"--url must be an http(s) URL, got {url!r}")
        request = urllib.request.Request(  # noqa: S310 (http(s) only, checked above)
            url, headers={"Authorization": f"Bearer {token}"} if token else {}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (the operator's URL)
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            self._fail(EXIT_UNREACHABLE, f"GET {url}: HTTP {exc.code}")
        except (urllib.error.URLError, OSError) as exc:
            self._fail(EXIT_UNREACHABLE, f"GET {url}: {exc}")

    def _fail(self, code: int, message: str) -> NoReturn:
        self.stderr.write(f"audit witness: {message}")
        sys.exit(code)


def _read(value: str) -> str:
    path = Path(value)
    return path.read_text().strip() if path.is_file() else value.strip()
