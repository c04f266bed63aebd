"""The Research Console: the operators' workbench for the knowledge base.

One page, made of panels that are each their own template and URL, so htmx can refresh
or replace one panel after an action:

- candidates: submit (trigger_type, trigger_ref) → ranked pathways with score, reason,
  hit count and an inline radar; "Reuse pathway" records a hit pinned to the operator;
  ticking two candidates opens the comparison radar; when no candidate clears
  REUSE_THRESHOLD, "Trigger deeper research" queues a backlog request;
- backlog: status chips, oldest waits, recent failures and the loop-health pill;
- reviews: claims pending review with Resolve / Dismiss (and a note), and the strip
  of the last day's resolutions.

Reading works without JavaScript: every action is a plain form that redirects back
(POST/redirect/GET) when htmx is not there. Operators only (``operator_required``).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST, require_safe

from audit.actions import Action
from config.errors import Conflict, InvalidInput, NotFound
from pathways import services as pathway_services
from pathways.matcher import check_query
from pathways.models import Pathway
from pathways.radar import candidate_radars
from patients.access import user_actor
from reasoning.access import operator_required
from research_backlog import services
from research_backlog.api import DeeperRequestSerializer, ResolveClaimSerializer
from research_backlog.models import ClaimReview

# A candidate at or above this score is worth reusing as is (a prefix_ref match, or a
# strong semantic one); below it, the console offers deeper research instead.
REUSE_THRESHOLD = 0.7
CANDIDATE_LIMIT = 10
REVIEW_LIMIT = 50


def _actor(request: HttpRequest) -> str:
    return user_actor(request.user)


def _is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def _console_url(trigger_type: str = "", trigger_ref: str = "") -> str:
    url = reverse("research-console")
    if trigger_type:
        url += "?" + urlencode({"trigger_type": trigger_type, "trigger_ref": trigger_ref})
    return url


def _back(request: HttpRequest) -> HttpResponse:
    """Back to where the form was (only a path on this site), else the console."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect("research-console")


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "none waiting"
    span = timedelta(seconds=int(seconds))
    if span < timedelta(minutes=1):
        return f"{span.seconds} s"
    if span < timedelta(hours=1):
        return f"{span.seconds // 60} min"
    if span < timedelta(days=1):
        return f"{span.seconds // 3600} h {span.seconds % 3600 // 60} min"
    return f"{span.days} d {span.seconds // 3600} h"


# --- Candidates ---------------------------------------------------------------------


def _query(request: HttpRequest) -> dict[str, Any]:
    trigger_type = request.GET.get("trigger_type", "").strip()
    trigger_ref = request.GET.get("trigger_ref", "").strip()
    query: dict[str, Any] = {"trigger_type": trigger_type, "trigger_ref": trigger_ref, "error": None}
    if trigger_type or "trigger_type" in request.GET:
        try:
            check_query(trigger_type, trigger_ref)
        except InvalidInput as exc:
            query["error"] = {"field": exc.field, "message": exc.detail}
    return query


def _candidates_context(request: HttpRequest, query: dict[str, Any]) -> dict[str, Any]:
    """Ranked candidates with radars, audited as the operator's match (counts only)."""
    if not query["trigger_type"] or query["error"]:
        return {"query": query, "searched": False}
    ranked = pathway_services.ranked_candidates(
        query["trigger_type"],
        query["trigger_ref"],
        actor=_actor(request),
        limit=CANDIDATE_LIMIT,
        action=Action.ADMIN_PATHWAY_MATCH_PROXY,
    )
    candidates = [
        {"rank": rank, "candidate": c, "pathway": c.pathway, "dimensions": radar}
        for rank, (c, radar) in enumerate(ranked, start=1)
    ]
    strong = any(c.score >= REUSE_THRESHOLD for c, _ in ranked)
    return {
        "query": query,
        "searched": True,
        "candidates": candidates,
        "strong": strong,
        "threshold": REUSE_THRESHOLD,
        "suggested_question": (
            f"Find evidence for {query['trigger_type']} {query['trigger_ref']}".strip()
            + f": no pathway in the library scores {REUSE_THRESHOLD} or more."
        ),
        "console_url": _console_url(query["trigger_type"], query["trigger_ref"]),
    }


def _comparison_context(request: HttpRequest) -> dict[str, Any]:
    raw = request.GET.getlist("compare")
    if not raw:
        return {}
    if len(raw) != 2:
        return {"comparison_error": "Tick exactly two candidates to compare them."}
    try:
        ids = [uuid.UUID(value) for value in raw]
    except ValueError:
        return {"comparison_error": "Those candidates do not exist."}
    by_id = {p.pk: p for p in Pathway.objects.filter(pk__in=ids)}
    if len(by_id) != 2:
        return {"comparison_error": "Tick two different candidates that exist."}
    first, second = by_id[ids[0]], by_id[ids[1]]
    radar_a, radar_b = candidate_radars([first, second])
    return {
        "comparison": {
            "a": radar_a,
            "b": radar_b,
            "name_a": first.trigger_ref or first.trigger_type,
            "name_b": second.trigger_ref or second.trigger_type,
        }
    }


