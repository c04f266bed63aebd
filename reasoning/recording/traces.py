"""OpenTelemetry spans → flows and steps (``POST /v1/traces``), through the one write path.

``reasoning.recording.otlp`` maps each span to the JSON routes' fields; here the spans are placed:

* A root span (no parent) opens a flow whose id is derived from its trace and span ids
  (``span_uuid``), opened and closed at once (exporters send a span when it ends): created at
  the span's start, closed at its end. A root span that is itself a call (a model call, a tool,
  a retrieval, an embedding, a rerank) is also the flow's first step (``call_step_uuid``), so
  a bare model call is a flow of one step, never a flow without steps.
* Every other span is a step (its id derived the same way) of the flow of its nearest
  flow-opening ancestor; its parent step is its parent span, unless that span opened the flow.
* An agent span opens a flow of its own when an agent encloses it (the flow it would join was
  opened by an agent span, or an agent step lies between them): a nested agent, whose flow
  records its caller (``parent_span_id``) so the turn view links the two. Only an agent span
  that names its agent by an attribute encloses others (``agent_scope``): one named by its
  span name alone ("Agent workflow", the trace span of the OpenAI Agents SDK) is a wrapper.
  The outermost agent under a root that is no such agent (a workflow or a request span
  wrapping the run) is a step of kind ``agent`` of the root's flow instead, so a wrapper never
  leaves an extra flow.
* Agents: a step's agent is the one its span names; else the nearest enclosing agent's; else
  its flow's; else the resource's (``service.name``). A flow whose opening span names no agent
  takes the first agent named by one of its steps, else the resource's.
* A span whose ancestors have not arrived (exporters send children before their parents,
  in any request) is stored in ``reasoning_pending_span`` (encrypted) in the same
  transaction, before the answer, and is placed when the span that places it arrives.
  Spans whose flow never arrives are adopted by the decay job (``adopt_orphans``): they
  become an aborted flow of their trace, so nothing acknowledged is lost.

Whether an agent span nests is decided from what has arrived when it is placed: the spans of
the request and the pending ones, and for a stored parent, whether that parent's flow was
opened by an agent (``trigger_type`` ``invoke_agent`` or a nested flow) or the parent is an
agent step.

All of a request's spans of one trace are all or none: a span that fails the JSON routes'
validation rejects its trace's spans in that request (OTLP ``partial_success``). Re-sending
the same spans is a replay: nothing is written twice.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from rest_framework.exceptions import ValidationError

from core.api_views import flat_errors
from core.bulk import Write, fetch, one_statement, opaque_array, text_array, uuid_array
from core.compiled_serializers import one_time_zone
from core.serializers import validated
from reasoning.models import PendingSpan, ReasoningFlow
from reasoning.recording import ingest
from reasoning.recording.conventions import AGENT
from reasoning.recording.otlp import AGENT_TRIGGER, DEFAULT_KIND, MappedSpan, SpanProblem
from reasoning.recording.serializers import FlowCloseSerializer, FlowCreateSerializer, StepCreateSerializer

# uuid5 namespace of the flow and step ids derived from OTLP (trace id, span id).
SPAN_NAMESPACE = uuid.UUID("6f1d2a8e-8c4b-5e0f-9a57-3c2b1d0e4f61")
ORPHAN_TRIGGER = "otlp_trace"
ORPHAN_ABORT_REASON = "timeout"
# Spans of one trace waiting for their parent (PendingSpan) at most: every request of the trace
# reads them all (docs/ingest.md, "Limits").
MAX_PENDING_PER_TRACE = 1000

Key = tuple[str, str]  # (trace id, span id), hex


_NAMESPACE_BYTES = SPAN_NAMESPACE.bytes
# RFC 9562's version (5) and variant (10) bits, in a UUID's 128-bit value.
_UUID5_KEEP = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
_UUID5_SET = (5 << 76) | (0x2 << 62)


@functools.lru_cache(maxsize=4096)
def span_uuid(trace_id: str, span_id: str) -> uuid.UUID:
    """The flow or step id of a span: the same span always gets the same id (replays).
    Cached: placing one request's spans asks for each id several times.

    ``uuid.uuid5(SPAN_NAMESPACE, f"{trace_id}:{span_id}")``, built as ``UUID.__init__`` builds it
    but without its checks of arguments it is not given: 0.8 µs against 2.1, twice a span."""
    digest = hashlib.sha1(_NAMESPACE_BYTES + f"{trace_id}:{span_id}".encode(), usedforsecurity=False).digest()
    made = object.__new__(uuid.UUID)
    object.__setattr__(made, "int", int.from_bytes(digest[:16]) & _UUID5_KEEP | _UUID5_SET)
    object.__setattr__(made, "is_safe", uuid.SafeUUID.unknown)
    return made


def call_step_uuid(trace_id: str, span_id: str) -> uuid.UUID:
    """The id of the step a root call span is in its own flow."""
    return span_uuid(trace_id, f"{span_id}:call")


@dataclass
class Outcome:
    """What became of a request's spans: stored as steps or flows, parked, or rejected."""

    accepted: int = 0
    parked: int = 0
    rejected: list[SpanProblem] = field(default_factory=list)


