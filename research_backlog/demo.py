"""Demo rows for ``load_demo``: research requests (pending, dispatched, completed, failed) and
claims waiting for review."""

from __future__ import annotations

from reasoning.models import ReasoningFlow
from research_backlog import services
from research_backlog.models import ClaimReview, ResearchRequest

DEMO_ACTOR = "system:demo"
QUESTIONS = [
    ("user_question", "demo/researcher/bp-over-80", "Which guideline covers blood pressure targets after 80?"),
    ("user_question", "demo/researcher/sleep", "Is there evidence linking short sleep to morning readings?"),
    ("claim_review", "demo/critic/claim-7", "Find independent sources for the drafted exercise claim."),
    ("correlation_scan", "demo/correlator/steps", "Do activity and sleep trends move together across weeks?"),
]


def load_demo_data() -> str:
    """Idempotent: does nothing once the demo actor has requests."""
    if ResearchRequest.objects.filter(requested_by=DEMO_ACTOR).exists():
        return "research backlog already loaded"
    for trigger_type, trigger_ref, question in QUESTIONS:
        services.enqueue(
            trigger_type=trigger_type,
            trigger_ref=trigger_ref,
            question=question,
            reason=ResearchRequest.Reason.OPERATOR_REQUESTED,
            source="demo",
            actor=DEMO_ACTOR,
        )
    done = services.pull_next(actor=DEMO_ACTOR)
    failed = services.pull_next(actor=DEMO_ACTOR)
    services.pull_next(actor=DEMO_ACTOR)  # stays dispatched
    result = ReasoningFlow.objects.completed().filter(trace_id__startswith="demo-trace-").first()
    if done:
        services.complete(done.pk, actor=DEMO_ACTOR, flow_id=result.pk if result else None)
    if failed:
        services.complete(failed.pk, actor=DEMO_ACTOR, error="no_sources_found")
    for number in (1, 2, 3):
        entry, _ = services.mark_claim_for_review(
            claim_id=f"demo-claim-{number}", actor=DEMO_ACTOR, source="critic_auto_enqueue", trigger_type="claim_review"
        )
        if number == 3 and entry.status == ClaimReview.Status.PENDING:
            note = "Duplicate of demo-claim-1."
            services.resolve_claim_review(entry.pk, status="dismissed", note=note, actor=DEMO_ACTOR)
    return "4 research requests (pending, dispatched, completed, failed) and 3 claims for review"
