"""Stream completed flows (``--format raw``) or DPO preference pairs (``--format dpo``) as JSONL.

The row shapes and the pairing rule are in docs/evaluation.md. Rows go to ``--out`` (a file,
written under a temporary name and renamed when complete) or stdout; a progress bar and,
at the end, one line ``rows=<n> bytes=<n> seconds=<s>`` go to stderr. Each run is audited
(``reasoning.export.completed``). Bad flags exit 2 with a line naming the flag.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from tqdm import tqdm

from audit.services import payload_float
from core.api_views import parse_instant
from core.errors import InvalidInput
from core.labels import LABEL_PATTERN
from core.replica import replica_reads
from reasoning.evaluation import EXIT_USAGE, InputError, services
from reasoning.evaluation import dpo as dpo_pairs
from reasoning.evaluation.export import STDOUT, ExportFilters, count_raw, encode, output, raw_rows, read_snapshot

ACTOR = "system:cli"
LABEL = re.compile(LABEL_PATTERN)
LABEL_MAX = 100  # the width of the trigger_type, agent and outcome_type columns
AUDITED_PATH_MAX = 200  # audit payload strings are capped at 200 characters


@dataclass(frozen=True)
class Request:
    format: str
    filters: ExportFilters
    out: str
    patient_key: bool
    allow_reuse: bool
    progress: bool


def parse_when(flag: str, value: str | None) -> datetime | None:
    """An ISO 8601 date (its midnight in settings.TIME_ZONE) or datetime (naive: in TIME_ZONE)."""
    try:
        return parse_instant(value, flag, dates=True, naive=True)
    except InvalidInput:
        raise InputError(f"{flag}: {value!r} is not an ISO 8601 date or datetime (e.g. 2026-03-01)") from None


def parse_labels(flag: str, values: Iterable[str] | None) -> tuple[str, ...]:
    labels = tuple(values or ())
    for label in labels:
        if len(label) > LABEL_MAX or not LABEL.match(label):
            raise InputError(f"{flag}: {label[:40]!r} is not a label (letters, digits and _ . : / -)")
    return labels


def parse_request(options: dict[str, Any]) -> Request:
    since = parse_when("--since", options["since"])
    until = parse_when("--until", options["until"])
    if since is not None and until is not None and since > until:
        raise InputError("--since must not be after --until")
    limit = None
    if options["limit"] is not None:
        try:
            limit = int(options["limit"])
        except ValueError:
            raise InputError(f"--limit: {options['limit']!r} is not a whole number") from None
        if limit < 0:
            raise InputError("--limit must not be negative")
    min_confidence = None
    if options["min_confidence"] is not None:
        try:
            min_confidence = float(options["min_confidence"])
        except ValueError:
            raise InputError(f"--min-confidence: {options['min_confidence']!r} is not a number") from None
        if not 0 <= min_confidence <= 1:  # NaN fails this too
            raise InputError("--min-confidence must be between 0 and 1")
    if options["format"] == "dpo" and options["patient_key"]:
        raise InputError("--patient-key applies to --format raw only (DPO pairs carry no patient field)")
    if options["format"] == "raw" and options["allow_reuse"]:
        raise InputError("--allow-reuse applies to --format dpo only")
    filters = ExportFilters(
        since=since,
        until=until,
        outcomes=parse_labels("--outcome", options["outcome"]),
        min_confidence=min_confidence,
        trigger_types=parse_labels("--trigger-type", options["trigger_type"]),
        agents=parse_labels("--agent", options["agent"]),
        limit=limit,
    )
    return Request(
        format=options["format"],
        filters=filters,
        out=options["out"],
        patient_key=options["patient_key"],
        allow_reuse=options["allow_reuse"],
        progress=not options["no_progress"],
    )


def audited_flags(request: Request) -> dict[str, Any]:
    """The flags as the audit event records them (the salt is never among them)."""
    filters = request.filters
    out = request.out if len(request.out) <= AUDITED_PATH_MAX else "…" + request.out[-(AUDITED_PATH_MAX - 1) :]
    return {
        "format": request.format,
        "since": filters.since.isoformat() if filters.since else None,
        "until": filters.until.isoformat() if filters.until else None,
        "outcomes": list(filters.outcomes),
        "min_confidence": payload_float(filters.min_confidence),
        "limit": filters.limit,
        "trigger_types": list(filters.trigger_types),
        "agents": list(filters.agents),
        "patient_key": request.patient_key,
        "allow_reuse": request.allow_reuse,
        "out": out,
    }


class _Unended:
    """An OutputWrapper that writes what it is given, without adding a line ending (for tqdm)."""

    def __init__(self, wrapper: OutputWrapper) -> None:
        self.wrapper = wrapper

    def write(self, text: str) -> None:
        self.wrapper.write(text, ending="")

    def flush(self) -> None:
        self.wrapper.flush()


class Command(BaseCommand):
    help = "Stream completed flows (raw) or DPO preference pairs as PHI-safe JSONL (docs/evaluation.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["raw", "dpo"], default="raw", help="raw rows (default) or DPO pairs")
        parser.add_argument("--since", help="flows closed at or after this ISO date/datetime (a date: its midnight)")
        parser.add_argument("--until", help="flows closed before this ISO date/datetime (a date: its midnight)")
        parser.add_argument("--outcome", action="append", help="outcome type to include (repeatable)")
        parser.add_argument("--min-confidence", help="aggregate confidence at least this (0..1)")
        parser.add_argument("--limit", help="at most this many rows")
        parser.add_argument("--out", default=STDOUT, help="file to write (default: - for stdout)")
        parser.add_argument("--trigger-type", action="append", help="trigger type to include (repeatable)")
        parser.add_argument("--agent", action="append", help="flow agent to include (repeatable)")
        parser.add_argument(
            "--patient-key", action="store_true", help="add patient_key: a per-export keyed hash of the patient"
        )
        parser.add_argument(
            "--allow-reuse", action="store_true", help="dpo: a rejected flow may pair with several chosen flows"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            request = parse_request(options)
            with output(request.out) as handle:
                write = handle.write if handle is not None else self._write_stdout
                started = time.monotonic()
                # Read from the replica when one is configured (DATABASE_REPLICA_URL); the audit
                # event below is written on the primary, after the scope.
                with replica_reads():
                    rows, written, counts = self._export(request, write)
                seconds = time.monotonic() - started
                if handle is not None:
                    handle.flush()  # a full disk fails the export here, before it is audited
                # Audited before the file takes its name: no export file exists without its event.
                services.record_export_completed(
                    actor=ACTOR,
                    flags=audited_flags(request),
                    counts={"rows": rows, "bytes": written, "seconds": payload_float(round(seconds, 3)), **counts},
                )
        except InputError as exc:
            raise CommandError(str(exc), returncode=EXIT_USAGE) from None
        self.stderr.write(f"rows={rows} bytes={written} seconds={seconds:.2f}", style_func=str)

    def _write_stdout(self, text: str) -> None:
        self.stdout.write(text, ending="")

    def _export(self, request: Request, write: Callable[[str], object]) -> tuple[int, int, dict[str, int]]:
        """Write the rows; return their number, their bytes and the format's own counts."""
        rows = written = 0
        counts: dict[str, int] = {}
        with read_snapshot():
            stream: Iterator[dict[str, Any]]
            if request.format == "raw":
                salt = secrets.token_bytes(32) if request.patient_key else None
                total = count_raw(request.filters) if request.progress else None
                stream = raw_rows(request.filters, salt=salt)
            else:
                found = dpo_pairs.candidates(request.filters)
                counts = {"chosen_candidates": len(found.chosen), "rejected_candidates": len(found.rejected)}
                total = None
                stream = dpo_pairs.dpo_rows(found, allow_reuse=request.allow_reuse, limit=request.filters.limit)
            unit = "flow" if request.format == "raw" else "pair"
            bar = tqdm(
                total=total, unit=unit, file=_Unended(self.stderr), disable=not request.progress, mininterval=0.5
            )
            with bar:
                for row in stream:
                    line = encode(row)
                    write(line)
                    rows += 1
                    written += len(line)  # ASCII: one byte per character
                    bar.update()
        return rows, written, counts