def record_spans(spans: Sequence[MappedSpan], *, actor: str, opener_only: bool = False) -> Outcome:
    """Place, validate and write the spans (see the module docstring). ``opener_only``: spans
    may join only flows this caller opened (``ingest.write``)."""
    with one_time_zone():  # the request's date-times in one time zone, read once
        return _record_spans(spans, actor, opener_only)


def _record_spans(spans: Sequence[MappedSpan], actor: str, opener_only: bool) -> Outcome:
    outcome = Outcome()
    valid: list[MappedSpan] = []
    checked_spans: dict[Key, dict[str, Any]] = {}
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
            checked_spans[(span.trace_id, span.span_id)] = checked
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
        written = _record(valid, checked_spans, actor, opener_only)
    except IntegrityError:
        # A concurrent request delivered some of the same spans: now they are visible as replays.
        written = _record(valid, checked_spans, actor, opener_only)
    _, plans, accepted, parked, rejected = written
    ingest.count(plans)
    outcome.accepted += accepted
    outcome.parked += parked
    outcome.rejected.extend(rejected)
    return outcome


def _validate(span: MappedSpan) -> SpanProblem | dict[str, Any]:
    """The JSON routes' validation of what the span maps to: the validated fields
    (``flow`` and ``close`` for a span that may open a flow, ``step`` for one that may be a step),
    or the problem."""
    checks: list[tuple[type[Any], dict[str, Any], str]] = []
    if span.flow:
        checks += [(FlowCreateSerializer, _public(span.flow), "flow"), (FlowCloseSerializer, span.close, "close")]
    if span.step:
        checks.append((StepCreateSerializer, span.step, "step"))
    checked: dict[str, Any] = {}
    for serializer_class, data, part in checks:
        try:
            checked[part] = validated(serializer_class, data)
        except ValidationError as exc:
            errors = flat_errors(exc.detail)
            described = "; ".join(f"{_attribute(name)}: {' '.join(messages)}" for name, messages in errors.items())
            return SpanProblem(span.trace_id, span.span_id, f"span {span.span_id}: {described}")
    return checked


def _public(flow: Mapping[str, Any]) -> dict[str, Any]:
    """The flow fields the open route takes: the end user's id is the OTLP path's own (the write
    path keeps only its pseudonym, ``user_ref``)."""
    return {name: value for name, value in flow.items() if name != "user_id"}


def _attribute(field_name: str) -> str:
    """The attribute a mapped field came from, for messages a client can act on."""
    return f"reasoning.{field_name}" if field_name not in ("trace_id", "span_id", "started_at") else field_name


@dataclass(init=False)
class _Anchor:
    """Where a span's children go: their flow, their parent step (None: the flow's root), whether
    an agent encloses them, and that agent (None when no agent is known there)."""

    flow_id: uuid.UUID
    step_id: uuid.UUID | None
    in_agent: bool
    agent: str | None
    owner: str  # the flow's opened_by, for a stored flow

    # An explicit __init__ (the dataclass makes __eq__ and __repr__): compiled (core.compiled), it is a
    # native call, where a generated one runs as Python (a frozen one through object.__setattr__).
    def __init__(
        self, flow_id: uuid.UUID, step_id: uuid.UUID | None, in_agent: bool, agent: str | None, owner: str = ""
    ) -> None:
        self.flow_id = flow_id
        self.step_id = step_id
        self.in_agent = in_agent
        self.agent = agent
        self.owner = owner


