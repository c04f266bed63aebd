"""Preference pairs for DPO (``manage.py reasoning_export --format dpo``).

One row per pair, in the shape Hugging Face TRL's ``DPOTrainer`` reads (``prompt``,
``chosen``, ``rejected``: strings), plus ``metadata`` (the two flow ids and the trigger
type). The rule, as docs/evaluation.md states it:

1. Candidates are flows with at least one step, closed in the export's window, of the
   selected trigger types and agents. What the pathway library knows of a flow comes from
   the registered provider (``reasoning.radar.library_facts_of``): ``reasoning`` never
   imports ``pathways``.
   * chosen: a completed flow whose pathway was reused (``hit_count >= 1``) and is not
     demoted, and which passes ``--outcome`` and ``--min-confidence``;
   * rejected: an aborted flow, or a completed flow whose pathway was demoted.
2. The chosen flows are taken in order: most recent ``closed_at`` first, then by id. Each
   is paired with the unused rejected flow of the same trigger type whose ``trigger_ref``
   is closest: the longest common prefix with the chosen flow's ref, then the most recent
   ``closed_at``, then the smallest id. A rejected flow is then used (``allow_reuse``: it
   stays available). A chosen flow with no rejected flow left makes no pair.
3. ``--limit`` keeps the first pairs in that order (the rule is greedy, so it does not
   change which pairs they are).

Texts are PHI-safe like the raw row: ``prompt`` is the chosen flow's trigger summary
when its summaries passed the guard (else ``"<trigger_type> <trigger_ref>"``);
``chosen`` and ``rejected`` are the flows' step summaries in step order, one per line,
a withheld summary written as ``[<kind>: summary hidden]``.

The candidates (ids, refs and times, never steps) are held in memory to be paired; the
steps are then read for a chunk of pairs at a time.
"""

from __future__ import annotations

import bisect
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import Case, CharField, F, Q, Value, When

