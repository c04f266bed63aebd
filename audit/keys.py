"""The audit log's signing key, made ready as the audit app starts (``AuditConfig.ready``).

Settings read ``AUDIT_LOG_ORIGIN``, ``AUDIT_LOG_SIGNING_KEY`` and ``AUDIT_LOG_PREVIOUS_KEYS`` from
the environment (and refuse a remote database without them). Here, in every process before it
serves anything: a local run without a key gets one generated once into ``DATA_DIR``; then each
key is parsed and the signing key's name checked against the origin. A bad key is an
``ImproperlyConfigured`` naming the variable, so the process does not start
(docs/audit-log.md, "Keys").
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from audit.notes import NoteError, Signer, Verifier

LOCAL_KEY_FILE = "audit_log_signing_key"


def configure() -> None:
    if not settings.AUDIT_LOG_SIGNING_KEY:
        settings.AUDIT_LOG_SIGNING_KEY = _local_key(Path(settings.DATA_DIR) / LOCAL_KEY_FILE)
    try:
        signer = Signer.parse(settings.AUDIT_LOG_SIGNING_KEY)
    except NoteError as exc:
        raise ImproperlyConfigured(f"AUDIT_LOG_SIGNING_KEY: {exc}") from None
    if signer.name != settings.AUDIT_LOG_ORIGIN:
        raise ImproperlyConfigured(
            f"AUDIT_LOG_SIGNING_KEY is named {signer.name!r} but AUDIT_LOG_ORIGIN is {settings.AUDIT_LOG_ORIGIN!r}: "
            "a checkpoint's signing key is named after its log (a local run: delete DATA_DIR/audit_log_signing_key)"
        )
    for index, previous in enumerate(settings.AUDIT_LOG_PREVIOUS_KEYS):
        try:
            Verifier.parse(previous)
        except NoteError as exc:
            raise ImproperlyConfigured(f"AUDIT_LOG_PREVIOUS_KEYS entry {index + 1}: {exc}") from None


def _local_key(path: Path) -> str:
    """Generated once for a local run (settings allow no key only then), kept owner-readable."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Signer.generate(settings.AUDIT_LOG_ORIGIN).key_string)
        path.chmod(0o600)
    return path.read_text().strip()