@dataclass
class _Placed:
    span: MappedSpan
    flow_id: uuid.UUID
    parent_step_id: uuid.UUID | None
    # The step's agent when known from the span or its enclosing agent; else its flow's.
    agent: str | None = None
    # An agent span that opens a nested flow (flow_id is then its own flow).
    as_flow: bool = False


@dataclass
class _Stored:
    """The spans among those asked for that are stored already."""

    flows: dict[Key, _Anchor] = field(default_factory=dict)  # spans that opened a flow
    steps: dict[Key, _Anchor] = field(default_factory=dict)  # spans that became a step
    calls: dict[Key, _Anchor] = field(default_factory=dict)  # root call spans' own steps
    # Whether a span of the traces asked about (``_stored``'s ``pending_of``) is pending.
    pending_seen: bool = False

    def __contains__(self, key: object) -> bool:
        return key in self.flows or key in self.steps

    def update(self, other: _Stored) -> None:
        self.flows.update(other.flows)
        self.steps.update(other.steps)
        self.calls.update(other.calls)


_Written = tuple[list[ingest.Result], list[ingest.Plan], int, int, list[SpanProblem]]


def _record(
    spans: Sequence[MappedSpan], checked: Mapping[Key, dict[str, Any]], actor: str, opener_only: bool
) -> _Written:
    """Place the spans and write them, looking them up first unless they are a trace's first
    request.

    A request that holds whole traces (each with its root and more) is placed as if none of its
    spans were stored and written as one statement with no transaction around it
    (``core.bulk.one_statement``: no BEGIN and COMMIT round trips), without a lookup: the primary
    keys of the flows and the step id registry refuse a span stored already, and the statement's
    last part (``reasoning_no_pending_span``) refuses it when a span of its traces is pending.
    Either way the statement fails whole and the request goes on as below.

    Otherwise the lookup comes first, outside any transaction: a statement sees what is committed
    at its start, in a transaction at READ COMMITTED or not (should a concurrent request store
    some of the same spans after it, the write fails and ``record_spans`` tries again). When it
    finds none of the spans or their parents stored and nothing pending in their traces and every
    span finds its place in the request, the rows and their audit events go in one statement as
    above. Otherwise the traces' pending spans are locked and everything is written in one
    transaction."""
    traces = sorted({span.trace_id for span in spans})
    incoming = {(span.trace_id, span.span_id): span for span in spans}
    if not connection.in_atomic_block and _whole_traces(spans):
        nothing = _Stored()
        placed = _place(incoming, nothing)
        if not _unplaced(incoming, placed, nothing, {}):
            check = Write("SELECT reasoning_no_pending_span(%s::text[])", (text_array(traces),))
            try:
                with one_statement():
                    return _write_placed(placed, nothing, incoming, incoming, {}, checked, actor, opener_only, check)
            except IntegrityError:
                pass  # spans stored already (a replay) or spans of these traces pending: look them up
    # Which spans and parents are stored already (flows they opened, steps they became), and
    # whether a span of these traces is pending: one statement when none is, the usual case.
    asked = set(incoming) | {(span.trace_id, span.parent_span_id) for span in spans if span.parent_span_id}
    stored = _stored(asked, pending_of=traces)
    if not (connection.in_atomic_block or stored.flows or stored.steps or stored.calls or stored.pending_seen):
        placed = _place(incoming, stored)
        if not _unplaced(incoming, placed, stored, {}):
            with one_statement():
                return _write_placed(placed, stored, incoming, incoming, {}, checked, actor, opener_only)
    with transaction.atomic(durable=True):
        return _record_in_transaction(traces, incoming, asked, stored, checked, actor, opener_only)


def _whole_traces(spans: Sequence[MappedSpan]) -> bool:
    """Whether each trace of ``spans`` has its root among them, and a span more: what an exporter
    sends when a trace ended within one export (its spans are then most likely all new). A root
    sent alone most often follows children parked earlier: looking them up costs less than a
    statement that fails."""
    roots: set[str] = set()
    counts: Counter[str] = Counter()
    for span in spans:
        counts[span.trace_id] += 1
        if span.opens_flow:
            roots.add(span.trace_id)
    return all(trace in roots and count > 1 for trace, count in counts.items())


