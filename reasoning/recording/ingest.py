"""The one write path of flows and steps, done in bulk.

Every route that records reasoning ends here: ``POST /api/reasoning/ingest`` (whole
flows), ``POST /v1/traces`` (OpenTelemetry spans, through ``reasoning.recording.traces``) and the
single routes (open, step, steps/batch, close; ``reasoning.recording.services`` wraps them). A
request is a list of ``Item``s; an item is one flow's part of the request: open it
(``create``), append ``steps``, ``close`` it, or any of these together.

Each item is all or none; items are independent. The writes of all accepted items go
to the database together, in one transaction and a fixed number of statements whatever
the number of items and steps (``INSERT … SELECT FROM unnest`` for flows, steps and
audit events, ``UPDATE … FROM unnest`` for stored flows: ``core.bulk``; what they owe the dashboard's
rollups is written by the same statements, ``reasoning.rollups``), and the close of every closing
flow (outcome confidence, summary guard, radar snapshot) is computed for all of them at
once. The work the closes owe other apps (pathway extraction, backlog producers) is recorded
in the same transaction and done after the commit (``reasoning.recording.close_work``).

Retries are safe with client-chosen ids: an item whose flow, steps and close are all
stored exactly as sent is ``replayed``; a different body under a stored id is a conflict.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import msgspec
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models.base import ModelState
from django.utils import timezone
from django.utils.crypto import salted_hmac

from audit.actions import Action
from audit.services import Event, events_write, payload_float
from core.bulk import (
    Write,
    after_commit,
    bound_cursor,
    execute_writes,
    fetch,
    in_one_statement,
    in_transaction,
    insert_write,
    json_text,
    new_instance,
    one_statement,
    uuid_array,
)
from core.errors import Conflict, InvalidInput, NotFound, ServiceError
from patients.models import Patient
from reasoning import metrics, rollups
from reasoning.models import ReasoningFlow, ReasoningStep, user_pseudonym
from reasoning.radar import StepFacts, radars_of
from reasoning.recording import close_work, pricing
from reasoning.signals import close_events_of
from reasoning.summary_guard import check_all

logger = logging.getLogger(__name__)

State = ReasoningFlow.State
Status = Literal["created", "replayed", "rejected"]

# The close fields a replayed close must match.
_CLOSE_FIELDS = ("flow_state", "outcome_type", "outcome_summary", "abort_reason", "outcome_metrics")


_FINGERPRINT_SALT = "reasoning.request_fingerprint"
# Keys sorted, compact, UTF-8; what JSON has no type for (a datetime, a UUID, a Decimal) as msgspec
# writes it, anything else as str(). A canonical form for this code's own comparisons, not a format.
_FINGERPRINT_ENCODER = msgspec.json.Encoder(order="sorted", decimal_format="string", enc_hook=str)
# (SECRET_KEY, the HMAC's inner and outer hashes with their padded keys already absorbed).
_fingerprint_key: tuple[str, Any, Any] | None = None


def request_fingerprint(data: Mapping[str, Any]) -> str:
    """Keyed hash of a validated request body, for idempotent retries: a retry's body must
    hash to what its first attempt stored (``request_hash``).

    Keyed (HMAC with a key derived from SECRET_KEY) because the body includes PII
    values: a plain digest in the row would let anyone holding a database copy confirm
    a guessed name or MRN. Encoded by msgspec, the HMAC's key derived once: 2.3 against
    11.9 µs a step with ``json.dumps`` and ``salted_hmac``. For bodies of ASCII text, numbers
    and ids the bytes are ``json.dumps``'s, so the fingerprint is the one rows stored before
    2026-12-05 (``legacy_request_fingerprint``); date-times and text beyond ASCII are written
    differently, and ``same_request`` accepts either form.

    The HMAC (RFC 2104) is computed from two SHA-256 states that have absorbed the padded key
    once: the same digest as ``hmac.new(key, message, sha256)``, without ``hmac.HMAC``'s
    Python-level ``copy`` and ``hexdigest`` (1.4 against 3.2 µs).
    """
    global _fingerprint_key
    secret = settings.SECRET_KEY
    if _fingerprint_key is None or _fingerprint_key[0] != secret:
        key = hashlib.sha256((_FINGERPRINT_SALT + secret).encode()).digest().ljust(64, b"\0")
        inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in key))
        outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in key))
        _fingerprint_key = (secret, inner, outer)
    _, inner, outer = _fingerprint_key
    keyed = inner.copy()
    keyed.update(_FINGERPRINT_ENCODER.encode(data))
    digest = outer.copy()
    digest.update(keyed.digest())
    return str(digest.hexdigest())


def legacy_request_fingerprint(data: Mapping[str, Any]) -> str:
    """The fingerprint as rows stored it before 2026-12-05 (``json.dumps``, keys sorted)."""
    encoded = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return salted_hmac(_FINGERPRINT_SALT, encoded, algorithm="sha256").hexdigest()


def same_request(stored: str, fingerprint: str, data: Mapping[str, Any]) -> bool:
    """Whether a stored ``request_hash`` is of the request ``data`` (whose fingerprint is
    ``fingerprint``), in either form: a retry may come after an upgrade."""
    return stored == fingerprint or stored == legacy_request_fingerprint(data)


@dataclass
class Item:
    """One flow's part of a request. Fields are validated request data (serializer output).

    ``flow_id``: the flow to open (client-chosen, or generated when None) or to append to
    and close. ``create``: the open request's fields (FlowCreate, without ``id``), or None
    to name a stored flow. ``steps``: StepCreate bodies in order. ``close``: FlowClose.
    ``where``: how errors name the item's fields (``flows[3].``); ``step_where``: how they
    name a step (``steps[{}].``, or ``""`` for the one-step route).
    """

    flow_id: uuid.UUID | None = None
    create: Mapping[str, Any] | None = None
    steps: Sequence[Mapping[str, Any]] = ()
    close: Mapping[str, Any] | None = None
    where: str = ""
    step_where: str = "steps[{}]."
    # Set by the OTLP path: the span that opens the flow, and the flow's real times.
    root_span_id: str = ""
    parent_span_id: str = ""
    created_at: datetime | None = None
    closed_at: datetime | None = None
    # What replays of the open request compare instead of ``create`` (the OTLP path: the
    # whole span), fingerprinted (``request_fingerprint``).
    fingerprinted: Mapping[str, Any] | None = None
    # A close of a closed flow with the same fields is a replay (bulk routes); the close
    # route answers 409 to any second close.
    replay_close: bool = True

    def __post_init__(self) -> None:
        if self.flow_id is not None and not isinstance(self.flow_id, uuid.UUID):
            self.flow_id = uuid.UUID(str(self.flow_id))


@dataclass
class Result:
    status: Status
    flow: ReasoningFlow | None = None
    steps: list[ReasoningStep] = field(default_factory=list)
    error: ServiceError | None = None
    # Which parts this request wrote (False for a replayed part).
    opened: bool = False
    closed: bool = False

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


def write(items: Sequence[Item], *, actor: str, opener_only: bool = False) -> list[Result]:
    """Write the items; one ``Result`` per item, in order. See the module docstring.

    ``opener_only``: the caller may change only the flows it opened (``opened_by`` is
    ``actor``); another caller's flow is answered as if it did not exist (the API's writers,
    unless they hold the admin scope; internal jobs change any flow)."""
    written = _write_in_one_statement(items, actor, opener_only)
    if written is not None:
        results, plans = written
        recent_flows.remember(plans)
        count(plans)
        return results
    try:
        results, plans = _write(items, actor, opener_only)
    except IntegrityError:
        # A concurrent request stored one of these ids between our read and our write.
        # Each item again on its own: now its replay (or its conflict) is visible.
        if len(items) == 1:
            results, plans = _write(items, actor, opener_only)
        else:
            results, plans = [], []
            for item in items:
                try:
                    one, wrote = _write([item], actor, opener_only)
                except IntegrityError:
                    one, wrote = [Result("rejected", error=_RACED)], []
                results.extend(one)
                plans.extend(wrote)
    recent_flows.remember(plans)
    count(plans)
    return results


_RACED = Conflict("a concurrent request wrote the same ids; retry this item")


@dataclass
class Plan:
    """What one accepted item writes."""

    item: Item
    flow: ReasoningFlow
    new_flow: bool
    new_steps: list[ReasoningStep]
    replayed_steps: list[ReasoningStep]
    closing: bool


class _Rejected(Exception):
    def __init__(self, error: ServiceError) -> None:
        self.error = error


@transaction.atomic(durable=True)
def _write(items: Sequence[Item], actor: str, opener_only: bool) -> tuple[list[Result], list[Plan]]:
    return write_in_transaction(items, actor=actor, opener_only=opener_only)


def _write_in_one_statement(
    items: Sequence[Item], actor: str, opener_only: bool
) -> tuple[list[Result], list[Plan]] | None:
    """The request read without locks and written as one statement with no transaction around it
    (``core.bulk.one_statement``: no ``BEGIN``, ``COMMIT`` or ``SELECT … FOR UPDATE`` round trips),
    when it names at most one stored flow: what the single routes send (open, a step, a batch of
    steps, a close). ``None`` when it cannot be, or when the statement failed because what it read
    changed meanwhile: the flow (``reasoning_flow_moved``, see ``_update_flows``), or ids a
    concurrent request stored. The caller then writes it under locks.

    A request naming several stored flows takes their row locks in id order instead: an update
    of several rows locks them in the order its plan reads them, which two statements could
    meet in opposite orders."""
    named = {item.flow_id for item in items if item.flow_id is not None}
    if connection.in_atomic_block or len(named) > 1:
        return None
    try:
        with one_statement():
            return write_in_transaction(items, actor=actor, opener_only=opener_only)
    except IntegrityError:
        recent_flows.forget(named)
        return None


class _RecentFlows:
    """The active flows this process wrote last, as it wrote them (at most ``size``, the least
    recently written forgotten first): a request in one statement takes its flow from here
    instead of reading it, and the statement's update checks it as it checks a flow it read
    (``_update_flows``). An agent's requests mostly come to the process that wrote its flow before
    (a kept-alive connection). A flow another process changed meanwhile fails the statement, is
    forgotten, and the request is written under the flow's lock; a closed flow is forgotten."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._flows: OrderedDict[uuid.UUID, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, pks: Collection[uuid.UUID]) -> dict[uuid.UUID, ReasoningFlow]:
        """Copies of the flows of ``pks`` this process knows (a request's plan changes its own)."""
        found = {}
        with self._lock:
            for pk in pks:
                values = self._flows.get(pk)
                if values is not None:
                    found[pk] = _stored_flow(values)
        return found

    def remember(self, plans: Sequence[Plan]) -> None:
        with self._lock:
            for plan in plans:
                flow = plan.flow
                if flow.flow_state == ReasoningFlow.State.ACTIVE:
                    self._flows[flow.id] = {name: value for name, value in flow.__dict__.items() if name != "_state"}
                    self._flows.move_to_end(flow.id)
                else:
                    self._flows.pop(flow.id, None)
            while len(self._flows) > self._size:
                self._flows.popitem(last=False)

    def forget(self, pks: Collection[uuid.UUID]) -> None:
        with self._lock:
            for pk in pks:
                self._flows.pop(pk, None)

    def clear(self) -> None:
        with self._lock:
            self._flows.clear()


