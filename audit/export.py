"""``manage.py audit_export --out DIR``: the audit log as plain files an auditor verifies offline
with ``tools/verify_audit_log.py`` (docs/audit-log.md, "Export").

Layout (format ``rft-audit-export/2``):

* ``manifest.json`` — ``{"format", "origin", "tree_size", "exported_at"}``;
* ``public-keys.txt`` — verifier keys, the current one first, then rotated-out ones;
* ``checkpoint.txt`` — the latest signed note; it covers every exported event;
* ``checkpoints.jsonl`` — every stored checkpoint in signing order, ``{"id", "tree_size", "note"}``;
* ``events.txt`` — line *p* is ``<event id> <canonical bytes>`` for chain position *p*, the bytes
  raw (compact JSON never holds a line feed; it may hold spaces): the leaf data is the line with its
  first space replaced by a line feed. A link whose event is missing has empty bytes (``<id> ``).
  (Format ``/1`` had the bytes in base64; the verifier still reads it.)

Everything is read in one repeatable-read snapshot, so the files agree with each other; the
events stream through a server-side cursor (constant memory).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from audit.chain import read_snapshot
from audit.checkpoints import verifiers
from audit.models import AuditCheckpoint

FORMAT = "rft-audit-export/2"
FILES = ("manifest.json", "public-keys.txt", "checkpoint.txt", "checkpoints.jsonl", "events.txt")


@dataclass(frozen=True)
class Exported:
    tree_size: int
    checkpoints: int


class ExportError(RuntimeError):
    pass


def export(out: Path, *, on_progress: Callable[[int], object] | None = None, chunk: int = 5000) -> Exported:
    """Write the export into ``out`` (created; must not hold an export already)."""
    out.mkdir(parents=True, exist_ok=True)
    if any((out / name).exists() for name in FILES):
        raise ExportError(f"{out} already holds an export: choose an empty directory")
    with read_snapshot():
        stored = list(AuditCheckpoint.objects.order_by("id"))
        if not stored:
            raise ExportError("no checkpoint has been signed yet: run `manage.py audit_checkpoint --chain-first`")
        latest = stored[-1]
        size = latest.tree_size
        (out / "public-keys.txt").write_text("".join(f"{key.key_string}\n" for key in verifiers()))
        (out / "checkpoint.txt").write_text(latest.note)
        with (out / "checkpoints.jsonl").open("w") as handle:
            for row in stored:
                handle.write(json.dumps({"id": row.pk, "tree_size": row.tree_size, "note": row.note}) + "\n")
        written = _events(out / "events.txt", size, on_progress, chunk)
        if written != size:
            raise ExportError(f"the chain holds {written} linked events but checkpoint {latest.pk} signs {size}")
        manifest = {
            "format": FORMAT,
            "origin": settings.AUDIT_LOG_ORIGIN,
            "tree_size": size,
            "exported_at": timezone.now().isoformat(),
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return Exported(size, len(stored))


def _events(path: Path, size: int, on_progress: Callable[[int], object] | None, chunk: int) -> int:
    connection.ensure_connection()
    assert connection.connection is not None
    written = 0
    with path.open("wb") as handle, connection.connection.cursor(name="audit_export_events") as cursor:
        cursor.itersize = chunk
        # A link whose event is missing is exported with empty bytes: the verifier names it.
        cursor.execute(
            "SELECT l.event_id, coalesce(e.canonical, ''::bytea) FROM audit_chain_link l"
            " LEFT JOIN audit_event e ON e.id = l.event_id WHERE l.position <= %s ORDER BY l.position",
            [size],
        )
        for event_id, canonical in cursor:
            data = bytes(canonical)
            if b"\n" in data:  # cannot happen (compact JSON escapes it): never write an ambiguous line
                raise ExportError(f"event {event_id}: its canonical bytes hold a line feed")
            handle.write(b"%d %s\n" % (event_id, data))
            written += 1
            if on_progress is not None and written % chunk == 0:
                on_progress(chunk)
    if on_progress is not None:
        on_progress(written % chunk)
    return written