def _record_in_transaction(
    traces: Sequence[str],
    incoming: dict[Key, MappedSpan],
    asked: set[Key],
    stored: _Stored,
    checked: Mapping[Key, dict[str, Any]],
    actor: str,
    opener_only: bool,
) -> _Written:
    pending: dict[Key, PendingSpan] = {}
    if stored.pending_seen:  # locked, so that two requests do not both adopt them
        pending = {
            (row.trace_id, row.span_id): row for row in fetch(PendingSpan, traces, column="trace_id", for_update=True)
        }
    parked_spans = {key: _from_json(row.mapped) for key, row in pending.items()}
    universe = {**parked_spans, **incoming}
    # The parked spans' parents, too.
    wanted_parents = {(span.trace_id, span.parent_span_id) for span in universe.values() if span.parent_span_id}
    if more := wanted_parents - asked:
        stored.update(_stored(more))

    placed = _place(universe, stored)
    return _write_placed(placed, stored, incoming, universe, pending, checked, actor, opener_only)


def _unplaced(
    incoming: Mapping[Key, MappedSpan], placed: Mapping[Key, _Placed], stored: _Stored, pending: Mapping[Key, Any]
) -> list[MappedSpan]:
    """The request's spans that wait for their parent (to be parked)."""
    return [
        span
        for key, span in incoming.items()
        if not span.opens_flow and key not in placed and key not in stored and key not in pending
    ]


def _write_placed(
    placed: dict[Key, _Placed],
    stored: _Stored,
    incoming: dict[Key, MappedSpan],
    universe: Mapping[Key, MappedSpan],
    pending: dict[Key, PendingSpan],
    checked: Mapping[Key, dict[str, Any]],
    actor: str,
    opener_only: bool,
    check: Write | None = None,
) -> _Written:
    warnings = _withhold_foreign(placed, stored, incoming, pending, actor)
    foreign = _foreign_replays(incoming, stored, actor, opener_only)

    items, spans_of_item = _items(placed, stored, incoming, universe, checked)
    # What this transaction already found not stored: the flows the request's spans open and
    # the steps they become (parents that are stored steps are looked up again, with their
    # flows, by the write path).
    absent = {span_uuid(*key) for key in incoming if key not in stored}
    absent |= {call_step_uuid(*key) for key, span in incoming.items() if span.opens_flow and span.step}
    results, plans = ingest.write_in_transaction(
        items, actor=actor, absent=absent, opener_only=opener_only, check=check
    )

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
    # Replays of spans already stored as steps or flows count as accepted; another writer's
    # spans re-sent are rejected, as its ids are in use.
    accepted += sum(1 for key in incoming if key in stored and key not in foreign)
    rejected.extend(foreign.values())
    rejected.extend(warnings)
    if released:
        PendingSpan.objects.filter(pk__in=released).delete()
    to_park = _unplaced(incoming, placed, stored, pending)
    parked_again = sum(1 for key in incoming if key in pending and key not in placed)
    to_park, refused = _within_pending_limit(to_park, pending, set(released))
    rejected.extend(refused)
    if to_park:
        PendingSpan.objects.bulk_create(
            [
                PendingSpan(
                    trace_id=span.trace_id,
                    span_id=span.span_id,
                    parent_span_id=span.parent_span_id,
                    mapped=_to_json(span),
                    actor=actor,
                    opener_only=opener_only,
                )
                for span in to_park
            ]
        )
    return results, plans, accepted, len(to_park) + parked_again, rejected


def _within_pending_limit(
    to_park: list[MappedSpan], pending: Mapping[Key, PendingSpan], released: set[int]
) -> tuple[list[MappedSpan], list[SpanProblem]]:
    """The spans to park, at most MAX_PENDING_PER_TRACE waiting per trace (every request of the
    trace reads them all); the others, rejected naming the limit."""
    waiting = Counter(key[0] for key, row in pending.items() if row.id not in released)
    kept: list[MappedSpan] = []
    refused: list[SpanProblem] = []
    for span in to_park:
        if waiting[span.trace_id] >= MAX_PENDING_PER_TRACE:
            refused.append(
                SpanProblem(
                    span.trace_id,
                    span.span_id,
                    f"span {span.span_id}: trace {span.trace_id} already has {MAX_PENDING_PER_TRACE} spans waiting "
                    "for their parent span (the limit); send the spans that place them (the trace's root) first",
                )
            )
            continue
        waiting[span.trace_id] += 1
        kept.append(span)
    return kept, refused


