"""audit.canonical.canonical_bytes: the documented form (json.dumps with sorted keys, no whitespace,
non-ASCII kept), whichever encoder writes it, and bytes the verifier's rebuild (load_exact,
dump_exact) gives back unchanged."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.canonical import canonical_bytes
from audit.services import AuditPayloadError, _check_payload
from audit.verify import dump_exact, load_exact


def documented(payload: Any, created_at: datetime | None = None) -> bytes:
    """The form docs/audit-log.md specifies, spelled out."""
    document = {
        "action": "reasoning.flow.completed",
        "actor": "token:agent",
        "created_at": "" if created_at is None else created_at.astimezone(UTC).isoformat(),
        "payload": payload,
        "target_id": "flow-9",
        "target_type": "reasoning.reasoningflow",
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def canonical(payload: Any, created_at: datetime | None = None) -> bytes:
    return canonical_bytes(
        action="reasoning.flow.completed",
        actor="token:agent",
        target_type="reasoning.reasoningflow",
        target_id="flow-9",
        payload=payload,
        created_at=created_at,
    )


# Text of every plane, controls and the characters JSON escapes included; no NUL and no lone
# surrogate, which record() refuses (jsonb cannot store them).
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
# The floats record() takes: those Python writes without an exponent, and no negative zero.
FLOATS = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda value: "e" not in repr(value) and not (value == 0 and math.copysign(1.0, value) < 0)
)
LEAVES = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | TEXT | FLOATS
VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3), max_leaves=8
)
PAYLOADS = st.dictionaries(TEXT, VALUES, max_size=5)


@settings(max_examples=600, deadline=None)
@given(PAYLOADS)
def test_every_payload_record_takes_is_written_in_the_documented_form(payload: dict[str, Any]) -> None:
    try:
        _check_payload(dict(payload))
    except AuditPayloadError:
        return  # refused before any bytes are written (a long string, a deep nesting)
    written = canonical(payload)

    assert written == documented(payload)
    assert dump_exact(load_exact(written)).encode() == written
    assert b"\n" not in written  # record() sends events a line each


@pytest.mark.parametrize(
    "payload",
    [
        {"text": '\x01\x1f\x7f\b\f\n\r\t"\\/', "\u2028": "\u2029", "é": "\U0010ffff"},
        {"z": 1, "a": {"d": [True, None], "c": -(2**64)}, "é": 2, "\uffff": 3, "\U0001f600": 4},
        {"ratio": 0.25, "big": 1e15, "small": 0.0001},  # floats: json.dumps writes them
        {"pair": (1, "two")},
        {},
    ],
    ids=["escapes", "order-and-integers", "floats", "tuple", "empty"],
)
def test_awkward_payloads_are_written_in_the_documented_form(payload: dict[str, Any]) -> None:
    stamped = datetime(2026, 12, 5, 5, 0, 0, 123456, tzinfo=UTC)
    assert canonical(payload) == documented(payload)
    assert canonical(payload, stamped) == documented(payload, stamped)


def test_what_json_dumps_refuses_is_refused() -> None:
    with pytest.raises(TypeError):
        canonical({"when": datetime(2026, 12, 5, tzinfo=UTC)})
    with pytest.raises(ValueError, match="Out of range float"):
        canonical({"x": math.nan})
    with pytest.raises(UnicodeEncodeError):
        canonical({"x": "\ud800"})