def _stored_flow(values: dict[str, Any]) -> ReasoningFlow:
    """A flow of these attribute values, as ``fetch`` returns a stored one."""
    flow = ReasoningFlow.__new__(ReasoningFlow)
    # Lists and documents (model names, metrics) copied: a plan assigns them anew, a caller might not.
    flow.__dict__.update(
        {name: value.copy() if value.__class__ in (list, dict) else value for name, value in values.items()}
    )
    flow._state = ModelState()
    flow._state.adding = False
    flow._state.db = DEFAULT_DB_ALIAS
    return flow


recent_flows = _RecentFlows(1024)


def write_in_transaction(
    items: Sequence[Item],
    *,
    actor: str,
    absent: Collection[uuid.UUID] = (),
    opener_only: bool = False,
    check: Write | None = None,
) -> tuple[list[Result], list[Plan]]:
    """``write`` inside the caller's transaction (the OTLP path parks and releases spans in
    the same one). Returns the results and what was written, for ``count`` after commit.

    ``absent``: flow and step ids the caller found not stored, earlier in this transaction (or
    that it expects not to be: a primary key refuses them otherwise); they are not looked up
    again. (Should a concurrent request store one meanwhile, the insert fails and the caller's
    retry sees it.) ``check``: a read sent as the statement's last part, its main query, when
    there is anything to write: one that raises an error makes the statement fail whole."""
    if not in_transaction():
        raise RuntimeError("write_in_transaction() must run inside a transaction (or core.bulk.one_statement())")
    now = timezone.now()
    prepared = [_prepare(item) for item in items]
    named = {item.flow_id for item in items if item.flow_id is not None} - set(absent)
    # Locks the stored flows this request touches, in id order (no deadlock between two
    # requests): a concurrent step write or close waits for this one, then sees its steps. In one
    # statement (``_write_in_one_statement``) they are read without a lock, and the statement's
    # update refuses a flow whose step count or state moved since (``_update_flows``).
    unlocked = in_one_statement()
    stored_flows = recent_flows.get(named) if unlocked else {}  # (_RecentFlows)
    unknown = named - stored_flows.keys()
    stored_flows.update((flow.id, flow) for flow in fetch(ReasoningFlow, unknown, for_update=not unlocked))
    read = {pk: flow.step_count for pk, flow in stored_flows.items()} if unlocked else {}
    stored_steps = _stored_steps(prepared, absent)
    known_patients = _known_patients(items, stored_flows)

    results: list[Result] = []
    plans: list[Plan] = []
    seen: set[uuid.UUID] = set()
    for item, steps in zip(items, prepared, strict=True):
        if isinstance(steps, ServiceError):
            results.append(Result("rejected", error=steps))
            continue
        if item.flow_id is not None:
            if item.flow_id in seen:
                again = "this flow appears in an earlier item; send one item per flow"
                results.append(Result("rejected", error=Conflict(again, field=f"{item.where}id")))
                continue
            seen.add(item.flow_id)
        try:
            plan = _plan(item, steps, stored_flows, stored_steps, known_patients, now, actor, opener_only)
        except _Rejected as rejected:
            results.append(Result("rejected", error=rejected.error))
            continue
        plans.append(plan)
        results.append(Result("created"))  # filled in below
    facts = _close_all([plan for plan in plans if plan.closing], stored_steps=stored_steps, now=now)
    closing = [plan.flow for plan in plans if plan.closing]
    # The work the closes owe their receivers, committed with them (the outbox); in one statement
    # (no lock: its check refuses a flow that moved, and the close is written again under the lock,
    # owing the work), what a receiver can do in the close itself is done in it.
    owed, owed_writes, done_events = close_work.owe(closing, now, facts if unlocked else None)
    # The rows, their audit events and the work owed: one statement, one round trip (a statement
    # costs the worker ~0.06 ms of CPU whatever it carries). The stored flows' update is its main
    # query: PostgreSQL runs the main query first and the other parts after it, so a statement
    # written without a lock takes the flows' row locks before it writes anything another writer
    # could wait on (a step's position, a close's owed work). Holding one of those while waiting
    # for a flow's lock would deadlock with a request that holds the lock and writes the same.
    new_flows, new_steps, update = _writes(plans, now, read)
    events = events_write([*_events(plans, actor), *close_events_of(closing), *done_events])
    writes = [new_flows, new_steps, events, *owed_writes, update]
    if check is not None and any(write is not None for write in writes):
        writes.append(check)
    execute_writes(writes)

    accepted = iter(plans)
    for index, result in enumerate(results):
        if result.status == "rejected":
            continue
        plan = next(accepted)
        wrote = plan.new_flow or bool(plan.new_steps) or plan.closing
        results[index] = Result(
            "created" if wrote else "replayed",
            flow=plan.flow,
            steps=plan.replayed_steps or plan.new_steps,
            opened=plan.new_flow,
            closed=plan.closing,
        )
    if owed:
        after_commit(lambda: close_work.perform_after_close(owed))
    return results, plans