def _withhold_foreign(
    placed: dict[Key, _Placed],
    stored: _Stored,
    incoming: Mapping[Key, MappedSpan],
    pending: Mapping[Key, PendingSpan],
    actor: str,
) -> list[SpanProblem]:
    """Take out of ``placed`` the pending spans whose sender may not change the flow they would
    join (and every span placed below them): they stay pending, and the answer says so (a
    warning: they are not this request's spans). The request's own spans are the write
    path's to refuse (``opener_only``: the flow does not exist for them)."""
    owners = {
        anchor.flow_id: anchor.owner
        for anchor in (*stored.flows.values(), *stored.steps.values(), *stored.calls.values())
    }
    owners.update({span_uuid(*key): actor for key, span in incoming.items() if span.opens_flow and key not in stored})
    for key, where in placed.items():
        if where.as_flow:
            owners[where.flow_id] = pending[key].actor if key in pending and key not in incoming else actor
    withheld: set[Key] = set()
    warnings: list[SpanProblem] = []
    for key, where in list(placed.items()):  # parents were placed before their children
        if (key[0], where.span.parent_span_id) in withheld:
            withheld.add(key)
        elif key in pending and key not in incoming and not where.as_flow:
            row = pending[key]
            if row.opener_only and owners.get(where.flow_id) != row.actor:
                withheld.add(key)
                warnings.append(
                    SpanProblem(
                        key[0],
                        key[1],
                        f"span {key[1]} (pending, sent by another writer) was not placed in flow {where.flow_id}: "
                        "that writer may not change it",
                        stored=True,
                    )
                )
        if key in withheld:
            del placed[key]
    return warnings


def _foreign_replays(
    incoming: Mapping[Key, MappedSpan], stored: _Stored, actor: str, opener_only: bool
) -> dict[Key, SpanProblem]:
    """The request's spans already stored in a flow another writer owns: rejected, as the JSON
    routes refuse an id another caller holds (docs/ingest.md, "Who may change a flow")."""
    if not opener_only:
        return {}
    foreign = {}
    for key in incoming:
        anchor = stored.flows.get(key) or stored.steps.get(key)
        if anchor is not None and anchor.owner != actor:
            foreign[key] = SpanProblem(key[0], key[1], f"span {key[1]}: id {span_uuid(*key)} is already in use")
    return foreign


def _place(universe: Mapping[Key, MappedSpan], stored: _Stored) -> dict[Key, _Placed]:
    """Every non-root span of ``universe`` whose flow is known: walk up to the nearest span that
    is placed (a stored opener or step, a root span, a span placed already), then place the
    walked chain downwards, deciding on the way whether each agent span nests (module
    docstring). Spans that reach an unknown parent stay unplaced."""
    placed: dict[Key, _Placed] = {}
    below: dict[Key, _Anchor] = {}  # the anchor each placed span gives its children

    def anchor(key: Key) -> _Anchor | None:
        """Where a child of the span ``key`` goes, when that is known."""
        if key in below:
            return below[key]
        for known in (stored.calls, stored.steps, stored.flows):
            if key in known:
                return known[key]
        span = universe.get(key)
        if span is not None and span.opens_flow:
            return _Anchor(
                span_uuid(*key),
                call_step_uuid(*key) if span.step else None,
                span.agent_scope,
                span.flow.get("agent"),
            )
        return None

    # Spans whose walk up ended at an unknown parent: a later walk that reaches one stops there
    # (without it, a chain of n orphans costs n walks of up to n steps each).
    unplaceable: set[Key] = set()
    for start, first in universe.items():
        if first.opens_flow or start in stored or start in placed or start in unplaceable:
            continue
        chain = [start]
        seen = {start}
        found = None
        while True:
            span = universe[chain[-1]]
            parent = (span.trace_id, span.parent_span_id)
            found = anchor(parent)
            if found is not None or parent not in universe or parent in seen or parent in unplaceable:
                break
            chain.append(parent)
            seen.add(parent)
        if found is None:
            unplaceable.update(chain)
            continue
        for key in reversed(chain):
            span = universe[key]
            own_agent = span.step.get("agent") if span.agent_named else None
            # An agent within another agent's scope nests, unless it is that same agent again (a
            # framework's inner span of the run its instrumentation already opened).
            if span.kind == AGENT and found.in_agent and span.flow and span.flow.get("agent") != found.agent:
                placed[key] = _Placed(span, span_uuid(*key), None, own_agent, as_flow=True)
                found = _Anchor(span_uuid(*key), None, True, span.flow.get("agent") or own_agent)
            else:
                placed[key] = _Placed(span, found.flow_id, found.step_id, own_agent or found.agent)
                found = _Anchor(
                    found.flow_id,
                    span_uuid(*key),
                    found.in_agent or span.agent_scope,
                    own_agent if span.kind == AGENT and own_agent else found.agent,
                )
            below[key] = found
    return placed


