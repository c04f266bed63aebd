"""``manage.py audit_export --out DIR``: the audit log as plain files an auditor verifies offline
with ``tools/verify_audit_log.py`` (docs/audit-log.md, "Export").

Layout (format ``rft-audit-export/2``, or ``/3`` once retention has dropped a prefix):

* ``manifest.json`` — ``{"format", "origin", "tree_size", "exported_at"}``, and in format ``/3``
  ``"start"`` (the positions dropped by retention, ``1..start``, are not in ``events.txt``) and
  ``"start_edge"``: the tree's right edge at ``start``, ``[[level, base64 hash], ...]`` largest
  subtree first (``merkle.frontier_keys``), from which the verifier goes on hashing; the
  signed roots past ``start`` bind it;
* ``public-keys.txt`` — verifier keys, the current one first, then rotated-out ones;
* ``checkpoint.txt`` — the latest signed note; it covers every exported event;
* ``checkpoints.jsonl`` — every stored checkpoint in signing order, ``{"id", "tree_size", "note"}``;
* ``events.txt`` — line *p* is ``<event id> <canonical bytes>`` for chain position *start + p*,
  the bytes raw (compact JSON never holds a line feed; it may hold spaces): the leaf data is the
  line with its first space replaced by a line feed. A link whose event is missing has empty
  bytes (``<id> ``). (Format ``/1`` had the bytes in base64; the verifier still reads it.)

Everything is read in one repeatable-read snapshot, so the files agree with each other; the
links stream in keyset chunks with their events (``chain.linked_chunks``, constant memory).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from audit import tree
from audit.checkpoints import verifiers
from audit.models import AuditCheckpoint
from audit.verify import dropped_through, linked_chunks, read_snapshot

FORMAT = "rft-audit-export/2"
# The same, after a prefix dropped by retention: events.txt starts after it.
FORMAT_FROM_EDGE = "rft-audit-export/3"
FILES = ("manifest.json", "public-keys.txt", "checkpoint.txt", "checkpoints.jsonl", "events.txt")


@dataclass(frozen=True)
class Exported:
    tree_size: int
    checkpoints: int
    # The positions 1..start were dropped by retention: not in events.txt (format /3).
    start: int = 0


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
        start = min(dropped_through(), size)
        try:
            edge = tree.edge(start)
        except KeyError:
            raise ExportError(
                f"the Merkle tree's nodes at position {start}, where the export starts, are missing"
            ) from None
        written = _events(out / "events.txt", start, size, on_progress, chunk)
        if start + written != size:
            raise ExportError(
                f"the chain holds {start + written} linked events but checkpoint {latest.pk} signs {size}"
            )
        manifest: dict[str, object] = {
            "format": FORMAT_FROM_EDGE if start else FORMAT,
            "origin": settings.AUDIT_LOG_ORIGIN,
            "tree_size": size,
            "exported_at": timezone.now().isoformat(),
        }
        if start:
            manifest["start"] = start
            manifest["start_edge"] = [[level, base64.b64encode(digest).decode("ascii")] for level, digest in edge]
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return Exported(size, len(stored), start)


def _events(path: Path, start: int, size: int, on_progress: Callable[[int], object] | None, chunk: int) -> int:
    written = 0
    with path.open("wb") as handle:
        for links, events in linked_chunks(start, chunk, until=size, columns="e.canonical"):
            for _, event_id, _, _ in links:
                # A link whose event is missing is exported with empty bytes: the verifier names it.
                found = events.get(event_id)
                data = bytes(found[0][0]) if found else b""
                if b"\n" in data:  # cannot happen (compact JSON escapes it): never write an ambiguous line
                    raise ExportError(f"event {event_id}: its canonical bytes hold a line feed")
                handle.write(b"%d %s\n" % (event_id, data))
            written += len(links)
            if on_progress is not None:
                on_progress(len(links))
    return written
