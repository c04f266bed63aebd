"""OpenTelemetry spans → flows and steps (``POST /v1/traces``), through the one write path.

``reasoning.otlp`` maps each span to the JSON routes' fields; here the spans are placed:

* A span that opens a flow (a root, or an ``invoke_agent`` span) is a flow whose id is
  derived from its trace and span ids (``span_uuid``), opened and closed at once (exporters
  send a span when it ends): created at the span's start, closed at its end.
* Every other span is a step (its id derived the same way) of the flow that its nearest
  opening ancestor opened; its parent step is its parent span, unless that span opened the
  flow.
* A span whose ancestors have not arrived (exporters send children before their parents,
  in any request) is stored in ``reasoning_pending_span`` (encrypted) in the same
  transaction, before the answer, and becomes a step when the span that places it arrives.
  Spans whose flow never arrives are adopted by the decay job (``adopt_orphans``): they
  become an aborted flow of their trace, so nothing acknowledged is lost.

All of a request's spans of one trace are all or none: a span that fails the JSON routes'
validation rejects its trace's spans in that request (OTLP ``partial_success``). Re-sending
the same spans is a replay: nothing is written twice.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from rest_framework.exceptions import ValidationError

from core.api_views import flat_errors
from core.bulk import fetch
from core.serializers import validated
from reasoning import ingest
from reasoning.models import PendingSpan, ReasoningFlow
from reasoning.otlp import MappedSpan, SpanProblem
from reasoning.serializers import FlowCloseSerializer, FlowCreateSerializer, StepCreateSerializer

# uuid5 namespace of the flow and step ids derived from OTLP (trace id, span id).
SPAN_NAMESPACE = uuid.UUID("6f1d2a8e-8c4b-5e0f-9a57-3c2b1d0e4f61")
ORPHAN_TRIGGER = "otlp_trace"
ORPHAN_ABORT_REASON = "timeout"


@functools.lru_cache(maxsize=4096)
def span_uuid(trace_id: str, span_id: str) -> uuid.UUID:
    """The flow or step id of a span: the same span always gets the same id (replays).
    Cached: placing one request's spans asks for each id several times."""
    return uuid.uuid5(SPAN_NAMESPACE, f"{trace_id}:{span_id}")


@dataclass
class Outcome:
    """What became of a request's spans: stored as steps or flows, parked, or rejected."""

    accepted: int = 0
    parked: int = 0
    rejected: list[SpanProblem] = field(default_factory=list)


def record_spans(spans: Sequence[MappedSpan], *, actor: str, opener_only: bool = False) -> Outcome:
    """Place, validate and write the spans (see the module docstring). ``opener_only``: spans
    may join only flows this caller opened (``ingest.write``)."""
    outcome = Outcome()
    valid: list[MappedSpan] = []
    validated: dict[tuple[str, str], dict[str, Any]] = {}
    bad_traces: dict[str, SpanProblem] = {}
    traces_of_span: dict[str, set[str]] = defaultdict(set)
    for span in spans:
        traces_of_span[span.span_id].add(span.trace_id)
    for span in spans:
        elsewhere = traces_of_span.get(span.parent_span_id, set()) - {span.trace_id} if span.parent_span_id else set()
        if elsewhere and span.trace_id not in traces_of_span[span.parent_span_id]:
            problem = SpanProblem(
                span.trace_id,
                span.span_id,
                f"span {span.span_id}: its parent span {span.parent_span_id} is in trace {min(elsewhere)}, "
                f"not in this span's trace {span.trace_id}",
            )
            outcome.rejected.append(problem)
            bad_traces.setdefault(span.trace_id, problem)
            continue
        checked = _validate(span)
        if isinstance(checked, SpanProblem):
            outcome.rejected.append(checked)
            bad_traces.setdefault(span.trace_id, checked)
        else:
            valid.append(span)
            validated[(span.trace_id, span.span_id)] = checked
    for span in valid:
        if span.trace_id in bad_traces:
            first = bad_traces[span.trace_id]
            outcome.rejected.append(
                SpanProblem(span.trace_id, span.span_id, f"not stored: span {first.span_id} of its trace was rejected")
            )
    valid = [span for span in valid if span.trace_id not in bad_traces]
    if not valid:
        return outcome
    try:
        written = _record(valid, validated, actor, opener_only)
    except IntegrityError:
        # A concurrent request delivered some of the same spans: now they are visible as replays.
        written = _record(valid, validated, actor, opener_only)
    _, plans, accepted, parked, rejected = written
    ingest.count(plans)
    outcome.accepted += accepted
    outcome.parked += parked
    outcome.rejected.extend(rejected)
    return outcome