# --- Reading what the request refers to -------------------------------------------------


def _prepare(item: Item) -> list[tuple[ReasoningStep, bool]] | ServiceError:
    """The item's unsaved steps (PII split off) and whether the client chose each id."""
    prepared = [_prepare_step(dict(body)) for body in item.steps]
    seen: set[uuid.UUID] = set()
    for index, (step, has_id) in enumerate(prepared):
        if has_id and step.id in seen:
            where = f"{item.where}{_step_field(item, index)}id"
            return InvalidInput("step ids must be unique within a request", field=where)
        seen.add(step.id)
    return prepared


def _step_field(item: Item, index: int) -> str:
    """``steps[2].``; ``""`` for the one-step route."""
    return item.step_where.format(index)


def _prepare_step(fields: dict[str, Any]) -> tuple[ReasoningStep, bool]:
    fingerprint = request_fingerprint(fields)
    client_id = fields.pop("id", None)
    pii_fields = list(dict.fromkeys(fields.pop("pii_fields", None) or []))
    inputs, inputs_pii = _split_pii(fields.pop("inputs", None) or {}, pii_fields)
    outputs, outputs_pii = _split_pii(fields.pop("outputs", None) or {}, pii_fields)
    reasoning_content = fields.pop("reasoning_content", None) or None
    step = new_instance(
        ReasoningStep,
        {
            "reasoning_content": reasoning_content,
            "reasoning_content_chars": len(reasoning_content) if reasoning_content else None,
            "id": client_id or uuid.uuid4(),
            "extra_parent_ids": list(dict.fromkeys(fields.pop("extra_parent_ids", None) or [])),
            "inputs": inputs,
            "outputs": outputs,
            "pii_fields": pii_fields,
            "inputs_pii": inputs_pii,
            "outputs_pii": outputs_pii,
            "request_hash": fingerprint,
            **fields,
        },
    )
    step.cost_usd = pricing.step_cost(
        step.model, step.input_tokens, step.output_tokens, step.cached_tokens, at=step.started_at
    )
    return step, client_id is not None


