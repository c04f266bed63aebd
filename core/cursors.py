"""Keyset-pagination cursors: the last row's sort key, opaque to clients.

A cursor is the JSON list of the key's values, URL-safe base64 without padding. Decoding
parses each value with the caller's parser and refuses anything else with a 400 naming
``cursor``, so a hand-made or truncated cursor never reaches a query.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.errors import InvalidInput

NOT_OURS = "is not a cursor this route issued"


def encode_cursor(*values: Any) -> str:
    raw = json.dumps(list(values), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *parsers: Callable[[Any], Any]) -> list[Any]:
    """The cursor's values, each through its parser (which raises ValueError or TypeError on a
    value it refuses); one parser per value."""
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(values, list) or len(values) != len(parsers):
            raise ValueError(cursor)
        return [parse(value) for parse, value in zip(parsers, values, strict=True)]
    except (binascii.Error, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise InvalidInput(NOT_OURS, field="cursor") from None


def moment(value: Any) -> datetime:
    """An ISO 8601 time with its offset (as ``datetime.isoformat()`` of an aware time writes it)."""
    at = datetime.fromisoformat(value)
    if at.tzinfo is None:
        raise ValueError(value)
    return at


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value