# The spans among the given derived ids already stored (``_stored``): parameters AGENT_TRIGGER,
# the ids, AGENT, AGENT_TRIGGER, the ids again, the trace ids. For each registered id its step by
# key, then the step's flow by key, whatever the planner believes of the tables' sizes (LIMIT: a
# subquery it cannot merge into a join that starts from the flows and reads all their steps); a row
# of nulls when a span of the traces is pending. The arrays are opaque to the planner, so that
# PostgreSQL plans it once per connection however few the ids (core.bulk.opaque_array).
_STORED_SQL = f"""
SELECT id, NULL::uuid, agent, trigger_type = %s OR parent_span_id <> '', opened_by
  FROM reasoning_flow WHERE id = ANY({opaque_array("uuid[]")})
UNION ALL
SELECT s.id, s.flow_id, s.agent, s.kind = %s OR f.trigger_type = %s OR f.parent_span_id <> '', f.opened_by
  FROM reasoning_step_registry r,
       LATERAL (SELECT id, flow_id, agent, kind FROM reasoning_step
                 WHERE id = r.id AND flow_created_at = r.flow_created_at LIMIT 1) s,
       LATERAL (SELECT trigger_type, parent_span_id, opened_by FROM reasoning_flow WHERE id = s.flow_id LIMIT 1) f
 WHERE r.id = ANY({opaque_array("uuid[]")})
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL
  FROM (SELECT 1 FROM reasoning_pending_span WHERE trace_id = ANY({opaque_array("text[]")}) LIMIT 1) p
"""  # noqa: S608 (constants)


def _stored(keys: Iterable[Key], pending_of: Sequence[str] = ()) -> _Stored:
    """The spans among ``keys`` already stored, found by their derived ids in one statement: as
    flows they opened, as steps they became, and (root calls) as their flows' first steps; and
    whether a span of the traces ``pending_of`` is pending (``pending_seen``).

    Steps are found through their id registry (one unpartitioned key), then by their partition's
    key: by ``reasoning_step``'s partitions alone, a partition without statistics, or with those of
    when it was small (a fresh database, the first minute of a month), was read whole for every
    request, ~2 ms at 10,000 steps."""
    ids: dict[uuid.UUID, tuple[Key, bool]] = {}
    for key in keys:
        ids[span_uuid(*key)] = (key, False)
        ids[call_step_uuid(*key)] = (key, True)
    result = _Stored()
    if not ids and not pending_of:
        return result
    wanted = uuid_array(ids)
    with connection.cursor() as cursor:
        cursor.execute(
            _STORED_SQL,
            [AGENT_TRIGGER, wanted, AGENT, AGENT_TRIGGER, wanted, text_array(pending_of)],
        )
        rows = cursor.fetchall()
    for pk, flow_id, agent, in_agent, owner in rows:
        if pk is None:
            result.pending_seen = True
            continue
        key, is_call = ids[pk]
        if flow_id is None:
            result.flows[key] = _Anchor(pk, None, bool(in_agent), agent or None, owner)
        elif is_call:
            result.calls[key] = _Anchor(flow_id, pk, False, agent or None, owner)
        else:
            result.steps[key] = _Anchor(flow_id, pk, bool(in_agent), agent or None, owner)
    return result


