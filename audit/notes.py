"""C2SP signed notes and tlog checkpoints with Ed25519 keys (pure: no Django, no I/O).

Formats (docs/audit-log.md, "Checkpoints"; C2SP ``signed-note`` and ``tlog-checkpoint``):

* checkpoint body: ``<origin>\\n<tree size>\\n<base64 root hash>\\n``;
* signed note: the body, an empty line, then one line per signature,
  ``— <key name> <base64(key id (4 bytes) || signature (64 bytes))>\\n``;
* key id: the first 4 bytes of ``SHA-256(name || 0x0A || 0x01 || public key)``;
* verifier key: ``<name>+<key id hex>+<base64(0x01 || public key)>``;
* signing key: ``PRIVATE+KEY+<name>+<key id hex>+<base64(0x01 || seed)>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

ED25519 = 0x01
COSIGNATURE_V1 = 0x04  # C2SP tlog-cosignature/v1: a witness's Ed25519 key
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space
_NAME = re.compile(r"^[^\s+]+$")  # no whitespace, no plus (C2SP signed-note key names)
_SIZE = re.compile(r"^(0|[1-9][0-9]*)$")


class NoteError(ValueError):
    """A note, checkpoint or key that does not follow its format."""


def key_id(name: str, public_key: bytes, key_type: int = ED25519) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([key_type]) + public_key).digest()[:4]


@dataclass(frozen=True)
class Verifier:
    name: str
    public_key: bytes  # 32 raw bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public_key)

    @property
    def key_string(self) -> str:
        encoded = base64.b64encode(bytes([ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        parts = text.strip().split("+", 2)  # base64 may hold '+': the key is the rest
        if len(parts) != 3:
            raise NoteError("a verifier key is <name>+<key id hex>+<base64 key>")
        name, hex_id, encoded = parts
        key = _decode(encoded, "verifier key")
        if not _NAME.match(name) or len(key) != 33 or key[0] != ED25519:
            raise NoteError("a verifier key needs a name without spaces and a 0x01-prefixed 32-byte Ed25519 key")
        verifier = cls(name, key[1:])
        if verifier.key_id.hex() != hex_id.lower():
            raise NoteError("the verifier key's id does not match its name and key")
        return verifier

    def verify(self, body: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, body)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class Signer:
    name: str
    seed: bytes  # 32 raw bytes

    @classmethod
    def generate(cls, name: str) -> Signer:
        _check_name(name)
        private = Ed25519PrivateKey.generate()
        seed = private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return cls(name, seed)

    @classmethod
    def parse(cls, text: str) -> Signer:
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise NoteError("a signing key is PRIVATE+KEY+<name>+<key id hex>+<base64 key>")
        name, hex_id, encoded = parts[2:]
        key = _decode(encoded, "signing key")
        if not _NAME.match(name) or len(key) != 33 or key[0] != ED25519:
            raise NoteError("a signing key needs a name without spaces and a 0x01-prefixed 32-byte Ed25519 seed")
        signer = cls(name, key[1:])
        if signer.verifier.key_id.hex() != hex_id.lower():
            raise NoteError("the signing key's id does not match its name and key")
        return signer

    @property
    def key_string(self) -> str:
        encoded = base64.b64encode(bytes([ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{encoded}"

    @property
    def verifier(self) -> Verifier:
        public = Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return Verifier(self.name, public.public_bytes(Encoding.Raw, PublicFormat.Raw))

    def signature_line(self, body: bytes) -> str:
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(body)
        encoded = base64.b64encode(self.verifier.key_id + signature).decode()
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    tree_size: int
    root_hash: bytes

    def body(self) -> str:
        return f"{self.origin}\n{self.tree_size}\n{base64.b64encode(self.root_hash).decode()}\n"

    def sign(self, signer: Signer) -> str:
        """The signed note: the body, an empty line, the signature line."""
        body = self.body()
        return body + "\n" + signer.signature_line(body.encode())


@dataclass(frozen=True)
class SignedNote:
    body: str
    signatures: list[tuple[str, bytes, bytes]]  # (key name, key id, signature)

    def signed_by(self, verifier: Verifier) -> bool:
        return any(
            name == verifier.name and kid == verifier.key_id and verifier.verify(self.body.encode(), signature)
            for name, kid, signature in self.signatures
        )


def parse_note(text: str) -> SignedNote:
    """Split a signed note into its body and signature lines (format rules of C2SP signed-note)."""
    if "\r" in text:
        raise NoteError("a note has no carriage returns")
    body, blank, rest = text.partition("\n\n")
    if not blank or not body:
        raise NoteError("a note needs its text, one empty line, then its signatures")
    if not rest.endswith("\n"):
        raise NoteError("a note ends with a line feed")
    signatures = []
    for line in rest[:-1].split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError("every line after the empty line is a signature starting with an em dash")
        name, space, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        raw = _decode(encoded, "signature")
        if not space or not _NAME.match(name) or len(raw) < 5:
            raise NoteError("a signature line is '— <name> <base64(key id || signature)>'")
        signatures.append((name, raw[:4], raw[4:]))
    return SignedNote(body + "\n", signatures)


def parse_checkpoint(body: str) -> Checkpoint:
    """The checkpoint in a note's body (tlog-checkpoint: origin, size, root; extension lines allowed)."""
    lines = body.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("a checkpoint has an origin line, a size line and a root hash line")
    origin, size, root = lines[0], lines[1], lines[2]
    if not origin or any(ch.isspace() for ch in origin) or not origin.isprintable():
        raise NoteError("the checkpoint origin is non-empty and has no spaces or control characters")
    if not _SIZE.match(size):
        raise NoteError("the checkpoint size is a decimal number without leading zeros")
    root_hash = _decode(root, "root hash")
    if len(root_hash) != 32:
        raise NoteError("the checkpoint root hash is 32 bytes")
    return Checkpoint(origin, int(size), root_hash)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise NoteError("a key name has no spaces and no '+'")


def _decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise NoteError(f"the {what} is not standard base64") from None