def _validate(span: MappedSpan) -> SpanProblem | dict[str, Any]:
    """The JSON routes' validation of what the span maps to: the validated fields
    (``{"flow": …, "close": …}`` or ``{"step": …}``), or the problem."""
    checks: list[tuple[type[Any], dict[str, Any], str]] = (
        [(FlowCreateSerializer, span.flow, "flow"), (FlowCloseSerializer, span.close, "close")]
        if span.opens_flow
        else [(StepCreateSerializer, span.step, "step")]
    )
    checked: dict[str, Any] = {}
    for serializer_class, data, part in checks:
        try:
            checked[part] = validated(serializer_class, data)
        except ValidationError as exc:
            errors = flat_errors(exc.detail)
            described = "; ".join(f"{_attribute(name)}: {' '.join(messages)}" for name, messages in errors.items())
            return SpanProblem(span.trace_id, span.span_id, f"span {span.span_id}: {described}")
    return checked


def _attribute(field_name: str) -> str:
    """The attribute a mapped field came from, for messages a client can act on."""
    return f"reasoning.{field_name}" if field_name not in ("trace_id", "span_id", "started_at") else field_name


@dataclass
class _Placed:
    span: MappedSpan
    flow_id: uuid.UUID
    parent_step_id: uuid.UUID | None


@transaction.atomic(durable=True)
def _record(
    spans: Sequence[MappedSpan], validated: Mapping[tuple[str, str], dict[str, Any]], actor: str, opener_only: bool
) -> tuple[list[ingest.Result], list[ingest.Plan], int, int, list[SpanProblem]]:
    traces = sorted({span.trace_id for span in spans})
    pending = {
        (row.trace_id, row.span_id): row for row in fetch(PendingSpan, traces, column="trace_id", for_update=True)
    }
    parked_spans = {key: _from_json(row.mapped) for key, row in pending.items()}
    incoming = {(span.trace_id, span.span_id): span for span in spans}
    universe = {**parked_spans, **incoming}

    # Where the spans' parents already are: flows they opened, steps they became.
    wanted_parents = {(span.trace_id, span.parent_span_id) for span in universe.values() if span.parent_span_id}
    wanted = wanted_parents | set(incoming)
    openers, steps = _stored(wanted)

    placed = _place(universe, openers, steps)

    items, spans_of_item = _items(placed, openers, incoming, validated)
    # What this transaction already found not stored: the flows the request's opening spans
    # open and the steps its spans become (parents that are stored steps are looked up again,
    # with their flows, by the write path).
    absent = {span_uuid(*key) for key in incoming if key not in openers and key not in steps}
    results, plans = ingest.write_in_transaction(items, actor=actor, absent=absent, opener_only=opener_only)

    accepted = 0
    rejected: list[SpanProblem] = []
    released: list[int] = []
    for result, item_spans in zip(results, spans_of_item, strict=True):
        fresh = [(key, span) for key, span in item_spans if key in incoming]
        if result.error is not None:
            message = result.error.detail
            rejected.extend(
                SpanProblem(span.trace_id, span.span_id, f"span {span.span_id}: {message}") for _, span in fresh
            )
            continue
        accepted += len(fresh)
        released.extend(pending[key].id for key, _ in item_spans if key in pending)
    # Replays of spans already stored as steps or flows count as accepted.
    accepted += sum(1 for key in incoming if key in steps or key in openers)
    if released:
        PendingSpan.objects.filter(pk__in=released).delete()
    to_park = [
        span
        for key, span in incoming.items()
        if not span.opens_flow and key not in placed and key not in steps and key not in pending
    ]
    parked_again = sum(1 for key in incoming if key in pending and key not in placed)
    if to_park:
        PendingSpan.objects.bulk_create(
            [
                PendingSpan(
                    trace_id=span.trace_id,
                    span_id=span.span_id,
                    parent_span_id=span.parent_span_id,
                    mapped=_to_json(span),
                    actor=actor,
                )
                for span in to_park
            ]
        )
    return results, plans, accepted, len(to_park) + parked_again, rejected