def _items(
    placed: Mapping[Key, _Placed],
    stored: _Stored,
    incoming: Mapping[Key, MappedSpan],
    universe: Mapping[Key, MappedSpan],
    checked: Mapping[Key, dict[str, Any]],
) -> tuple[list[ingest.Item], list[list[tuple[Key, MappedSpan]]]]:
    """One item per flow: the flow's opening span (a root in the request, or an agent span
    nesting now) with its new steps, parents before children, then by start time."""
    by_flow: dict[uuid.UUID, list[tuple[Key, _Placed]]] = defaultdict(list)
    for key, where in placed.items():
        if not where.as_flow:
            by_flow[where.flow_id].append((key, where))
    opening: dict[uuid.UUID, tuple[Key, MappedSpan]] = {
        span_uuid(*key): (key, span) for key, span in incoming.items() if span.opens_flow and key not in stored
    }
    opening.update(
        {span_uuid(*key): (key, where.span) for key, where in placed.items() if where.as_flow and key not in stored}
    )
    stored_agents = {anchor.flow_id: anchor.agent for anchor in (*stored.flows.values(), *stored.steps.values())}
    items: list[ingest.Item] = []
    spans_of_item: list[list[tuple[Key, MappedSpan]]] = []
    for flow_id in sorted(set(by_flow) | set(opening), key=str):
        members = _ordered(by_flow.get(flow_id, []))
        if flow_id in opening:
            key, span = opening[flow_id]
            parts = checked.get(key) or _revalidated(span)
            create = dict(parts["flow"])
            if span.flow.get("user_id"):
                create["user_id"] = span.flow["user_id"]
            if not create.get("agent"):
                named = next((where.agent for _, where in members if where.span.agent_named and where.agent), None)
                create["agent"] = named or span.fallback_agent
            flow_agent = create["agent"]
            step_bodies = [_step_body(k, where, checked, flow_agent) for k, where in members]
            item_spans = [(k, where.span) for k, where in members]
            if span.opens_flow and span.step:
                call = _call_body(key, span, parts)
                step_bodies.insert(0, call)
            item = ingest.Item(
                flow_id=flow_id,
                create=create,
                steps=step_bodies,
                close=parts["close"],
                root_span_id=span.span_id,
                parent_span_id=span.parent_span_id,
                created_at=span.start,
                closed_at=span.end,
                fingerprinted={"flow": span.flow, "close": span.close, "start": span.start, "end": span.end},
                step_where="",
            )
            item_spans.insert(0, (key, span))
        else:
            flow_agent = stored_agents.get(flow_id)
            step_bodies = [_step_body(k, where, checked, flow_agent) for k, where in members]
            item_spans = [(k, where.span) for k, where in members]
            item = ingest.Item(flow_id=flow_id, steps=step_bodies, step_where="")
        items.append(item)
        spans_of_item.append(item_spans)
    return items, spans_of_item


def _revalidated(span: MappedSpan) -> dict[str, Any]:
    """A parked span's parts, validated again (they were validated on arrival: this passes)."""
    parts: dict[str, Any] = {}
    if span.flow:
        parts["flow"] = validated(FlowCreateSerializer, _public(span.flow))
        parts["close"] = validated(FlowCloseSerializer, span.close)
    if span.step:
        parts["step"] = validated(StepCreateSerializer, span.step)
    return parts


def _step_body(
    key: Key, where: _Placed, checked: Mapping[Key, dict[str, Any]], flow_agent: str | None
) -> dict[str, Any]:
    """The validated step fields of a placed span, with its id, parent, start and agent."""
    parts = checked.get(key) or _revalidated(where.span)
    body = dict(parts["step"])
    body["id"] = span_uuid(*key)
    body["parent_step_id"] = where.parent_step_id
    body["started_at"] = where.span.start
    body["agent"] = where.agent or flow_agent or where.span.fallback_agent
    return body


def _call_body(key: Key, span: MappedSpan, parts: Mapping[str, Any]) -> dict[str, Any]:
    """The step a root call span is in its own flow."""
    body = dict(parts["step"])
    body["id"] = call_step_uuid(*key)
    body["parent_step_id"] = None
    body["started_at"] = span.start
    return body