from reasoning.evaluation.export import CHUNK_SIZE, STEP_ORDER, ExportFilters, chunks, facts_of
from reasoning.models import ReasoningFlow, ReasoningStep

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Candidate:
    flow_id: uuid.UUID
    trigger_type: str
    trigger_ref: str
    closed_at: datetime
    prompt: str = ""

    @property
    def recency_key(self) -> tuple[int, int]:
        """Sorts the most recent close first, then the smallest id (as Postgres orders uuids)."""
        return (-((self.closed_at - _EPOCH) // timedelta(microseconds=1)), self.flow_id.int)


@dataclass
class Candidates:
    chosen: list[Candidate] = field(default_factory=list)
    rejected: list[Candidate] = field(default_factory=list)


def _candidate_values(flows: models.QuerySet[ReasoningFlow]) -> models.QuerySet[ReasoningFlow, Mapping[str, Any]]:
    # The prompt: the trigger summary only for a flow whose summaries passed the guard.
    safe_prompt = Case(
        When(Q(patient_safe_summary=True) & ~Q(trigger_summary=""), then=F("trigger_summary")),
        default=None,
        output_field=CharField(),
    )
    values: models.QuerySet[ReasoningFlow, Mapping[str, Any]] = flows.filter(
        step_count__gt=0, closed_at__isnull=False
    ).values("id", "trigger_type", "trigger_ref", "closed_at", "outcome_type", "outcome_confidence", prompt=safe_prompt)
    return values


def _candidate(flow: Mapping[str, Any]) -> Candidate:
    prompt = flow["prompt"] or f"{flow['trigger_type']} {flow['trigger_ref']}".strip()
    return Candidate(flow["id"], flow["trigger_type"], flow["trigger_ref"], flow["closed_at"], prompt)


def candidates(filters: ExportFilters, *, chunk_size: int = CHUNK_SIZE) -> Candidates:
    """The chosen and rejected flows ``filters`` select (step 1 of the rule)."""
    found = Candidates()
    flows = filters.window(ReasoningFlow.objects.all())
    completed = _candidate_values(flows.completed()).order_by("closed_at", "id")
    for chunk in chunks(completed.iterator(chunk_size=chunk_size), chunk_size):
        facts = facts_of(chunk)
        for flow in chunk:
            fact = facts.get(flow["id"])
            if fact is None:
                continue
            if fact.demoted:
                found.rejected.append(_candidate(flow))
            elif fact.hit_count >= 1 and filters.accepts_outcome(flow["outcome_type"], flow["outcome_confidence"]):
                found.chosen.append(_candidate(flow))
    aborted = _candidate_values(flows.aborted()).order_by("closed_at", "id")
    found.rejected.extend(_candidate(flow) for flow in aborted.iterator(chunk_size=chunk_size))
    return found


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _find(parent: list[int], i: int) -> int:
    """Union-find root with path compression: the nearest unused slot from ``i``."""
    root = i
    while parent[root] != root:
        root = parent[root]
    while parent[i] != root:
        parent[i], i = root, parent[i]
    return root


_NONE = (float("inf"), 0, -1)


class RejectedPool:
    """The rejected flows of one trigger type, sorted by ``trigger_ref``, for ``take``.

    In ref order, the refs sharing at least ``k`` leading characters with a ref form one
    contiguous run, and the unused ref with the longest common prefix is the nearest unused
    one on either side of where the ref would sort. A segment tree over the run gives the
    most recent unused flow in it; two union-find arrays skip used slots. Each take costs
    O(log n) (amortised), so pairing 100,000 candidates stays quick.
    """

    def __init__(self, flows: Sequence[Candidate]) -> None:
        self.flows = sorted(flows, key=lambda flow: (flow.trigger_ref, flow.recency_key))
        self.refs = [flow.trigger_ref for flow in self.flows]
        n = len(self.flows)
        self.size = 1
        while self.size < n:
            self.size *= 2
        self.tree: list[tuple[float, int, int]] = [_NONE] * (2 * self.size)
        for i, flow in enumerate(self.flows):
            self.tree[self.size + i] = (*flow.recency_key, i)
        for node in range(self.size - 1, 0, -1):
            self.tree[node] = min(self.tree[2 * node], self.tree[2 * node + 1])
        self.next = list(range(n + 1))  # next[i]: i if slot i is unused; n is the end
        self.prev = list(range(n + 1))  # prev[i + 1]: i + 1 if slot i is unused; 0 is the start

    def _best(self, lo: int, hi: int) -> tuple[float, int, int]:
        best = _NONE
        lo += self.size
        hi += self.size
        while lo < hi:
            if lo & 1:
                best = min(best, self.tree[lo])
                lo += 1
            if hi & 1:
                hi -= 1
                best = min(best, self.tree[hi])
            lo //= 2
            hi //= 2
        return best

    def _use(self, i: int) -> None:
        self.next[i] = i + 1
        self.prev[i + 1] = i
        node = self.size + i
        self.tree[node] = _NONE
        node //= 2
        while node:
            self.tree[node] = min(self.tree[2 * node], self.tree[2 * node + 1])
            node //= 2

    def take(self, ref: str, *, reuse: bool = False) -> Candidate | None:
        """The unused flow closest to ``ref`` (longest common prefix, most recent, smallest
        id), marked used unless ``reuse``; None when none is left."""
        n = len(self.flows)
        at = bisect.bisect_left(self.refs, ref)
        after = _find(self.next, at)
        before = _find(self.prev, at) - 1
        neighbours = [i for i in (before, after) if 0 <= i < n]
        if not neighbours:
            return None
        shared = max(_common_prefix(ref, self.refs[i]) for i in neighbours)
        prefix = ref[:shared]
        lo = bisect.bisect_left(self.refs, prefix)
        hi = bisect.bisect_right(self.refs, prefix, key=lambda other: other[:shared])
        *_, best = self._best(lo, hi)
        if not reuse:
            self._use(best)
        return self.flows[best]


def pairs(
    found: Candidates, *, allow_reuse: bool = False, limit: int | None = None
) -> Iterator[tuple[Candidate, Candidate]]:
    """(chosen, rejected) pairs by the rule (steps 2 and 3)."""
    by_type: dict[str, list[Candidate]] = defaultdict(list)
    for flow in found.rejected:
        by_type[flow.trigger_type].append(flow)
    pools = {kind: RejectedPool(flows) for kind, flows in by_type.items()}
    made = 0
    for chosen in sorted(found.chosen, key=lambda flow: flow.recency_key):
        if limit is not None and made >= limit:
            return
        pool = pools.get(chosen.trigger_type)
        rejected = pool.take(chosen.trigger_ref, reuse=allow_reuse) if pool else None
        if rejected is not None:
            made += 1
            yield chosen, rejected


def texts_of(flow_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Each flow's step summaries in step order, one per line (withheld ones as their kind): one query."""
    safe_summary = Case(
        When(flow__patient_safe_summary=True, then=F("summary_text")),
        default=Value(None),
        output_field=CharField(),
    )
    lines: dict[uuid.UUID, list[str]] = {flow_id: [] for flow_id in flow_ids}
    rows = (
        ReasoningStep.objects.filter(flow_id__in=flow_ids)
        .order_by("flow_id", *STEP_ORDER)
        .values_list("flow_id", "kind", safe_summary)
    )
    for flow_id, kind, summary in rows:
        lines[flow_id].append(summary if summary is not None else f"[{kind}: summary hidden]")
    return {flow_id: "\n".join(text) for flow_id, text in lines.items()}


def dpo_row(chosen: Candidate, rejected: Candidate, texts: dict[uuid.UUID, str]) -> dict[str, Any]:
    return {
        "prompt": chosen.prompt,
        "chosen": texts[chosen.flow_id],
        "rejected": texts[rejected.flow_id],
        "metadata": {
            "chosen_flow_id": str(chosen.flow_id),
            "rejected_flow_id": str(rejected.flow_id),
            "trigger_type": chosen.trigger_type,
        },
    }


def dpo_rows(
    found: Candidates, *, allow_reuse: bool = False, limit: int | None = None, chunk_size: int = CHUNK_SIZE
) -> Iterator[dict[str, Any]]:
    """The rows of the pairs of ``found``, reading the steps of a chunk of pairs at a time."""
    for chunk in chunks(pairs(found, allow_reuse=allow_reuse, limit=limit), chunk_size):
        texts = texts_of(sorted({flow.flow_id for pair in chunk for flow in pair}))
        for chosen, rejected in chunk:
            yield dpo_row(chosen, rejected, texts)
