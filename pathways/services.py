"""State changes of the pathway library, each with its audit event in one transaction."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from audit.actions import Action
from audit.services import Event, events_write, record
from core.bulk import Write, execute_writes, insert_write
from core.errors import Conflict, NotFound
from pathways.matcher import Candidate, active_client, check_query, match
from pathways.models import Pathway, PathwayHit, parent_ref
from pathways.radar import candidate_radars
from pathways.stats import LibraryOverview, PathwayStats, library_overview, pathway_stats
from reasoning.models import ReasoningFlow

if TYPE_CHECKING:
    from reasoning.signals import ClosingFlow

logger = logging.getLogger(__name__)

EXTRACTOR_ACTOR = "system:pathway_extractor"
MIN_CONFIDENCE = 0.9
QUALIFYING_OUTCOMES = frozenset({"claim_created", "recommendation_delivered"})


def disqualifier(flow: ReasoningFlow) -> str | None:
    """Why a closed flow cannot seed a pathway, or None when it qualifies."""
    if flow.flow_state != ReasoningFlow.State.COMPLETED:
        return "not_completed"
    if flow.outcome_type not in QUALIFYING_OUTCOMES:
        return "outcome_type_not_reusable"
    if flow.outcome_confidence is None:
        return "no_step_confidence"
    if flow.outcome_confidence < MIN_CONFIDENCE:
        return "low_confidence"
    if flow.patient_safe_summary is not True:
        return "summary_not_patient_safe"
    return None


# No savepoint of its own: its callers (the close work, the demo data) let an error end their
# transaction; the pathway's insert has the one a concurrent extraction needs.
@transaction.atomic(savepoint=False)
def extract_pathway(
    flow_id: uuid.UUID, *, actor: str = EXTRACTOR_ACTOR, flow: ReasoningFlow | None = None
) -> Pathway | None:
    """Turn a qualifying closed flow into a pathway; idempotent on the flow.

    Audits ``reasoning.pathway.extracted`` or ``reasoning.pathway.skipped`` (with the
    disqualifier). Returns the pathway (new or existing), or None when skipped. ``flow``: the
    flow as stored, when the caller has it (a closed flow no longer changes), else it is read.
    """
    if flow is None:
        flow = ReasoningFlow.objects.filter(pk=flow_id).first()
        if flow is None:
            raise NotFound(f"flow {flow_id} does not exist")
    # The pathway it seeded already, if any, and its steps' kinds and agents: one round trip.
    with connection.cursor() as cursor:
        cursor.execute(_SEEDED_AND_STEPS, [flow_id, flow_id, flow_id])
        existing_id, kinds, agents = cursor.fetchone()
    if existing_id is not None:
        return Pathway.objects.get(pk=existing_id)
    reason = disqualifier(flow)
    if reason is not None:
        record(Action.PATHWAY_SKIPPED, actor=actor, target=flow, payload={"disqualifier": reason})
        return None
    pathway, extracted = _seeded(flow, kinds, agents, actor)
    try:
        # The row and its audit event in one statement (not the ORM's create and a record() after
        # it); in a savepoint: a concurrent extraction of the same flow wins.
        with transaction.atomic():
            execute_writes([insert_write([pathway]), events_write([extracted])])
    except IntegrityError:
        return Pathway.objects.get(seed_flow_id=flow_id)
    pathway._state.adding = False  # stored, as save() leaves an instance
    pathway._state.db = DEFAULT_DB_ALIAS
    return pathway


def _seeded(flow: ReasoningFlow, kinds: list[str], agents: Sequence[str], actor: str) -> tuple[Pathway, Event]:
    """The pathway a qualifying flow seeds (unsaved), and its ``reasoning.pathway.extracted`` event."""
    pathway = Pathway(
        trigger_type=flow.trigger_type,
        trigger_ref=flow.trigger_ref,
        parent_ref=parent_ref(flow.trigger_ref),  # what save() derives
        step_kinds=kinds,
        agents=sorted(set(agents)),
        seed_flow=flow,
        confidence=flow.outcome_confidence or 0.0,  # not None: the qualifier checked it
    )
    extracted = Event(
        Action.PATHWAY_EXTRACTED,
        actor,
        pathway,
        {"flow_id": str(flow.pk), "trigger_type": pathway.trigger_type, "step_count": len(kinds)},
    )
    return pathway, extracted


def extraction_in_close(closing: Sequence[ClosingFlow]) -> tuple[list[Write], list[Event]]:
    """Close receiver ``pathways.extract``, in the close itself (``CloseReceiver.in_close``): the
    pathways the qualifying closing flows seed and their events, to be written by the closing
    statement. No pathway can name a flow before its close (only a completed flow seeds one), so
    there is none to look for, and the insert cannot meet a concurrent extraction."""
    seeded = [
        _seeded(flow, [fact.kind for fact in facts], [fact.agent for fact in facts], EXTRACTOR_ACTOR)
        for flow, facts in closing
    ]
    write = insert_write([pathway for pathway, _ in seeded])  # None for none
    return ([write] if write is not None else []), [event for _, event in seeded]


_SEEDED_AND_STEPS = """
SELECT (SELECT id FROM pathways_pathway WHERE seed_flow_id = %s),
       coalesce((SELECT array_agg(kind ORDER BY position) FROM reasoning_step WHERE flow_id = %s), '{}'),
       coalesce((SELECT array_agg(agent ORDER BY position) FROM reasoning_step WHERE flow_id = %s), '{}')