def _split_pii(document: dict[str, Any], pii_fields: list[str]) -> tuple[dict[str, Any], str | None]:
    """Move the declared top-level keys out of ``document``; return (rest, encrypted JSON)."""
    if not pii_fields:
        return document, None
    secret = {key: document[key] for key in pii_fields if key in document}
    rest = {key: value for key, value in document.items() if key not in secret}
    return rest, (json_text(secret) if secret else None)


def _stored_steps(
    prepared: Sequence[list[tuple[ReasoningStep, bool]] | ServiceError], absent: Collection[uuid.UUID] = ()
) -> dict[uuid.UUID, Any]:
    """Stored steps named by the request (client ids, parents), in one query."""
    wanted: set[uuid.UUID] = set()
    for steps in prepared:
        if isinstance(steps, ServiceError):
            continue
        for step, has_id in steps:
            if has_id:
                wanted.add(step.id)
            if step.parent_step_id is not None:
                wanted.add(step.parent_step_id)
            wanted.update(step.extra_parent_ids)
    wanted -= set(absent)
    if not wanted:
        return {}
    return {step.id: step for step in ReasoningStep.objects.filter(pk__in=wanted).defer("reasoning_content")}


def _known_patients(items: Sequence[Item], stored_flows: Mapping[uuid.UUID, ReasoningFlow]) -> set[uuid.UUID]:
    wanted = {
        item.create["patient_id"]
        for item in items
        if item.create and item.create.get("patient_id") and item.flow_id not in stored_flows
    }
    return set(Patient.objects.filter(pk__in=wanted).values_list("pk", flat=True)) if wanted else set()