@operator_required
@require_safe
def candidates_partial(request: HttpRequest) -> HttpResponse:
    """A new search: the candidates, an emptied comparison panel (out of band), and the
    console's own address with the query in the browser's history, so a reload or a
    shared link shows the same candidates."""
    query = _query(request)
    context = {**_candidates_context(request, query), "fresh_search": True}
    response = render(request, "research_backlog/_candidates.html", context)
    if not query["error"]:
        response["HX-Push-Url"] = _console_url(query["trigger_type"], query["trigger_ref"])
    return response


@operator_required
@require_safe
def comparison_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "research_backlog/_comparison.html", _comparison_context(request))


@operator_required
@require_POST
def reuse_pathway(request: HttpRequest, pathway_id: str) -> HttpResponse:
    """Record a reuse (hit) pinned to the operator: ``admin.reasoning.pathway.hit.proxy``."""
    try:
        pk = uuid.UUID(pathway_id)
        pathway = pathway_services.record_hit(pk, actor=_actor(request), action=Action.ADMIN_PATHWAY_HIT_PROXY)
    except (ValueError, NotFound):
        raise Http404("No such pathway.") from None
    except Conflict:
        if _is_htmx(request):
            return render(request, "research_backlog/_hits.html", {"demoted": True, "pathway_id": pk}, status=409)
        messages.error(request, "That pathway was demoted and can no longer be reused.")
        return _back(request)
    if _is_htmx(request):
        return render(request, "research_backlog/_hits.html", {"pathway": pathway, "reused": True})
    messages.success(request, f"Reused the pathway: it now has {pathway.hit_count} reuses.")
    return _back(request)


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
        if _is_htmx(request):
            problem_context = {"errors": errors, "form": request.POST, "query": request.POST}
            return render(request, "research_backlog/_deeper_research.html", problem_context, status=400)
        for field, message in errors.items():
            messages.error(request, f"{field}: {message}")
        return _back(request)
    data = body.validated_data
    row = services.request_deeper_research(
        trigger_type=data["trigger_type"],
        trigger_ref=data.get("trigger_ref", ""),
        question=data["question"],
        actor=_actor(request),
    )
    if _is_htmx(request):
        context: dict[str, Any] = {"queued": row, **_backlog_context(request)}
        return render(request, "research_backlog/_deeper_research_queued.html", context)
    messages.success(request, "Deeper research requested: it is in the backlog as pending.")
    return _back(request)


# --- Backlog ------------------------------------------------------------------------


def _backlog_context(request: HttpRequest) -> dict[str, Any]:
    report = services.read_backlog_status(actor=_actor(request), action=Action.ADMIN_RESEARCH_BACKLOG_READ_PROXY)
    return {
        "backlog": report,
        "oldest_pending": age_text(report["oldest_pending_age_seconds"]),
        "oldest_dispatched": age_text(report["oldest_dispatched_age_seconds"]),
    }


@operator_required
@require_safe
def backlog_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "research_backlog/_backlog.html", _backlog_context(request))


# --- Claims pending review ----------------------------------------------------------


def _reviews_context(request: HttpRequest) -> dict[str, Any]:
    return {"reviews": services.read_review_queue(actor=_actor(request), limit=REVIEW_LIMIT)}


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
                pk, status=body.validated_data["status"], note=body.validated_data["note"], actor=_actor(request)
            )
            problem = ""
        except NotFound:
            raise Http404("No such claim review.") from None
        except Conflict:
            problem = "Someone already resolved or dismissed that claim."
            status = 409
    if _is_htmx(request):
        context = {**_reviews_context(request), "problem": problem}
        return render(request, "research_backlog/_reviews.html", context, status=status)
    if problem:
        messages.error(request, problem)
    else:
        done = "Resolved" if body.validated_data["status"] == ClaimReview.Status.RESOLVED else "Dismissed"
        messages.success(request, f"{done} the claim.")
    return _back(request)


# --- The page -----------------------------------------------------------------------


@operator_required
@require_safe
def console_page(request: HttpRequest) -> HttpResponse:
    query = _query(request)
    context = {
        **_candidates_context(request, query),
        **_comparison_context(request),
        **_backlog_context(request),
        **_reviews_context(request),
        "here": request.get_full_path(),
    }
    return render(request, "research_backlog/console.html", context, status=400 if query["error"] else 200)