def _place(
    universe: Mapping[tuple[str, str], MappedSpan],
    openers: Mapping[tuple[str, str], uuid.UUID],
    steps: Mapping[tuple[str, str], tuple[uuid.UUID, uuid.UUID]],
) -> dict[tuple[str, str], _Placed]:
    """Every step span of ``universe`` whose flow is known: walk up to the nearest span that
    is placed (a stored opener or step, an opening span, a span placed already), then place
    the walked chain downwards. Spans that reach an unknown parent stay unplaced."""
    placed: dict[tuple[str, str], _Placed] = {}

    def anchor(key: tuple[str, str]) -> tuple[uuid.UUID, uuid.UUID | None] | None:
        """(flow id, step id or None) for a child of the span ``key``, when that is known."""
        if key in openers:
            return openers[key], None
        if key in steps:
            return steps[key]
        if key in placed:
            return placed[key].flow_id, span_uuid(*key)
        span = universe.get(key)
        if span is not None and span.opens_flow:
            return span_uuid(*key), None
        return None

    for start, first in universe.items():
        if first.opens_flow or start in steps or start in placed:
            continue
        chain = [start]
        seen = {start}
        found = None
        while True:
            span = universe[chain[-1]]
            parent = (span.trace_id, span.parent_span_id)
            found = anchor(parent)
            if found is not None or parent not in universe or parent in seen:
                break
            chain.append(parent)
            seen.add(parent)
        if found is None:
            continue
        for key in reversed(chain):
            placed[key] = _Placed(universe[key], found[0], found[1])
            found = (found[0], span_uuid(*key))
    return placed


def _stored(
    keys: Iterable[tuple[str, str]],
) -> tuple[dict[tuple[str, str], uuid.UUID], dict[tuple[str, str], tuple[uuid.UUID, uuid.UUID]]]:
    """The spans among ``keys`` already stored: as flows they opened (key → flow id) and as
    steps (key → (flow id, step id)), found by their derived ids in one statement."""
    ids = {span_uuid(*key): key for key in keys}
    if not ids:
        return {}, {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, NULL FROM reasoning_flow WHERE id = ANY(%s) "
            "UNION ALL SELECT id, flow_id FROM reasoning_step WHERE id = ANY(%s)",
            [list(ids), list(ids)],
        )
        rows = cursor.fetchall()
    openers = {ids[pk]: pk for pk, flow_id in rows if flow_id is None}
    steps = {ids[pk]: (flow_id, pk) for pk, flow_id in rows if flow_id is not None}
    return openers, steps


def _items(
    placed: Mapping[tuple[str, str], _Placed],
    openers: Mapping[tuple[str, str], uuid.UUID],
    incoming: Mapping[tuple[str, str], MappedSpan],
    validated: Mapping[tuple[str, str], dict[str, Any]],
) -> tuple[list[ingest.Item], list[list[tuple[tuple[str, str], MappedSpan]]]]:
    """One item per flow: the flow's opening span (when it is in the request) and its new steps,
    parents before children, then by start time."""
    by_flow: dict[uuid.UUID, list[tuple[tuple[str, str], _Placed]]] = defaultdict(list)
    for key, where in placed.items():
        by_flow[where.flow_id].append((key, where))
    opening = {span_uuid(*key): (key, span) for key, span in incoming.items() if span.opens_flow and key not in openers}
    items: list[ingest.Item] = []
    spans_of_item: list[list[tuple[tuple[str, str], MappedSpan]]] = []
    for flow_id in sorted(set(by_flow) | set(opening), key=str):
        members = _ordered(by_flow.get(flow_id, []))
        step_bodies = [_step_body(key, where, validated) for key, where in members]
        item_spans = [(key, where.span) for key, where in members]
        if flow_id in opening:
            key, span = opening[flow_id]
            item = ingest.Item(
                flow_id=flow_id,
                create=validated[key]["flow"],
                steps=step_bodies,
                close=validated[key]["close"],
                root_span_id=span.span_id,
                created_at=span.start,
                closed_at=span.end,
                fingerprint=ingest.request_fingerprint(
                    {"flow": span.flow, "close": span.close, "start": span.start, "end": span.end}
                ),
                step_where="",
            )
            item_spans.insert(0, (key, span))
        else:
            item = ingest.Item(flow_id=flow_id, steps=step_bodies, step_where="")
        items.append(item)
        spans_of_item.append(item_spans)
    return items, spans_of_item


def _step_body(
    key: tuple[str, str], where: _Placed, validated: Mapping[tuple[str, str], dict[str, Any]]
) -> dict[str, Any]:
    """The validated step fields of a placed span (a parked one is validated again here)."""
    checked = validated.get(key)
    body = dict(checked["step"]) if checked is not None else _validated(StepCreateSerializer, where.span.step)
    body["id"] = span_uuid(*key)
    body["parent_step_id"] = where.parent_step_id
    body["started_at"] = where.span.start
    return body