# --- Deciding, per item ---------------------------------------------------------------------


def _plan(
    item: Item,
    prepared: list[tuple[ReasoningStep, bool]],
    stored_flows: Mapping[uuid.UUID, ReasoningFlow],
    stored_steps: Mapping[uuid.UUID, ReasoningStep],
    known_patients: set[uuid.UUID],
    now: datetime,
    actor: str,
    opener_only: bool,
) -> Plan:
    flow = stored_flows.get(item.flow_id) if item.flow_id is not None else None
    # Another caller's flow: as if it did not exist, and its id unusable.
    foreign = flow is not None and opener_only and flow.opened_by != actor
    new_flow = False
    if item.create is not None:
        fingerprinted = item.fingerprinted or {**item.create, **({"id": item.flow_id} if item.flow_id else {})}
        fingerprint = request_fingerprint(fingerprinted)
        if flow is not None:
            if foreign:
                raise _Rejected(Conflict(f"id {flow.id} is already in use", field=f"{item.where}id"))
            if not same_request(flow.request_hash, fingerprint, fingerprinted):
                raise _Rejected(Conflict(f"id {flow.id} already exists with a different body", field=f"{item.where}id"))
        else:
            flow = _new_flow(item, fingerprint, known_patients, now, actor)
            new_flow = True
    elif flow is None or foreign:
        missing = NotFound(f"flow {item.flow_id} does not exist", field=f"{item.where}id" if item.where else None)
        raise _Rejected(missing)
    assert flow is not None

    replayed_steps = _replayed_steps(item, flow, prepared, stored_steps)
    new_steps = [] if replayed_steps else [step for step, _ in prepared]
    closing = False
    if item.close is not None:
        if flow.is_active:
            closing = True
        elif item.replay_close and not new_steps and _same_close(flow, item.close):
            pass  # the close is replayed
        else:
            raise _Rejected(_closed(flow, item))
    if new_steps:
        if not flow.is_active:
            raise _Rejected(_closed(flow, item))
        _check_parents(item, flow, new_steps, stored_steps)
        first = flow.step_count + 1
        for offset, step in enumerate(new_steps):
            # Into __dict__: the attribute's descriptor (Python code) would only drop a cached flow,
            # and a new step has none.
            step.__dict__["flow_id"] = flow.id
            step.position = first + offset
        flow.step_count += len(new_steps)
        _add_usage(flow, new_steps)
    plan = Plan(item, flow, new_flow, new_steps, replayed_steps, closing)
    if closing:
        assert item.close is not None
        flow.flow_state = item.close["flow_state"]
        # An agent clock slightly behind ours must not close a flow before it opened.
        flow.closed_at = max(item.closed_at, flow.created_at) if item.closed_at else now
        flow.outcome_type = item.close.get("outcome_type", "")
        flow.outcome_summary = item.close.get("outcome_summary", "")
        flow.abort_reason = item.close.get("abort_reason", "")
        flow.outcome_metrics = dict(item.close.get("outcome_metrics") or {})
    return plan


# A flow keeps at most this many model names (a flow naming more is not a real agent's).
MAX_FLOW_MODELS = 20


def _add_usage(flow: ReasoningFlow, steps: Sequence[ReasoningStep]) -> None:
    """The flow's token totals, cost and models, with the new steps'."""
    for step in steps:
        if step.input_tokens is not None:
            flow.input_tokens = (flow.input_tokens or 0) + step.input_tokens
        if step.output_tokens is not None:
            flow.output_tokens = (flow.output_tokens or 0) + step.output_tokens
        if step.cost_usd is not None:
            flow.cost_usd = (flow.cost_usd or 0) + step.cost_usd
        if step.model and step.model not in flow.model_names and len(flow.model_names) < MAX_FLOW_MODELS:
            flow.model_names = sorted([*flow.model_names, step.model])


