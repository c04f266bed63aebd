"""The Research Console's pathway panels: candidates, the comparison radar, reuse.

The console page itself lives in ``research_backlog`` and composes its panels through
``core.panels`` (registered in ``PathwaysConfig.ready``), so it never imports this app:

- candidates: submit (trigger_type, trigger_ref) → ranked pathways with score, reason,
  hit count, an inline radar, a link to the seed flow and its step summaries; "Reuse
  pathway" records a hit pinned to the operator, which that operator may undo for
  ``services.UNDO_WINDOW``; ticking two candidates opens the comparison radar (a third is
  refused: two at a time); when no candidate clears REUSE_THRESHOLD, the panel offers the
  backlog's "Trigger deeper research" form.

Each panel is also its own URL, so htmx can refresh or replace it after an action; every
action is a plain form that redirects back when htmx is not there. Operators only.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from audit.actions import Action
from core.access import operator_required
from core.actors import actor_for
from core.errors import Conflict, InvalidInput, NotFound
from core.pages import back, is_htmx
from core.panels import PANEL_STATUS
from pathways import services
from pathways.matcher import check_query
from pathways.models import Pathway, PathwayHit
from pathways.radar import candidate_radars
from reasoning.models import ReasoningStep

CONSOLE_PAGE = "research-console"
# A candidate at or above this score is worth reusing as is (a prefix_ref match, or a
# strong semantic one); below it, the console offers deeper research instead.
REUSE_THRESHOLD = 0.7
CANDIDATE_LIMIT = 10
COMPARE_FIELD = "compare"
COMPARE_LIMIT_MESSAGE = "Compare two at a time: untick one first."


def console_url(trigger_type: str = "", trigger_ref: str = "") -> str:
    url = reverse(CONSOLE_PAGE)
    if trigger_type:
        url += "?" + urlencode({"trigger_type": trigger_type, "trigger_ref": trigger_ref})
    return url


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
    ranked = services.ranked_candidates(
        query["trigger_type"],
        query["trigger_ref"],
        actor=actor_for(request),
        limit=CANDIDATE_LIMIT,
        action=Action.ADMIN_PATHWAY_MATCH_PROXY,
    )
    pathways = [c.pathway for c, _ in ranked]
    steps = seed_steps(pathways)
    undoable = services.undoable_hits(actor_for(request), [p.pk for p in pathways])
    candidates = [
        {
            "rank": rank,
            "candidate": c,
            "pathway": c.pathway,
            "dimensions": radar,
            "steps": steps.get(c.pathway.seed_flow_id, []),
            "undo_hit": undoable.get(c.pathway.pk),
        }
        for rank, (c, radar) in enumerate(ranked, start=1)
    ]
    strong = any(c.score >= REUSE_THRESHOLD for c, _ in ranked)
    return {
        "query": query,
        "searched": True,
        "candidates": candidates,
        # The boxes of a comparison shown on load stay ticked, so one can be unticked.
        "ticked": set(request.GET.getlist(COMPARE_FIELD)),
        "strong": strong,
        "threshold": REUSE_THRESHOLD,
        "suggested_question": (
            f"Find evidence for {query['trigger_type']} {query['trigger_ref']}".strip()
            + f": no pathway in the library scores {REUSE_THRESHOLD} or more."
        ),
        "console_url": console_url(query["trigger_type"], query["trigger_ref"]),
    }


def seed_steps(pathways: list[Pathway]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The step summaries of every candidate's seed flow, in order, in one query. Seeds
    passed the summary guard (a flow only seeds a pathway when every summary did)."""
    rows = (
        ReasoningStep.objects.filter(flow_id__in=[p.seed_flow_id for p in pathways])
        .order_by("flow_id", "position")
        .values("flow_id", "position", "kind", "agent", "summary_text")
    )
    steps: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for row in rows:
        steps.setdefault(row["flow_id"], []).append(dict(row))
    return steps


