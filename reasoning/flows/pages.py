"""The flow pages: the patient's narrative of one decision; the operators' flow list and flow page.

The narrative page asks ``read_narrative`` (the one access rule for this audience) and
shows its answer with the same status code as the API: 200 the narrative, 202 still
working, 403 a gentle message chosen by ``reason``, 404 unknown or someone else's
decision. Reads share the API's throttle (30 per 5 minutes per caller and per patient,
``NARRATIVE_RATE_LIMIT``), so the page is not a way around it. The flow page is for
operators (``operator_required``) and reads through ``read_flow_page_for_admin``. Every page
works without JavaScript.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from core.access import operator_required
from core.actors import actor_for
from core.api_views import parse_instant
from core.errors import InvalidInput, NotFound
from core.pages import time_range_values, with_time_range
from core.templatetags.durations import format_duration
from reasoning import summary_guard
from reasoning.access import NarrativeReadThrottle, patient_of
from reasoning.dimensions import is_radar
from reasoning.flows import dag, waterfall
from reasoning.flows.access_report import access_report
from reasoning.flows.search import FlowSearch, flow_row
from reasoning.flows.serializers import step_content
from reasoning.flows.services import FlowStepsPage, list_decisions, read_flow_page_for_admin, read_narrative
from reasoning.models import ReasoningFlow
from reasoning.turns.graph import turn_flow_count


@login_required
@require_safe
def narrative_page(request: HttpRequest, decision_id: uuid.UUID) -> HttpResponse:
    pk = decision_id
    throttle = NarrativeReadThrottle()
    if not throttle.allow_request(request, None):
        response = render(request, "reasoning/narrative_throttled.html", status=429)
        response["Retry-After"] = str(throttle.retry_after or 1)
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


DECISION_STATUS = {
    "ready": "Ready to read",
    "in_progress": "Still working on this",
    "ask_care_team": "Please ask your care team about this one",
    "stopped": "Stopped before a decision: nothing was recommended",
}


def your_decisions_panel(request: HttpRequest) -> dict[str, Any]:
    """The profile's "Your decisions" panel: the logged-in patient's own decisions, newest first."""
    patient = patient_of(request)
    if patient is None:
        return {}
    rows = list_decisions(patient, actor=actor_for(request))
    return {
        "your_decisions": [
            {"row": row, "status": DECISION_STATUS[row.status], "readable": patient.reasoning_read_consent}
            for row in rows
        ]
    }


def _not_found(request: HttpRequest) -> HttpResponse:
    # Rendered here rather than raised: the project's 404 handler is shaped for the API.
    return render(request, "reasoning/narrative_not_found.html", status=404)


PAGE_NUMBER = re.compile(r"[1-9][0-9]{0,8}")


BACK_REFS = (
    ("llm_call_log_ref", "LLM call log"),
    ("experiment_trace_ref", "Experiment trace"),
    ("decision_graph_node_ref", "Decision graph node"),
    ("memory_claim_ref", "Memory claim"),
    ("span_id", "Span"),
)


@operator_required
@require_safe
def admin_flow_page(request: HttpRequest, flow_id: uuid.UUID) -> HttpResponse:
    """A flow's header, metadata and radar; one page (100 steps) of its graph and timeline.

    The graph holds the page's steps only; a parent on an earlier page is a labelled
    stub linking to it. A malformed ``?page``, an unknown flow or a page past the last
    renders the 404 page (a malformed id matches no route: ``templates/404.html``).
    """
    raw_page = request.GET.get("page", "1")
    pk = flow_id
    if not PAGE_NUMBER.fullmatch(raw_page):
        return _flow_not_found(request)
    # Content and raw reasoning only on request (?content=1, ?reasoning=1) and only with the
    # permission; otherwise the page shows keys and counts, as it does by default.
    may = {
        "content": request.user.has_perm("reasoning.read_step_content"),
        "reasoning": request.user.has_perm("reasoning.read_step_reasoning"),
    }
    shown = {name: allowed and request.GET.get(name) == "1" for name, allowed in may.items()}
    try:
        read = read_flow_page_for_admin(
            pk,
            actor=actor_for(request),
            page=int(raw_page),
            include_content=shown["content"],
            include_reasoning=shown["reasoning"],
        )
    except NotFound:
        return _flow_not_found(request)

    flow = read.flow
    blocked = flow.patient_safe_summary is False
    steps = [_timeline_entry(step, read, check_guard=blocked) for step in read.steps]
    last_position = read.first_position + len(steps) - 1
    now = timezone.now()
    context = {
        "flow": flow,
        "blocked": blocked,
        "blocked_steps": [step for step in steps if step["guard_rule"]],
        "waterfall": waterfall.layout(flow.created_at, flow.closed_at or now, steps) if steps else None,
        "radar": is_radar(flow.dimensions_snapshot),
        "duration": format_duration((flow.closed_at or now) - flow.created_at),
        "steps": steps,
        "graph": _graph(read, steps),
        "box": {"width": dag.NODE_WIDTH, "height": dag.NODE_HEIGHT},
        "page": read.page,
        "page_count": read.page_count,
        "first_position": read.first_position if steps else 0,
        "last_position": last_position if steps else 0,
        "turn_flows": turn_flow_count(flow.trace_id),
        "may": may,
        "shown": shown,
        "toggles": {name: _toggle_href(read.page, shown, name) for name in shown},
    }
    return render(request, "reasoning/admin_flow.html", context)


def _toggle_href(page: int, shown: dict[str, bool], name: str) -> str:
    """This page of steps with ``name`` (content or reasoning) switched, the other kept as it is."""
    params = {"page": str(page)} if page > 1 else {}
    params |= {key: "1" for key, on in shown.items() if on != (key == name)}
    return "?" + urlencode(params) if params else "?"


FLOW_LIST_PAGE = 50


GUARD_CHOICES = [("", "any"), ("safe", "safe for patients"), ("blocked", "blocked (any rule)")] + [
    (f"blocked:{rule}", f"blocked: {rule}") for rule in summary_guard.RULES
]


STATE_CHOICES = [("", "any"), *((state, state) for state in ReasoningFlow.State.values)]


PERIOD_CHOICES = [("", "any time"), ("1h", "last hour"), ("24h", "last 24 h"), ("7d", "last 7 days")]


SORT_CHOICES = [
    ("newest", "newest"),
    ("duration", "longest"),
    ("steps", "most steps"),
    ("confidence", "lowest confidence"),
    ("cost", "highest cost"),
    ("tokens", "most tokens"),
]


PATIENT_CHOICES = [("", "any"), ("true", "with a patient"), ("false", "without")]


FAILED_CHOICES = [("", "any"), ("true", "with a failed step"), ("false", "without")]


@operator_required
@require_safe
def admin_flow_list_page(request: HttpRequest) -> HttpResponse:
    """The operators' flow list: the admin flow route's search (``reasoning.flows.search``) as a
    page. The filters live in the URL with the API's parameter names, so a reload or a shared
    link shows the same list; an htmx request (the form as it changes) gets the results only.
    Not audited, like the route: it shows metadata, never a step's text."""
    error: str | None = None
    try:
        search = FlowSearch.parse(with_time_range(request.GET))
    except InvalidInput as exc:
        error = f"{exc.field}: {exc.detail}" if exc.field else exc.detail
        search = FlowSearch()
    flows, next_cursor = search.page(FLOW_LIST_PAGE)
    now = timezone.now()
    context = {
        "search": search,
        "values": search.params(cursor=""),
        "range": time_range_values(search.created_after, search.created_before),
        "error": error,
        "flows": [flow_row(flow, now) for flow in flows],
        "summary_url": reverse("admin-flow-list-summary") + "?" + urlencode(search.params(cursor="", sort="newest")),
        "now": now,
        "next_url": "?" + urlencode(search.params(cursor=next_cursor)) if next_cursor else None,
        "first_url": "?" + urlencode(search.params(cursor="")) if search.cursor else None,
        "choices": {
            "flow_state": STATE_CHOICES,
            "guard": GUARD_CHOICES,
            "period": PERIOD_CHOICES,
            "sort": SORT_CHOICES,
            "has_patient": PATIENT_CHOICES,
            "failed": FAILED_CHOICES,
        },
    }
    template = "reasoning/_flow_list_results.html" if request.headers.get("HX-Request") else "reasoning/flow_list.html"
    return render(request, template, context)