def _new_flow(item: Item, fingerprint: str, known_patients: set[uuid.UUID], now: datetime, actor: str) -> ReasoningFlow:
    assert item.create is not None
    fields = dict(item.create)
    fields.pop("id", None)
    patient_id = fields.pop("patient_id", None)
    # The OTLP path's end user (the JSON routes take none): only its pseudonym is stored.
    user_id = fields.pop("user_id", "")
    if user_id:
        fields["user_ref"] = user_pseudonym(user_id)
    if patient_id is not None and patient_id not in known_patients:
        raise _Rejected(InvalidInput("unknown patient", field=f"{item.where}patient_id"))
    if not fields.get("trace_id"):
        fields["trace_id"] = uuid.uuid4().hex
    return new_instance(
        ReasoningFlow,
        {
            "patient_id": patient_id,
            "opened_by": actor,
            "request_hash": fingerprint,
            "root_span_id": item.root_span_id,
            "parent_span_id": item.parent_span_id,
            "created_at": item.created_at or now,
            **fields,
            "id": item.flow_id or uuid.uuid4(),
        },
    )


def _closed(flow: ReasoningFlow, item: Item) -> Conflict:
    return Conflict(
        f"flow {flow.id} is {flow.flow_state}; it no longer accepts changes",
        field=f"{item.where}id" if item.where else None,
    )


def _same_close(flow: ReasoningFlow, close: Mapping[str, Any]) -> bool:
    sent = {name: close.get(name, {} if name == "outcome_metrics" else "") for name in _CLOSE_FIELDS}
    stored = {name: getattr(flow, name) for name in _CLOSE_FIELDS}
    return sent == stored


def _replayed_steps(
    item: Item,
    flow: ReasoningFlow,
    prepared: list[tuple[ReasoningStep, bool]],
    stored_steps: Mapping[uuid.UUID, ReasoningStep],
) -> list[ReasoningStep]:
    """The stored steps if the item's steps are an exact retry; [] if none of them exist yet."""
    if not any(has_id and step.id in stored_steps for step, has_id in prepared):
        return []
    replayed = []
    for index, (step, has_id) in enumerate(prepared):
        existing = stored_steps.get(step.id) if has_id else None
        where = f"{item.where}{_step_field(item, index)}id"
        if existing is None:
            raise _Rejected(
                Conflict("some steps of this request already exist; retry the same request unchanged", field=where)
            )
        if existing.flow_id != flow.id:
            # Maybe another caller's flow: the answer says nothing about it.
            raise _Rejected(Conflict(f"id {step.id} is already in use", field=where))
        if not same_request(existing.request_hash, step.request_hash, item.steps[index]):
            raise _Rejected(Conflict(f"id {existing.id} already exists with a different body", field=where))
        replayed.append(existing)
    return replayed


def _check_parents(
    item: Item, flow: ReasoningFlow, steps: list[ReasoningStep], stored_steps: Mapping[uuid.UUID, ReasoningStep]
) -> None:
    """Every parent is a stored step of this flow or an earlier step of this item."""
    earlier: set[uuid.UUID] = set()
    for index, step in enumerate(steps):
        where = f"{item.where}{_step_field(item, index)}"

        def known(pk: uuid.UUID) -> bool:
            stored = stored_steps.get(pk)
            return pk in earlier or (stored is not None and stored.flow_id == flow.id)

        parent = step.parent_step_id  # once: a foreign key's attribute is Python code at every read
        if parent is not None and not known(parent):
            raise _Rejected(
                InvalidInput("must be an existing, earlier step of the same flow", field=f"{where}parent_step_id")
            )
        if parent in step.extra_parent_ids:
            raise _Rejected(InvalidInput("must not repeat parent_step_id", field=f"{where}extra_parent_ids"))
        missing = [str(pk) for pk in step.extra_parent_ids if not known(pk)]
        if missing:
            raise _Rejected(
                InvalidInput(f"not earlier steps of this flow: {', '.join(missing)}", field=f"{where}extra_parent_ids")
            )
        earlier.add(step.id)


# --- Closing, for all closing flows at once ----------------------------------------------------