def _comparison_context(request: HttpRequest) -> dict[str, Any]:
    raw = request.GET.getlist(COMPARE_FIELD)
    if not raw:
        return {}
    if len(raw) > 2:
        # The page stops a third tick; a request that still carries one is refused, not trimmed.
        return {"comparison_error": COMPARE_LIMIT_MESSAGE, "comparison_field": COMPARE_FIELD, PANEL_STATUS: 400}
    if len(raw) != 2:
        # One tick is half-way there, not a mistake: a note, and the page does not move.
        return {"comparison_note": "Tick one more candidate to compare the two."}
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


def console_panels(request: HttpRequest) -> dict[str, Any]:
    """The candidates and comparison panels of the full console page (``core.panels``)."""
    query = _query(request)
    context = {**_candidates_context(request, query), **_comparison_context(request)}
    if query["error"]:
        context[PANEL_STATUS] = 400
    return context


@operator_required
@require_safe
def candidates_partial(request: HttpRequest) -> HttpResponse:
    """A new search: the candidates, an emptied comparison panel (out of band), and the
    console's own address with the query in the browser's history, so a reload or a
    shared link shows the same candidates."""
    query = _query(request)
    context = {**_candidates_context(request, query), "fresh_search": True}
    response = render(request, "pathways/_candidates.html", context)
    if not query["error"]:
        response["HX-Push-Url"] = console_url(query["trigger_type"], query["trigger_ref"])
    return response


@operator_required
@require_safe
def comparison_partial(request: HttpRequest) -> HttpResponse:
    context = _comparison_context(request)
    return render(request, "pathways/_comparison.html", context, status=context.pop(PANEL_STATUS, 200))


def _reuse_fragment(request: HttpRequest, pathway: Pathway, *, status: int = 200, **context: Any) -> HttpResponse:
    """The candidate's reuse actions (and, out of band, its hit count) after an action."""
    context = {"pathway": pathway, "oob": True, **context}
    return render(request, "pathways/_reuse.html", context, status=status)


@operator_required
@require_POST
def reuse_pathway(request: HttpRequest, pathway_id: uuid.UUID) -> HttpResponse:
    """Record a reuse (hit) pinned to the operator: ``admin.reasoning.pathway.hit.proxy``.
    The answer offers Undo for the next minute."""
    pk = pathway_id
    try:
        pathway, hit = services.reuse_pathway(pk, actor=actor_for(request))
    except NotFound:
        raise Http404("No such pathway.") from None
    except Conflict:
        if is_htmx(request):
            return render(request, "pathways/_reuse.html", {"demoted": True, "pathway_id": pk}, status=409)
        messages.error(request, "That pathway was demoted and can no longer be reused.")
        return back(request, CONSOLE_PAGE)
    if is_htmx(request):
        return _reuse_fragment(request, pathway, undo_hit=hit, reused=True)
    messages.success(
        request, f"Reused the pathway: it now has {pathway.hit_count} reuses. Undo it from its card within a minute."
    )
    return back(request, CONSOLE_PAGE)


@operator_required
@require_POST
def undo_reuse(request: HttpRequest, hit_id: uuid.UUID) -> HttpResponse:
    """Take back the operator's own reuse within a minute (``admin.reasoning.pathway.reuse_undone``);
    409 when it is another operator's, already undone or too late, and then nothing changes."""
    try:
        pathway = services.undo_reuse(hit_id, actor=actor_for(request))
    except NotFound:
        raise Http404("No such reuse.") from None
    except Conflict as exc:
        hit = PathwayHit.objects.select_related("pathway").get(pk=hit_id)
        if is_htmx(request):
            return _reuse_fragment(request, hit.pathway, status=exc.status_code, problem=exc.detail)
        messages.error(request, exc.detail)
        return back(request, CONSOLE_PAGE)
    if is_htmx(request):
        return _reuse_fragment(request, pathway, undone=True)
    messages.success(request, f"Reuse undone: the pathway is back to {pathway.hit_count} reuses.")
    return back(request, CONSOLE_PAGE)
