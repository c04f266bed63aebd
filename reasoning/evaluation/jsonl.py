"""Reading JSON Lines: one object per line, errors naming the file and the line."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from reasoning.evaluation import InputError

STDIN = "-"


def source_name(path: str | Path | None) -> str:
    """How messages name the input: the path as given, or ``<stdin>``."""
    return "<stdin>" if path is None or path == STDIN else str(path)


def read_objects(path: str | Path | None, *, stdin: IO[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line of ``path`` (stdin when None or ``-``).

    ``stdin`` replaces ``sys.stdin`` (a command's ``stdin`` option, for tests). Raises
    ``InputError`` for a missing file, bytes that are not UTF-8, a line that is not JSON, or a
    line that is not a JSON object.
    """
    name = source_name(path)
    if path is None or path == STDIN:
        yield from _objects(stdin or sys.stdin, name)
        return
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115  # closed below, after the generator is drained
    except OSError as exc:
        raise InputError(f"{name}: cannot read: {exc.strerror or exc}") from None
    with handle:
        yield from _objects(handle, name)


def _objects(handle: IO[str], name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    number = 0
    try:
        for number, line in enumerate(handle, start=1):  # read by the except clause
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{name}:{number}: not JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(value, dict):
                raise InputError(f"{name}:{number}: expected a JSON object, got {type(value).__name__}")
            yield number, value
    except UnicodeDecodeError:
        raise InputError(f"{name}:{number + 1}: not UTF-8 text") from None