SUMMARY_CACHE_SECONDS = 60


@operator_required
@require_safe
def admin_flow_list_summary(request: HttpRequest) -> HttpResponse:
    """The flow list's summary strip, on its own: counting a large filtered set takes longer than
    a page of it, so the list does not wait for it (htmx loads it after the rows). Cached for a
    minute per filter set: the counts may be up to a minute old."""
    try:
        search = FlowSearch.parse(request.GET)
    except InvalidInput as exc:
        return render(request, "reasoning/_flow_list_summary.html", {"error": exc.detail}, status=400)
    key = (
        # The order does not change the counts: one entry per filter set.
        "flow-list-summary:"
        + hashlib.sha256(urlencode(sorted(search.params(cursor="", sort="newest").items())).encode()).hexdigest()
    )
    summary = cache.get(key)
    if summary is None:
        summary = search.summary()
        cache.set(key, summary, SUMMARY_CACHE_SECONDS)
    return render(request, "reasoning/_flow_list_summary.html", {"summary": summary})


def _step_href(position: int, read: FlowStepsPage) -> str:
    """A link to a step's timeline entry, on this page or the one that holds it."""
    page = (position - 1) // read.per_page + 1
    return f"#step-{position}" if page == read.page else f"?page={page}#step-{position}"


def _timeline_entry(step: dict[str, Any], read: FlowStepsPage, *, check_guard: bool) -> dict[str, Any]:
    parents = ([step["parent_position"]] if step["parent_position"] is not None else []) + list(
        step["extra_parent_positions"]
    )
    # On a blocked flow, which steps' summaries the guard refuses (the rule's name, never the text).
    guard = summary_guard.check_summary(step["summary_text"]) if check_guard else None
    return {
        **step,
        "parents": [{"position": p, "href": _step_href(p, read)} for p in parents],
        "merge": len(parents) > 1,
        "back_refs": [(label, step[field]) for field, label in BACK_REFS if step[field]],
        "guard_rule": guard.rule if guard is not None and not guard.ok else "",
        "inputs": [_masked_entry(entry) for entry in step["input_shape"]],
        "outputs": [_masked_entry(entry) for entry in step["output_shape"]],
        "content": _content_entries(step) if "inputs_pii" in step else None,
    }


