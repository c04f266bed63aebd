"""The Research Console: the operators' workbench for the knowledge base.

One page, made of panels that are each their own template and URL, so htmx can refresh
or replace one panel after an action. Each panel lives in the app that owns its data:

- candidates and comparison (``pathways.console``, registered through ``core.panels``):
  ranked pathways with radars, "Reuse pathway", the comparison radar; when no candidate
  clears the reuse threshold it offers this app's "Trigger deeper research" form;
- backlog (here): status chips, oldest waits, recent failures and the loop-health pill;
- reviews (here): claims pending review (the guard-checked summary of the claim, the
  Critic's reason, a link to the source flow) with Resolve / Dismiss and a note, and the
  last day's resolutions with their notes.

Reading works without JavaScript: every action is a plain form that redirects back
(POST/redirect/GET) when htmx is not there. Operators only (``operator_required``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST, require_safe

from audit.actions import Action
from core.access import operator_required
from core.actors import actor_for
from core.errors import Conflict, NotFound
from core.pages import back, is_htmx
from core.panels import page_context
from core.templatetags.durations import format_duration
from research_backlog import services
from research_backlog.models import ClaimReview
from research_backlog.serializers import DeeperRequestSerializer, ResolveClaimSerializer

CONSOLE_PAGE = "research-console"
REVIEW_LIMIT = 50


def _age(seconds: float | None) -> str:
    return "none waiting" if seconds is None else format_duration(seconds, "coarse")


# --- Candidates ---------------------------------------------------------------------


# --- Deeper research (offered by the pathway candidates panel) ----------------------


@operator_required
@require_POST
def trigger_deeper_research(request: HttpRequest) -> HttpResponse:
    body = DeeperRequestSerializer(
        data={
            "trigger_type": request.POST.get("trigger_type", ""),
            "trigger_ref": request.POST.get("trigger_ref", ""),
            "question": request.POST.get("question", "").strip(),
        }
    )
    if not body.is_valid():
        errors = {field: " ".join(str(m) for m in msgs) for field, msgs in body.errors.items()}
        if is_htmx(request):
            problem_context = {"errors": errors, "form": request.POST, "query": request.POST}
            return render(request, "research_backlog/_deeper_research.html", problem_context, status=400)
        for field, message in errors.items():
            messages.error(request, f"{field}: {message}")
        return back(request, CONSOLE_PAGE)
    data = body.validated_data
    row = services.request_deeper_research(
        trigger_type=data["trigger_type"],
        trigger_ref=data.get("trigger_ref", ""),
        question=data["question"],
        actor=actor_for(request),
    )
    if is_htmx(request):
        context: dict[str, Any] = {"queued": row, **_backlog_context(request)}
        return render(request, "research_backlog/_deeper_research_queued.html", context)
    messages.success(request, "Deeper research requested: it is in the backlog as pending.")
    return back(request, CONSOLE_PAGE)


# --- Backlog ------------------------------------------------------------------------


def _backlog_context(request: HttpRequest) -> dict[str, Any]:
    report = services.read_backlog_status(actor=actor_for(request), action=Action.ADMIN_RESEARCH_BACKLOG_READ_PROXY)
    return {
        "backlog": report,
        "oldest_pending": _age(report["oldest_pending_age_seconds"]),
        "oldest_dispatched": _age(report["oldest_dispatched_age_seconds"]),
    }


@operator_required
@require_safe
def backlog_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "research_backlog/_backlog.html", _backlog_context(request))


# --- Claims pending review ----------------------------------------------------------


@dataclass(frozen=True)
class ClaimCard:
    """What a curator reads about a claim. ClaimReview stores no claim text; what there is
    comes from the Critic's flow, and its summaries only when the summary guard passed them."""

    entry: ClaimReview
    claim_text: str  # the flow's trigger summary, guard-checked; "" when there is none to show
    finding: str  # the flow's outcome summary, guard-checked
    withheld: str  # why the text is not shown, when it is not
    critic_reason: str  # a label: the Critic's rejection_reason, else the entry's reason

    @property
    def flow_id(self) -> uuid.UUID | None:
        return self.entry.source_flow_id


def claim_card(entry: ClaimReview) -> ClaimCard:
    flow = entry.source_flow
    metrics = (flow.outcome_metrics or {}) if flow else {}
    # rejection_reason is validated as a label when the outcome is recorded: never free text.
    reason = metrics.get("rejection_reason")
    critic_reason = reason if isinstance(reason, str) and reason else entry.reason
    if flow is None:
        return ClaimCard(entry, "", "", "No source flow was recorded for this claim.", critic_reason)
    if flow.patient_safe_summary is not True:
        why = (
            "The source flow's summaries did not pass the summary guard, so they are not shown."
            if flow.patient_safe_summary is False
            else "The source flow is not closed yet: its summaries have not been guard-checked."
        )
        return ClaimCard(entry, "", "", why, critic_reason)
    withheld = "" if flow.trigger_summary else "The source flow recorded no summary of the claim."
    return ClaimCard(entry, flow.trigger_summary, flow.outcome_summary, withheld, critic_reason)


def _reviews_context(request: HttpRequest) -> dict[str, Any]:
    queue = services.read_review_queue(actor=actor_for(request), limit=REVIEW_LIMIT)
    return {"reviews": queue, "claim_cards": [claim_card(entry) for entry in queue["pending"]]}


@operator_required
@require_safe
def reviews_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "research_backlog/_reviews.html", _reviews_context(request))


@operator_required
@require_POST
def resolve_review(request: HttpRequest, review_id: str) -> HttpResponse:
    """Resolve or dismiss a pending claim (with an optional note); 409 when already done."""
    try:
        pk = uuid.UUID(review_id)
    except ValueError:
        raise Http404("No such claim review.") from None
    body = ResolveClaimSerializer(data={"status": request.POST.get("status", ""), "note": request.POST.get("note", "")})
    status = 200
    if not body.is_valid():
        problem = "Choose Resolve or Dismiss, and keep the note under 2000 characters."
        status = 400
    else:
        try:
            services.resolve_claim_review(
                pk, status=body.validated_data["status"], note=body.validated_data["note"], actor=actor_for(request)
            )
            problem = ""
        except NotFound:
            raise Http404("No such claim review.") from None
        except Conflict:
            problem = "Someone already resolved or dismissed that claim."
            status = 409
    if is_htmx(request):
        context = {**_reviews_context(request), "problem": problem}
        return render(request, "research_backlog/_reviews.html", context, status=status)
    if problem:
        messages.error(request, problem)
    else:
        done = "Resolved" if body.validated_data["status"] == ClaimReview.Status.RESOLVED else "Dismissed"
        messages.success(request, f"{done} the claim.")
    return back(request, CONSOLE_PAGE)


# --- The page -----------------------------------------------------------------------


@operator_required
@require_safe
def console_page(request: HttpRequest) -> HttpResponse:
    """The whole console: the panels other apps register (``core.panels``: the pathway
    candidates and comparison) and this app's backlog and review panels."""
    panels, status = page_context(CONSOLE_PAGE, request)
    context = {
        **panels,
        **_backlog_context(request),
        **_reviews_context(request),
        "here": request.get_full_path(),
    }
    return render(request, "research_backlog/console.html", context, status=status)