def _close_all(
    plans: Sequence[Plan], *, stored_steps: Mapping[uuid.UUID, ReasoningStep], now: datetime
) -> dict[uuid.UUID, list[StepFacts]]:
    """Outcome confidence (the weakest step), summary guard and radar snapshot of every
    closing flow; returns the facts of each one's steps, every step in order. Stored steps are read
    in one query: the flows are locked, so the set is final, or (written as one statement without a
    lock) the statement's update refuses a flow that took a step since it was read. This request's
    steps are in memory."""
    if not plans:
        return {}
    facts: dict[uuid.UUID, list[StepFacts]] = {plan.flow.id: [] for plan in plans}
    summaries: dict[uuid.UUID, list[str]] = {plan.flow.id: [] for plan in plans}
    confidences: dict[uuid.UUID, list[float]] = {plan.flow.id: [] for plan in plans}
    earlier = [plan.flow for plan in plans if not plan.new_flow]
    if earlier:
        with bound_cursor() as cursor:
            # By the partition key too: the partitions of the flows' months only.
            cursor.execute(_EARLIER_STEPS, [[flow.id for flow in earlier], [flow.created_at for flow in earlier]])
            rows = cursor.fetchall()
        for flow_id, kind, agent, confidence, outputs, summary in rows:
            # Django has psycopg hand jsonb over as text (JSONField parses it); so do we.
            facts[flow_id].append(StepFacts(kind, agent, confidence, json.loads(outputs)))
            summaries[flow_id].append(summary)
            if confidence is not None:
                confidences[flow_id].append(confidence)
    for plan in plans:
        pk = plan.flow.id
        flow_facts, flow_summaries, flow_confidences = facts[pk], summaries[pk], confidences[pk]
        for step in plan.new_steps:
            flow_facts.append(StepFacts(step.kind, step.agent, step.confidence, step.outputs))
            flow_summaries.append(step.summary_text)
            if step.confidence is not None:
                flow_confidences.append(step.confidence)
        flow = plan.flow
        flow.outcome_confidence = min(confidences[pk]) if confidences[pk] else None
        verdict = check_all([flow.trigger_summary, *summaries[pk], flow.outcome_summary])
        flow.patient_safe_summary = verdict.ok
        flow.summary_guard_rule = verdict.rule or ""
    # The radar counts aborted siblings among stored flows: rows of this request are not
    # stored yet, so a closing flow never counts itself. No pathway can name a closing flow: only
    # a completed flow seeds one, and these are active until this transaction commits.
    radars = radars_of([plan.flow for plan in plans], facts, now=now, new=facts.keys())
    for plan in plans:
        plan.flow.dimensions_snapshot = radars[plan.flow.id]
    return facts


# The stored steps of closing flows, as the radar, the outcome confidence and the summary guard read
# them (a constant statement: cheaper than compiling the queryset on every close).
_EARLIER_STEPS = (
    "SELECT flow_id, kind, agent, confidence, outputs, summary_text FROM reasoning_step"
    " WHERE flow_id = ANY(%s) AND flow_created_at = ANY(%s) ORDER BY flow_id, position"
)


# --- Writing -----------------------------------------------------------------------------------


def _writes(
    plans: Sequence[Plan], now: datetime, read: Mapping[uuid.UUID, int]
) -> tuple[Write | None, Write | None, Write | None]:
    """The rows' writes (new flows, new steps, the stored flows' update; ``None``: nothing of the
    kind), and what they owe the dashboard's rollups (``reasoning.rollups``) in the same
    statements: the hour of every flow opened, closed or given a cost marked dirty, the usage of
    every new step that reported tokens. ``read``: the step counts of stored flows read without a
    lock, which the update checks."""
    new_flows = [plan.flow for plan in plans if plan.new_flow]
    steps: list[ReasoningStep] = []
    for plan in plans:
        for step in plan.new_steps:
            step.flow_created_at = plan.flow.created_at
            if step.created_at is None:
                step.created_at = now
            steps.append(step)
    if any(rollups.reports_tokens(step) for step in steps):
        steps_write = insert_write(steps, returning=rollups.USAGE_OF_STEPS, then=rollups.OWE_USAGE)
    else:
        steps_write = insert_write(steps)  # the plainer statement: planned in a third of the time
    changed = [plan for plan in plans if not plan.new_flow and (plan.new_steps or plan.closing)]
    update = (
        _update_flows(
            [plan.flow for plan in changed],
            [plan.closing or any(step.cost_usd is not None for step in plan.new_steps) for plan in changed],
            read,
        )
        if changed
        else None
    )
    return insert_write(new_flows, returning="created_at", then=rollups.MARK_HOURS), steps_write, update


def _update_flows(flows: Sequence[ReasoningFlow], rollup: Sequence[bool], read: Mapping[uuid.UUID, int]) -> Write:
    """The write of step counts, usage and close fields of stored flows, of one parameter (the
    rows as JSON, as ``core.bulk.insert_write`` sends them); with the dirty marks of the hours of
    those whose ``rollup`` is true (closed, or given a cost).

    A flow in ``read`` (its step count as read, without a lock) is written only if the stored row
    still has that count and is active; otherwise the statement fails whole
    (``reasoning_flow_moved``, an integrity error). Every change of a flow's usage or close
    fields comes with new steps or a close, so those two say whether what was read still holds."""
    rows = [
        {
            "id": flow.id,
            "step_count": flow.step_count,
            "flow_state": flow.flow_state,
            "closed_at": flow.closed_at,
            "outcome_type": flow.outcome_type,
            "outcome_summary": flow.outcome_summary,
            "outcome_confidence": flow.outcome_confidence,
            "abort_reason": flow.abort_reason,
            "outcome_metrics": flow.outcome_metrics,
            "patient_safe_summary": flow.patient_safe_summary,
            "summary_guard_rule": flow.summary_guard_rule,
            "dimensions_snapshot": flow.dimensions_snapshot,
            "input_tokens": flow.input_tokens,
            "output_tokens": flow.output_tokens,
            "cost_usd": flow.cost_usd,
            "model_names": flow.model_names,
            "rollup": marked,
            "read": read.get(flow.id),
        }
        for flow, marked in zip(flows, rollup, strict=True)
    ]
    return Write(
        rollups.MARK_HOURS,
        (json_text(rows), uuid_array(flow.id for flow in flows)),
        parts=(("updated", _UPDATE_FLOWS), ("inserted", _ROLLUP)),
    )