def _content_entries(step: dict[str, Any]) -> list[dict[str, Any]]:
    """A step's inputs and outputs in full (read with the content permission), one entry a key:
    its direction, whether it was stored encrypted, and its value as indented JSON."""
    content = step_content(step["inputs"], step["outputs"], step["inputs_pii"], step["outputs_pii"])
    encrypted = set(step["pii_fields"] or ())
    return [
        {
            "direction": direction,
            "key": key,
            "encrypted": key in encrypted,
            "value": value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False),
        }
        for direction in ("inputs", "outputs")
        for key, value in content[direction].items()
    ]


def _masked_entry(entry: str) -> tuple[str, str]:
    key, _, kind = entry.rpartition(":")
    return key, kind


# The inner width of the graph's panel on a wide page (body.wide main, less padding), in px.
GRAPH_PANEL_WIDTH = 1090


GRAPH_MAX_SCALE = 1.35


def _graph(read: FlowStepsPage, steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The page's steps laid out by ``reasoning.flows.dag``; positions serve as node ids."""
    outside = {p["position"] for step in steps for p in step["parents"] if p["position"] < read.first_position}
    layout = dag.layout(
        [(s["position"], s["parent_position"], s["extra_parent_positions"], s["position"]) for s in steps],
        outside_positions={position: position for position in outside},
    )
    by_position = {step["position"]: step for step in steps}
    # Drawn larger when the graph is narrower than the panel (a chain of steps is one
    # column), up to GRAPH_MAX_SCALE so its text stays text-sized; a wider graph scrolls.
    scale = min(GRAPH_MAX_SCALE, max(1.0, GRAPH_PANEL_WIDTH / layout.width))
    return {
        "width": layout.width,
        "height": layout.height,
        "display_width": round(layout.width * scale),
        "display_height": round(layout.height * scale),
        "nodes": [{"node": node, "step": by_position[node.position]} for node in layout.nodes],
        "edges": layout.edges,
        "stubs": [
            {"stub": stub, "href": _step_href(stub.parent_position, read) if stub.parent_position else ""}
            for stub in layout.stubs
        ],
    }


def _flow_not_found(request: HttpRequest) -> HttpResponse:
    # Rendered here for the same reason as _not_found: the 404 handler speaks JSON.
    return render(request, "reasoning/admin_flow_not_found.html", status=404)


# --- Incident response: the access report ------------------------------------------------------

ACCESS_REPORT_ROWS = 500


@operator_required
@require_safe
def access_report_page(request: HttpRequest) -> HttpResponse:
    """The access report (``reasoning.flows.access_report``) for operators allowed to run it
    (``audit.run_access_report``; others get 403): a patient, an actor and/or a window; the first
    ``ACCESS_REPORT_ROWS`` rows, the command for the whole. Each run is audited."""
    if not request.user.has_perm("audit.run_access_report"):
        return render(request, "reasoning/access_report.html", {"forbidden": True}, status=403)
    form = {name: request.GET.get(name, "").strip() for name in ("patient", "actor", "since", "until")}
    context: dict[str, Any] = {"form": form, "limit": ACCESS_REPORT_ROWS}
    if any(form.values()):
        try:
            patient = _patient_id(form["patient"])
            report = access_report(
                requested_by=actor_for(request),
                patient_id=patient,
                actor=form["actor"],
                since=parse_instant(form["since"], "since", dates=True, naive=True),
                until=parse_instant(form["until"], "until", dates=True, naive=True),
            )
        except InvalidInput as exc:
            context["error"] = f"{exc.field}: {exc.detail}" if exc.field else exc.detail
            return render(request, "reasoning/access_report.html", context, status=400)
        context["rows"] = list(itertools.islice(report, ACCESS_REPORT_ROWS))
        context["total"] = report.rows
    return render(request, "reasoning/access_report.html", context)


def _patient_id(raw: str) -> uuid.UUID | None:
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise InvalidInput("not a patient id (a UUID)", field="patient") from None
