"""Pages for patients: the narrative of one decision.

The page asks ``read_narrative`` (the one access rule for this audience) and shows its
answer with the same status code as the API: 200 the narrative, 202 still working,
403 a gentle message chosen by ``reason``, 404 unknown or someone else's decision.
Reads share the API's per-caller throttle (30 per 5 minutes), so the page is not a way
around it. Every page works without JavaScript.
"""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

from config.errors import NotFound
from reasoning.access import NarrativeReadThrottle, actor_for, is_operator, patient_of
from reasoning.narrative import read_narrative


@login_required
@require_safe
def narrative_page(request: HttpRequest, decision_id: str) -> HttpResponse:
    try:
        pk = uuid.UUID(decision_id)
    except ValueError:
        return _not_found(request)
    throttle = NarrativeReadThrottle()
    if not throttle.allow_request(request, None):  # type: ignore[arg-type]  # needs only .user
        response = render(request, "reasoning/narrative_throttled.html", status=429)
        wait = throttle.wait()
        if wait is not None:
            response["Retry-After"] = str(max(int(wait), 1))
        return response
    try:
        narrative = read_narrative(pk, patient=patient_of(request), actor=actor_for(request))
    except NotFound:
        return _not_found(request)

    if narrative.status == 200:
        template = "reasoning/narrative.html"
    elif narrative.status == 202:
        template = "reasoning/narrative_pending.html"
    elif narrative.body.get("reason") == "no_consent":
        template = "reasoning/narrative_no_consent.html"
    else:
        # unsafe_summary, not_patient, and any reason added later: the cautious wording.
        template = "reasoning/narrative_ask_care_team.html"
    return render(request, template, {"narrative": narrative.body}, status=narrative.status)


@login_required
@require_safe
def dashboard_home(request: HttpRequest) -> HttpResponse:
    """Where a login lands: operators on the Research Console, everyone else on their profile."""
    return redirect("research-console" if is_operator(request.user) else "patient-profile")


def _not_found(request: HttpRequest) -> HttpResponse:
    # Rendered here rather than raised: the project's 404 handler is shaped for the API.
    return render(request, "reasoning/narrative_not_found.html", status=404)