def _validated(serializer_class: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    return validated(serializer_class, data)  # parked spans were validated on arrival: this passes


def _ordered(members: list[tuple[tuple[str, str], _Placed]]) -> list[tuple[tuple[str, str], _Placed]]:
    """Parents before children (the write path checks parents are earlier), else by start time."""
    members = sorted(members, key=lambda member: (member[1].span.start, member[0]))
    ids = {span_uuid(*key) for key, _ in members}
    done: set[uuid.UUID] = set()
    ordered: list[tuple[tuple[str, str], _Placed]] = []
    waiting = members
    while waiting:
        progress = []
        rest = []
        for member in waiting:
            parent = member[1].parent_step_id
            if parent is None or parent not in ids or parent in done:
                progress.append(member)
                done.add(span_uuid(*member[0]))
            else:
                rest.append(member)
        if not progress:  # a cycle cannot happen (parents are found by walking up); be safe
            ordered.extend(rest)
            break
        ordered.extend(progress)
        waiting = rest
    return ordered


# --- Pending spans, stored ------------------------------------------------------------------


def _to_json(span: MappedSpan) -> str:
    return json.dumps(
        {
            "trace_id": span.trace_id,
            "span_id": span.span_id,
            "parent_span_id": span.parent_span_id,
            "name": span.name,
            "start": span.start.isoformat(),
            "end": span.end.isoformat(),
            "opens_flow": span.opens_flow,
            "flow": span.flow,
            "close": span.close,
            "step": span.step,
        }
    )


def _from_json(text: str) -> MappedSpan:
    data = json.loads(text)
    return MappedSpan(
        trace_id=data["trace_id"],
        span_id=data["span_id"],
        parent_span_id=data["parent_span_id"],
        name=data["name"],
        start=datetime.fromisoformat(data["start"]),
        end=datetime.fromisoformat(data["end"]),
        opens_flow=data["opens_flow"],
        flow=data["flow"],
        close=data["close"],
        step=data["step"],
    )


# --- The decay job: spans whose flow never came -------------------------------------------------


def adopt_orphans(*, received_before: datetime, actor: str, limit: int = 1000) -> int:
    """Spans pending since before ``received_before`` become an aborted flow per trace
    (``trigger_type`` otlp_trace, ``abort_reason`` timeout), with their parent links where
    the parents are among them. Returns the number of spans adopted."""
    with transaction.atomic(durable=True):
        rows = list(
            PendingSpan.objects.filter(received_at__lt=received_before)
            .order_by("received_at", "id")
            .select_for_update(skip_locked=True)[:limit]
        )
        if not rows:
            return 0
        traces = sorted({row.trace_id for row in rows})
        rows = list(PendingSpan.objects.filter(trace_id__in=traces).order_by("id").select_for_update())
        by_trace: dict[str, list[PendingSpan]] = defaultdict(list)
        for row in rows:
            by_trace[row.trace_id].append(row)
        items = []
        for trace_id, trace_rows in by_trace.items():
            spans = {row.span_id: _from_json(row.mapped) for row in trace_rows}
            flow_id = span_uuid(trace_id, f"orphans:{trace_rows[0].pk}")
            members = [
                (
                    (trace_id, span_id),
                    _Placed(
                        span,
                        flow_id,
                        span_uuid(trace_id, span.parent_span_id) if span.parent_span_id in spans else None,
                    ),
                )
                for span_id, span in spans.items()
            ]
            earliest = min(span.start for span in spans.values())
            items.append(
                ingest.Item(
                    flow_id=flow_id,
                    create={"trigger_type": ORPHAN_TRIGGER, "trigger_ref": f"trace/{trace_id}", "trace_id": trace_id},
                    steps=[_step_body(key, where, {}) for key, where in _ordered(members)],
                    close={"flow_state": ReasoningFlow.State.ABORTED, "abort_reason": ORPHAN_ABORT_REASON},
                    created_at=earliest,
                    step_where="",
                )
            )
        results, plans = ingest.write_in_transaction(items, actor=actor)
        adopted = [
            row.pk
            for result, (_, trace_rows) in zip(results, by_trace.items(), strict=True)
            if result.error is None
            for row in trace_rows
        ]
        PendingSpan.objects.filter(pk__in=adopted).delete()
    ingest.count(plans)
    return len(adopted)
