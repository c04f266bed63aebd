"""The golden-signature corpus: per trigger type, the canonical step kinds and allowed outcomes.

The corpus is JSON (``reasoning/fixtures/expected-signatures.json`` by default)::

    {"version": 1,
     "signatures": {
       "<trigger_type>": {"agent": "<agent>",
                          "step_kinds": ["<kind>", ...],
                          "allowed_outcomes": ["<outcome_type>" or "aborted", ...],
                          "description": "<optional text>"}}}

``allowed_outcomes`` lists outcome types of completed flows; ``"aborted"`` allows an aborted
flow. The top level may also carry a ``"description"`` string. Trigger types, agents, kinds
and outcomes are labels (``core.labels``). ``load_corpus`` checks this shape and raises
``InputError`` naming the file and the offending key; no other key is allowed, so a typo
(``step_kind``) fails instead of being ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.labels import LABEL_PATTERN
from reasoning.evaluation import FIXTURES, InputError

DEFAULT_CORPUS = FIXTURES / "expected-signatures.json"
CORPUS_VERSION = 1
ABORTED = "aborted"  # the outcome of an aborted flow, as allowed_outcomes names it
LABEL = re.compile(LABEL_PATTERN)


@dataclass(frozen=True)
class Signature:
    trigger_type: str
    agent: str
    step_kinds: tuple[str, ...]
    allowed_outcomes: frozenset[str]
    description: str = ""


@dataclass(frozen=True)
class Corpus:
    path: Path
    version: int
    signatures: Mapping[str, Signature]  # by trigger type

    def get(self, trigger_type: str) -> Signature | None:
        return self.signatures.get(trigger_type)


def load_corpus(path: str | Path | None = None) -> Corpus:
    where = Path(path) if path is not None else DEFAULT_CORPUS
    try:
        data = json.loads(where.read_text(encoding="utf-8"), object_pairs_hook=lambda pairs: _unique(where, pairs))
    except OSError as exc:
        raise InputError(f"{where}: cannot read the corpus: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{where}: the corpus is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{where}: the corpus must be a JSON object")
    unknown = set(data) - {"version", "signatures", "description"}
    if unknown:
        raise InputError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    if "version" not in data:
        raise InputError(f"{where}: version: missing")
    if data.get("version") != CORPUS_VERSION:
        raise InputError(f"{where}: version: expected {CORPUS_VERSION}, got {data.get('version')!r}")
    raw = data.get("signatures")
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"{where}: signatures: expected a non-empty object of trigger types")
    signatures = {trigger: _signature(where, trigger, entry) for trigger, entry in raw.items()}
    return Corpus(path=where, version=CORPUS_VERSION, signatures=signatures)


def _unique(where: Path, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys; a trigger type listed twice would be half-read.
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise InputError(f"{where}: duplicate key {key!r}")
        seen[key] = value
    return seen


def _signature(where: Path, trigger: str, entry: Any) -> Signature:
    at = f"{where}: signatures.{trigger}"
    if not LABEL.fullmatch(trigger):
        raise InputError(f"{at}: the trigger type is not a label (letters, digits and _.:/- only)")
    if not isinstance(entry, dict):
        raise InputError(f"{at}: expected an object")
    unknown = set(entry) - {"agent", "step_kinds", "allowed_outcomes", "description"}
    if unknown:
        raise InputError(f"{at}: unknown key {sorted(unknown)[0]!r}")
    missing = [key for key in ("agent", "step_kinds", "allowed_outcomes") if key not in entry]
    if missing:
        raise InputError(f"{at}.{missing[0]}: missing")
    agent = entry["agent"]
    if not isinstance(agent, str) or not LABEL.fullmatch(agent):
        raise InputError(f"{at}.agent: expected an agent label")
    kinds = _labels(f"{at}.step_kinds", entry["step_kinds"], "step kinds")
    outcomes = _labels(f"{at}.allowed_outcomes", entry["allowed_outcomes"], "outcome types")
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise InputError(f"{at}.description: expected a string")
    return Signature(trigger, agent, tuple(kinds), frozenset(outcomes), description)


def _labels(at: str, value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{at}: expected a non-empty list of {what}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not LABEL.fullmatch(item):
            raise InputError(f"{at}[{index}]: not a label (letters, digits and _.:/- only)")
    return value