# The flows' ids a second time, as an array: the prepared statement's generic plan guesses a JSON
# parameter at 100 rows, and on a table of up to some tens of thousands of flows it joined them to
# a scan of the whole table (every step request paid for every flow stored). An id array, hidden
# from the planner as ``core.bulk.opaque_array`` hides one, is found by the primary key.
_UPDATE_FLOWS = """
UPDATE reasoning_flow f SET
    step_count = CASE
        WHEN v.read IS NULL OR (f.step_count = v.read AND f.flow_state = 'active') THEN v.step_count
        ELSE reasoning_flow_moved(f.id)
    END,
    input_tokens = v.input_tokens,
    output_tokens = v.output_tokens,
    cost_usd = v.cost_usd,
    model_names = v.model_names,
    flow_state = v.flow_state,
    closed_at = v.closed_at,
    outcome_type = v.outcome_type,
    outcome_summary = v.outcome_summary,
    outcome_confidence = v.outcome_confidence,
    abort_reason = v.abort_reason,
    outcome_metrics = v.outcome_metrics,
    patient_safe_summary = v.patient_safe_summary,
    summary_guard_rule = v.summary_guard_rule,
    dimensions_snapshot = v.dimensions_snapshot
FROM json_to_recordset(%s::json) AS v(
    id uuid, step_count int, flow_state text, closed_at timestamptz, outcome_type text,
    outcome_summary text, outcome_confidence float8, abort_reason text, outcome_metrics jsonb,
    patient_safe_summary bool, summary_guard_rule text, dimensions_snapshot jsonb,
    input_tokens int8, output_tokens int8, cost_usd numeric, model_names text[], rollup bool, read int
)
WHERE f.id = v.id AND f.id = ANY((SELECT %s::uuid[])::uuid[])
RETURNING f.created_at, v.rollup
"""
# The hours the updated flows owe the dashboard's rollups.
_ROLLUP = "SELECT created_at FROM updated WHERE rollup"


def _events(plans: Sequence[Plan], actor: str) -> Iterator[Event]:
    for plan in plans:
        flow = plan.flow
        if plan.new_flow:
            yield Event(
                Action.FLOW_STARTED,
                actor,
                flow,
                {"trigger_type": flow.trigger_type, "agent": flow.agent, "has_patient": flow.patient_id is not None},
            )
        flow_id = str(flow.id)
        for step in plan.new_steps:
            yield Event(
                Action.STEP_CREATED,
                actor,
                step,
                {
                    "flow_id": flow_id,
                    "position": step.position,
                    "kind": step.kind,
                    "agent": step.agent,
                    "parent_count": (step.parent_step_id is not None) + len(step.extra_parent_ids),
                    "pii_field_count": len(step.pii_fields),
                    "reasoning_content_chars": step.reasoning_content_chars,
                },
            )
        if plan.closing:
            yield Event(
                Action.FLOW_COMPLETED if flow.flow_state == State.COMPLETED else Action.FLOW_ABORTED,
                actor,
                flow,
                {
                    "outcome_type": flow.outcome_type,
                    "step_count": flow.step_count,
                    "outcome_confidence": payload_float(flow.outcome_confidence),
                    "timeout": flow.abort_reason == "timeout",
                    "patient_safe_summary": flow.patient_safe_summary,
                    "summary_guard_rule": flow.summary_guard_rule or None,
                },
            )


def count(plans: Sequence[Plan]) -> None:
    """The OpenTelemetry counters, once the request committed (``write`` calls it)."""
    # One counter add per (kind, agent), not per step: a request of 60 steps has a handful.
    steps_written = Counter((step.kind, step.agent) for plan in plans for step in plan.new_steps)
    for (kind, agent), written in steps_written.items():
        metrics.record_step_written(kind, agent, written)
    for plan in plans:
        flow = plan.flow
        if plan.new_flow:
            metrics.record_flow_started(flow.trigger_type)
        if plan.closing:
            metrics.record_flow_closed(
                state=flow.flow_state,
                trigger_type=flow.trigger_type,
                outcome_type=flow.outcome_type,
                patient_safe_summary=flow.patient_safe_summary,
                step_count=flow.step_count,
                latency_ms=max(((flow.closed_at or timezone.now()) - flow.created_at).total_seconds() * 1000.0, 0.0),
            )