def _ordered(members: list[tuple[Key, _Placed]]) -> list[tuple[Key, _Placed]]:
    """Parents before children (the write path checks parents are earlier), else by start time.

    The order of repeated passes over the members sorted by (start, key), each pass taking, in
    that order, every member whose parent is outside the members or taken already; computed
    directly in O(n log n): a member is taken in its parent's pass when it comes after its parent
    in the sorted order, else in the pass after (a chain sent child first is not n passes)."""
    members = sorted(members, key=lambda member: (member[1].span.start, member[0]))
    index: dict[uuid.UUID | None, int] = {span_uuid(*key): position for position, (key, _) in enumerate(members)}
    passes: list[float] = [0.0] * len(members)  # 0: not computed yet
    for position in range(len(members)):
        walk = [position]
        on_walk = {position}
        while True:  # up to the nearest member whose pass is known, or outside the members
            parent = index.get(members[walk[-1]][1].parent_step_id)
            if parent is None or passes[parent]:
                break
            if parent in on_walk:  # a cycle cannot happen (parents are found walking up); be safe
                for member in walk:
                    passes[member] = passes[member] or float("inf")
                break
            walk.append(parent)
            on_walk.add(parent)
        for member in reversed(walk):
            if passes[member]:
                continue
            parent = index.get(members[member][1].parent_step_id)
            if parent is None:
                passes[member] = 1
            else:
                passes[member] = passes[parent] + (0 if parent < member else 1)
    order = sorted(range(len(members)), key=lambda position: (passes[position], position))
    return [members[position] for position in order]


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
            "kind": span.kind,
            "agent_named": span.agent_named,
            "agent_scope": span.agent_scope,
            "fallback_agent": span.fallback_agent,
        }
    )


def _from_json(text: str) -> MappedSpan:
    data = json.loads(text)
    step = data["step"]
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
        step=step,
        # Spans parked before these fields existed: their step named its agent.
        kind=data.get("kind", step.get("kind", DEFAULT_KIND)),
        agent_named=data.get("agent_named", True),
        agent_scope=data.get("agent_scope", data.get("kind") == AGENT),
        fallback_agent=data.get("fallback_agent", step.get("agent", "otlp")),
    )


# --- The decay job: spans whose flow never came -------------------------------------------------


def adopt_orphans(*, received_before: datetime, actor: str, limit: int = 1000) -> int:
    """Spans pending since before ``received_before`` become an aborted flow per trace and
    sender (``trigger_type`` otlp_trace, ``abort_reason`` timeout), with their parent links
    where the parents are among them. Each flow is written as its sender (``opened_by`` and
    the audit events name the writer that sent the spans, not the job: ``actor`` is the job's,
    for its own events), so no writer's spans land in another's flow. Returns the number of
    spans adopted."""
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
        groups: dict[tuple[str, str], list[PendingSpan]] = defaultdict(list)
        for row in rows:
            groups[(row.trace_id, row.actor)].append(row)
        by_sender: dict[str, list[tuple[ingest.Item, list[PendingSpan]]]] = defaultdict(list)
        for (trace_id, sender), group in groups.items():
            spans = {row.span_id: _from_json(row.mapped) for row in group}
            flow_id = span_uuid(trace_id, f"orphans:{group[0].pk}")
            members = [
                (
                    (trace_id, span_id),
                    _Placed(
                        span,
                        flow_id,
                        span_uuid(trace_id, span.parent_span_id) if span.parent_span_id in spans else None,
                        span.step.get("agent"),
                    ),
                )
                for span_id, span in spans.items()
            ]
            earliest = min(span.start for span in spans.values())
            item = ingest.Item(
                flow_id=flow_id,
                create={"trigger_type": ORPHAN_TRIGGER, "trigger_ref": f"trace/{trace_id}", "trace_id": trace_id},
                steps=[_step_body(key, where, {}, None) for key, where in _ordered(members)],
                close={"flow_state": ReasoningFlow.State.ABORTED, "abort_reason": ORPHAN_ABORT_REASON},
                created_at=earliest,
                step_where="",
            )
            by_sender[sender].append((item, group))
        adopted: list[int] = []
        plans: list[ingest.Plan] = []
        for sender, entries in by_sender.items():
            results, written = ingest.write_in_transaction([item for item, _ in entries], actor=sender)
            plans.extend(written)
            adopted.extend(
                row.pk
                for result, (_, group) in zip(results, entries, strict=True)
                if result.error is None
                for row in group
            )
        PendingSpan.objects.filter(pk__in=adopted).delete()
    ingest.count(plans)
    return len(adopted)
