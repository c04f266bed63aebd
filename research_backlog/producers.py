"""Producers: a closing flow whose result was weak or rejected enqueues follow-up work.

A close receiver (``reasoning.signals.register_close_receiver``): a close that calls for
production owes it in the close's own transaction, and it is done after the commit, retried
until done (``reasoning.recording.close_work``). Both flags are off by default so each side rolls out on
its own:

- RESEARCH_AUTO_ENQUEUE_ENABLED: a completed Researcher flow (``agent`` "researcher")
  whose ``outcome_metrics`` report ``evidence_hits == 0`` enqueues with reason
  ``no_evidence_hits``; otherwise ``composite_k < 0.6`` enqueues ``weak_composite_k``.
- CRITIC_AUTO_ENQUEUE_ENABLED: a completed Critic flow (``agent`` "critic") with
  ``verdict == "reject"`` acts per CRITIC_DISPATCH_STRATEGY: ``mark_for_review``
  (default) puts ``claim_id`` (or the flow's ``trigger_ref``, when it is at most 200
  characters; otherwise nothing is done and a warning is logged) in the human triage queue;
  ``re_research`` enqueues a Researcher re-run (reason ``claim_rejected``) with the
  rejection reason in the question.

A flow opened with ``dispatched_from_backlog=true`` never produces anything: it is the
result of backlog work, and re-enqueueing it would loop forever.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from reasoning.models import ReasoningFlow
from research_backlog import services
from research_backlog.models import ClaimReview, ResearchRequest

logger = logging.getLogger(__name__)

RESEARCHER_SOURCE = "researcher_auto_enqueue"
CRITIC_SOURCE = "critic_auto_enqueue"
PRODUCER_ACTOR = "system:backlog_producer"
WEAK_COMPOSITE_K = 0.6
CLAIM_ID_MAX_LENGTH = ClaimReview._meta.get_field("claim_id").max_length or 200


def _topic(flow: ReasoningFlow) -> str:
    # The trigger summary is plain English but only reused once the guard passed it.
    if flow.patient_safe_summary and flow.trigger_summary:
        return flow.trigger_summary
    return f"{flow.trigger_type} {flow.trigger_ref}".strip()


def weak_result_reason(metrics: dict[str, Any]) -> str | None:
    """``no_evidence_hits``, ``weak_composite_k`` or None for a Researcher's outcome metrics."""
    if metrics.get("evidence_hits") == 0:
        return ResearchRequest.Reason.NO_EVIDENCE_HITS
    composite_k = metrics.get("composite_k")
    if composite_k is not None and composite_k < WEAK_COMPOSITE_K:
        return ResearchRequest.Reason.WEAK_COMPOSITE_K
    return None


def produce(flow: ReasoningFlow) -> str | None:
    """Enqueue or mark what the closed flow calls for; returns what was done, or None."""
    if flow.dispatched_from_backlog or flow.flow_state != ReasoningFlow.State.COMPLETED:
        return None
    agent = flow.agent.lower()
    metrics = flow.outcome_metrics or {}
    if agent == "researcher" and settings.RESEARCH_AUTO_ENQUEUE_ENABLED:
        reason = weak_result_reason(metrics)
        if reason is None:
            return None
        finding = (
            "found no evidence"
            if reason == ResearchRequest.Reason.NO_EVIDENCE_HITS
            else f"found only weak evidence (composite_k {metrics['composite_k']:.2f})"
        )
        services.enqueue(
            trigger_type=flow.trigger_type,
            trigger_ref=flow.trigger_ref,
            question=f"Research again: {_topic(flow)}. The previous run {finding}.",
            reason=reason,
            source=RESEARCHER_SOURCE,
            actor=PRODUCER_ACTOR,
            source_flow_id=flow.pk,
        )
        return f"enqueued:{reason}"
    if agent == "critic" and settings.CRITIC_AUTO_ENQUEUE_ENABLED and metrics.get("verdict") == "reject":
        claim_id = metrics.get("claim_id") or flow.trigger_ref
        if not claim_id or len(claim_id) > CLAIM_ID_MAX_LENGTH:
            # Without an id a curator can look up, there is nothing to triage or re-research.
            logger.warning(
                "critic flow %s rejected a claim but named no usable claim id (claim_id, or a trigger_ref "
                "of at most %d characters)",
                flow.pk,
                CLAIM_ID_MAX_LENGTH,
            )
            return None
        if settings.CRITIC_DISPATCH_STRATEGY == "re_research":
            why = metrics.get("rejection_reason") or "no reason given"
            services.enqueue(
                trigger_type=flow.trigger_type,
                trigger_ref=claim_id,
                question=f"Re-research claim {claim_id}: the Critic rejected it ({why}). "
                "Find independent evidence for or against it.",
                reason=ResearchRequest.Reason.CLAIM_REJECTED,
                source=CRITIC_SOURCE,
                actor=PRODUCER_ACTOR,
                source_flow_id=flow.pk,
            )
            return "enqueued:claim_rejected"
        services.mark_claim_for_review(
            claim_id=claim_id,
            actor=PRODUCER_ACTOR,
            source=CRITIC_SOURCE,
            trigger_type=flow.trigger_type,
            source_flow_id=flow.pk,
        )
        return "marked_for_review"
    return None


def owes(flow: ReasoningFlow) -> bool:
    """Close receiver ``research_backlog.produce``: whether ``produce`` has something to do for
    the flow as closed (the settings and the flow's fields only, no query)."""
    if flow.dispatched_from_backlog or flow.flow_state != ReasoningFlow.State.COMPLETED:
        return False
    agent = flow.agent.lower()
    metrics = flow.outcome_metrics or {}
    if agent == "researcher":
        return settings.RESEARCH_AUTO_ENQUEUE_ENABLED and weak_result_reason(metrics) is not None
    if agent == "critic":
        return settings.CRITIC_AUTO_ENQUEUE_ENABLED and metrics.get("verdict") == "reject"
    return False


def perform(flow: ReasoningFlow) -> str | None:
    """Close receiver ``research_backlog.produce``: produce, in the outbox's transaction (the
    enqueue or mark audits itself); otherwise why nothing was produced (the outbox audits
    ``reasoning.research.producer_skipped`` with it)."""
    if produce(flow) is not None:
        return None
    if owes(flow):
        return "no_usable_claim_id"  # the one case where an owed production does nothing
    return "no_longer_enabled"  # the flag was switched off between the close and now
