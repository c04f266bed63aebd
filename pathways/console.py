"""The Research Console's pathway panels: candidates, the comparison radar, reuse.

The console page itself lives in ``research_backlog`` and composes its panels through
``core.panels`` (registered in ``PathwaysConfig.ready``), so it never imports this app:

- candidates: submit (trigger_type, trigger_ref) → ranked pathways with score, reason,
  hit count and an inline radar; "Reuse pathway" records a hit pinned to the operator;
  ticking two candidates opens the comparison radar; when no candidate clears
  REUSE_THRESHOLD, the panel offers the backlog's "Trigger deeper research" form.

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
from pathways.models import Pathway
from pathways.radar import candidate_radars

CONSOLE_PAGE = "research-console"
# A candidate at or above this score is worth reusing as is (a prefix_ref match, or a
# strong semantic one); below it, the console offers deeper research instead.
REUSE_THRESHOLD = 0.7
CANDIDATE_LIMIT = 10


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
        "console_url": console_url(query["trigger_type"], query["trigger_ref"]),
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
    return render(request, "pathways/_comparison.html", _comparison_context(request))


@operator_required
@require_POST
def reuse_pathway(request: HttpRequest, pathway_id: uuid.UUID) -> HttpResponse:
    """Record a reuse (hit) pinned to the operator: ``admin.reasoning.pathway.hit.proxy``."""
    pk = pathway_id
    try:
        pathway = services.record_hit(pk, actor=actor_for(request), action=Action.ADMIN_PATHWAY_HIT_PROXY)
    except NotFound:
        raise Http404("No such pathway.") from None
    except Conflict:
        if is_htmx(request):
            return render(request, "pathways/_hits.html", {"demoted": True, "pathway_id": pk}, status=409)
        messages.error(request, "That pathway was demoted and can no longer be reused.")
        return back(request, CONSOLE_PAGE)
    if is_htmx(request):
        return render(request, "pathways/_hits.html", {"pathway": pathway, "reused": True})
    messages.success(request, f"Reused the pathway: it now has {pathway.hit_count} reuses.")
    return back(request, CONSOLE_PAGE)