"""


def skip_events(flows: Sequence[ReasoningFlow]) -> list[Event]:
    """``reasoning.pathway.skipped`` for each of the closing flows that cannot seed a pathway
    (``register_close_events`` provider: recorded in the closing transaction). A flow that
    does not qualify cannot have seeded a pathway, so nothing needs reading."""
    return [
        Event(Action.PATHWAY_SKIPPED, EXTRACTOR_ACTOR, flow, {"disqualifier": reason})
        for flow in flows
        if (reason := disqualifier(flow)) is not None
    ]


def owes_extraction(flow: ReasoningFlow) -> bool:
    """Close receiver ``pathways.extract``: a qualifying flow owes an extraction (the close
    itself audited the skips of the others, see ``skip_events``)."""
    return disqualifier(flow) is None


def perform_extraction(flow: ReasoningFlow) -> str | None:
    """Close receiver ``pathways.extract``: extract, in the outbox's transaction; the extraction
    audits itself (extracted, or skipped with the disqualifier). ``flow`` is as committed (the
    closing request's own, or read by the job)."""
    extract_pathway(flow.pk, flow=flow)
    return None


# How long the operator who reused a pathway from the console may take the reuse back.
UNDO_WINDOW = timedelta(seconds=60)


def _bump(pathway_id: uuid.UUID, now: datetime) -> tuple[Pathway, datetime | None]:
    """Add one hit to a locked, active pathway; returns it and its ``last_hit_at`` before."""
    pathway = Pathway.objects.select_for_update().defer("embedding").filter(pk=pathway_id).first()
    if pathway is None:
        raise NotFound(f"pathway {pathway_id} does not exist")
    if pathway.demoted_at is not None:
        raise Conflict(f"pathway {pathway_id} is demoted ({pathway.demotion_reason}); it cannot be reused")
    previous = pathway.last_hit_at
    Pathway.objects.filter(pk=pathway_id).update(hit_count=F("hit_count") + 1, last_hit_at=now)
    pathway.hit_count += 1  # the row is locked: no one else moved it
    pathway.last_hit_at = now
    return pathway, previous


@transaction.atomic
def record_hit(pathway_id: uuid.UUID, *, actor: str, action: Action = Action.PATHWAY_MATCHED) -> Pathway:
    """A pathway was reused: bump ``hit_count`` and stamp ``last_hit_at`` (on the locked row)."""
    pathway, _ = _bump(pathway_id, timezone.now())
    record(action, actor=actor, target=pathway, payload={"hit_count": pathway.hit_count})
    return pathway


@transaction.atomic
def reuse_pathway(pathway_id: uuid.UUID, *, actor: str) -> tuple[Pathway, PathwayHit]:
    """An operator reused a pathway from the Research Console: ``record_hit`` audited as
    ``admin.reasoning.pathway.hit.proxy``, plus the hit kept so that it can be undone."""
    now = timezone.now()
    pathway, previous = _bump(pathway_id, now)
    hit = PathwayHit.objects.create(pathway=pathway, actor=actor, previous_last_hit_at=previous, created_at=now)
    record(
        Action.ADMIN_PATHWAY_HIT_PROXY,
        actor=actor,
        target=pathway,
        payload={"hit_count": pathway.hit_count},
    )
    return pathway, hit


def undo_deadline(hit: PathwayHit) -> datetime:
    return hit.created_at + UNDO_WINDOW


@transaction.atomic
def undo_reuse(hit_id: uuid.UUID, *, actor: str) -> Pathway:
    """Take back a console reuse: only its operator, only once, only within UNDO_WINDOW.

    1. Lock the pathway (every change to its hits happens under that lock, as in ``_bump``).
    2. Mark the hit undone with a conditional UPDATE; when nothing matched, say why: 404
       unknown; 409 another operator's, already undone or too late. Nothing changes then.
    3. Re-link later hits that remembered this hit as their predecessor, so undoing them
       too restores the right ``last_hit_at``.
    4. ``hit_count`` down by one; ``last_hit_at`` back to what it was when this hit was the latest.
    5. Audit ``admin.reasoning.pathway.reuse_undone`` (ids and the new count).
    """
    hit = PathwayHit.objects.filter(pk=hit_id).first()
    if hit is None:
        raise NotFound(f"reuse {hit_id} does not exist")
    pathway = Pathway.objects.select_for_update().defer("embedding").get(pk=hit.pathway_id)
    now = timezone.now()
    undone = PathwayHit.objects.filter(
        pk=hit_id, actor=actor, undone_at__isnull=True, created_at__gte=now - UNDO_WINDOW
    ).update(undone_at=now)
    if not undone:
        hit.refresh_from_db()
        if hit.actor != actor:
            raise Conflict("Only the operator who reused the pathway can undo that reuse.")
        if hit.undone_at is not None:
            raise Conflict("That reuse was already undone.")
        raise Conflict(f"Too late to undo: a reuse can be undone within {int(UNDO_WINDOW.total_seconds())} seconds.")
    PathwayHit.objects.filter(
        pathway_id=pathway.pk, created_at__gt=hit.created_at, previous_last_hit_at=hit.created_at
    ).update(previous_last_hit_at=hit.previous_last_hit_at)
    if pathway.last_hit_at == hit.created_at:
        pathway.last_hit_at = hit.previous_last_hit_at
    pathway.hit_count = max(pathway.hit_count - 1, 0)
    Pathway.objects.filter(pk=pathway.pk).update(hit_count=pathway.hit_count, last_hit_at=pathway.last_hit_at)
    record(
        Action.ADMIN_PATHWAY_REUSE_UNDONE,
        actor=actor,
        target=pathway,
        payload={"hit_id": str(hit.pk), "hit_count": pathway.hit_count},
    )
    return pathway


def undoable_hits(actor: str, pathway_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, PathwayHit]:
    """The operator's newest reuse of each given pathway that can still be undone (one query)."""
    if not pathway_ids:
        return {}
    rows = PathwayHit.objects.filter(
        pathway_id__in=pathway_ids,
        actor=actor,
        undone_at__isnull=True,
        created_at__gte=timezone.now() - UNDO_WINDOW,
    ).order_by("pathway_id", "-created_at")
    found: dict[uuid.UUID, PathwayHit] = {}
    for hit in rows:
        found.setdefault(hit.pathway_id, hit)
    return found


def ranked_candidates(
    trigger_type: str,
    trigger_ref: str,
    *,
    actor: str,
    limit: int = 10,
    action: Action = Action.PATHWAY_MATCH_REQUESTED,
) -> list[tuple[Candidate, dict[str, Any]]]:
    """Match for an operator: the ranked candidates, each with its radar, audited with the
    count and the top reason only (the API as ``reasoning.pathway.match_requested``, the
    Research Console as ``admin.reasoning.pathway.match.proxy``). Read-only: no hit."""
    check_query(trigger_type, trigger_ref)
    found = match(trigger_type, trigger_ref, client=active_client(), limit=limit)
    radars = candidate_radars([candidate.pathway for candidate in found])
    with transaction.atomic():
        record(
            action,
            actor=actor,
            payload={
                "trigger_type": trigger_type,
                "count": len(found),
                "top_reason": found[0].reason if found else None,
            },
        )
    return list(zip(found, radars, strict=True))


def read_stats(*, actor: str) -> PathwayStats:
    """``pathway_stats()`` (the API's published shape) for an operator, audited as
    ``admin.reasoning.pathway.stats_read`` with counts only (total, active; never refs)."""
    stats = pathway_stats()
    with transaction.atomic():
        record(
            Action.ADMIN_PATHWAY_STATS_READ, actor=actor, payload={"total": stats["total"], "active": stats["active"]}
        )
    return stats


def read_library_overview(*, actor: str, embedding_model: str) -> LibraryOverview:
    """The library page's ``library_overview(embedding_model)``, audited as
    ``admin.reasoning.pathway.stats_read.proxy`` with counts only (never refs)."""
    stats = library_overview(embedding_model)
    payload = {
        "total": stats["total"],
        "active": stats["active"],
        "embedded": stats["embedded"],
        "demoted": stats["demoted"]["total"],
        "needing_embedding": stats["needing_embedding"],
    }
    with transaction.atomic():
        record(Action.ADMIN_PATHWAY_STATS_READ_PROXY, actor=actor, payload=payload)
    return stats


@transaction.atomic
def demote_batch(rule: QuerySet[Pathway], ids: Sequence[object], reason: str, now: datetime, *, actor: str) -> int:
    """Demote the pathways among ``ids`` that still match ``rule`` (a decay rule's queryset),
    with ``reason``; one ``reasoning.pathway.demoted`` per row (counts and labels only).

    The rows are locked and the rule re-checked: a pathway reused (or demoted) by someone
    else since it was picked waits for that commit, then drops out here. Returns the
    number demoted.
    """
    rows = list(rule.filter(pk__in=ids).select_for_update().values("pk", "hit_count", "created_at", "trigger_type"))
    Pathway.objects.filter(pk__in=[row["pk"] for row in rows]).update(demoted_at=now, demotion_reason=reason)
    for row in rows:
        record(
            Action.PATHWAY_DEMOTED,
            actor=actor,
            target=("pathways.pathway", row["pk"]),
            payload={
                "pathway_id": str(row["pk"]),
                "reason": reason,
                "hit_count": row["hit_count"],
                "age_days": (now - row["created_at"]).days,
                "trigger_type": row["trigger_type"],
            },
        )
    return len(rows)


@transaction.atomic
def store_embeddings(vectors: Sequence[tuple[uuid.UUID, Sequence[float]]], *, model_name: str, actor: str) -> int:
    """Write one batch of ``(pathway id, vector)`` pairs computed with ``model_name``, and
    audit it as ``reasoning.pathway.embeddings_stored`` with the counts. The vectors are
    computed by the caller, outside any transaction. Returns the number of rows written."""
    written = 0
    for pk, vector in vectors:
        written += Pathway.objects.filter(pk=pk).update(embedding=vector, embedding_model=model_name)
    record(
        Action.PATHWAY_EMBEDDINGS_STORED,
        actor=actor,
        payload={"model": model_name, "batch": len(vectors), "embedded": written},
    )
    return written
