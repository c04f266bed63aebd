"""Constants and readers shared by the research-backlog tests: the routes' (``test_*_api.py``) and
the Research Console's (``console/``; its fixtures are in ``console/conftest.py``). Builders are in
``tests/factories``, audit readers in ``tests/conftest``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.db import connection
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from pathways.embeddings import HashBucketEmbedding
from pathways.jobs import backfill_embeddings
from pathways.models import Pathway, PathwayHit
from reasoning.models import ReasoningFlow, ReasoningStep
from research_backlog.models import ClaimReview, ResearchRequest
from tests.factories import NOW, make_pathway, make_request
from tests.html import Element, doc

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response


DEEPER_URL = "/admin/v1/reasoning/research/deeper-request"
BACKLOG_URL = "/admin/v1/reasoning/research/backlog"
NEXT_URL = "/admin/v1/reasoning/research/backlog/next"
REVIEWS_URL = "/admin/v1/reasoning/claims-pending-review"
NOW_JSON = "2026-03-02T12:00:00Z"
OPERATOR = "token:operator"
# Distinctive, so a leak into a table or the trail cannot be a coincidence.
NOTE = "Curator Wilhelmina checked the Quixote citation: the dose was transposed."

DISPATCHED = "reasoning.research.backlog.dispatched"
COMPLETED = "reasoning.research.backlog.completed"
FAILED_VOLUNTARY = "reasoning.research.backlog.failed_voluntary"
CREATED = "reasoning.research.deeper_request_created"
BACKLOG_READ = "admin.reasoning.research.backlog_read"
MARKED = "reasoning.claims_pending_review.marked"
RESOLVED = "reasoning.claims_pending_review.resolved"
LISTED = "admin.reasoning.claims_pending_review.listed"


def complete_url(request_id: object) -> str:
    return f"/admin/v1/reasoning/research/backlog/{request_id}/complete"


def review_url(review_id: object) -> str:
    return f"{REVIEWS_URL}/{review_id}"


def state() -> dict[str, Any]:
    """Every row of both queues and every audit event id: equal before and after means nothing was written."""
    return {
        "requests": list(ResearchRequest.objects.order_by("pk").values()),
        "reviews": list(ClaimReview.objects.order_by("pk").values()),
        "audit": list(AuditEvent.objects.order_by("id").values_list("id", flat=True)),
    }


def raw_column(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [str(row[0]) for row in cursor.fetchall()]


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items]


def run_together(workers: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(n)`` in ``workers`` threads released at once; each thread closes its own connection."""
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            work(n)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return errors


# --- The Research Console ---------------------------------------------------------------

CONSOLE = "/dashboard/admin/reasoning/research-console"
CANDIDATES = f"{CONSOLE}/candidates"
COMPARE = f"{CONSOLE}/compare"
BACKLOG = f"{CONSOLE}/backlog"
REVIEWS = f"{CONSOLE}/reviews"
DEEPER = f"{CONSOLE}/deeper-research"
LOGIN = "/accounts/login/"
HTMX = {"HX-Request": "true"}

MATCH_PROXY = "admin.reasoning.pathway.match.proxy"
HIT_PROXY = "admin.reasoning.pathway.hit.proxy"
REUSE_UNDONE = "admin.reasoning.pathway.reuse_undone"
DEEPER_REQUESTED = "admin.reasoning.research.deeper_requested"
BACKLOG_READ_PROXY = "admin.reasoning.research.backlog_read.proxy"


def reuse_url(pathway_id: object) -> str:
    return f"{CONSOLE}/pathways/{pathway_id}/reuse"


def undo_url(hit_id: object) -> str:
    return f"{CONSOLE}/reuses/{hit_id}/undo"


def console_review_url(review_id: object) -> str:
    return f"{REVIEWS}/{review_id}"


def console_url(trigger_type: str, trigger_ref: str = "", **extra: str) -> str:
    return f"{CONSOLE}?{urlencode({'trigger_type': trigger_type, 'trigger_ref': trigger_ref, **extra})}"


def login_redirect(path: str) -> str:
    return f"{LOGIN}?{urlencode({'next': path}, safe='/')}"


def messages_on(client: Client, url: str = CONSOLE) -> list[str]:
    """The flash messages a page shows (after a plain-form redirect)."""
    page = doc(client.get(url))
    return [li.text for box in page.select("ul", "messages") for li in box.select("li")]


def form_fields(form: Element, *, button: Element | None = None, tick: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What a browser without JavaScript would submit: inputs, ticked boxes, textareas, the button."""
    data: dict[str, list[str]] = {}
    for el in form.iter():
        if el.tag == "input":
            kind = el.attrs.get("type", "text")
            if kind == "checkbox" and "checked" not in el.attrs and el.attrs.get("value") not in tick:
                continue
            if kind in ("hidden", "text", "checkbox") and "name" in el.attrs:
                data.setdefault(el.attrs["name"], []).append(el.attrs.get("value", ""))
        elif el.tag == "textarea" and "name" in el.attrs:
            data.setdefault(el.attrs["name"], []).append(el.raw_text().removeprefix("\n"))
    if button is not None and "name" in button.attrs:
        data[button.attrs["name"]] = [button.attrs.get("value", "")]
    return data


def submit(
    client: Client,
    form: Element,
    *,
    button: Element | None = None,
    tick: frozenset[str] = frozenset(),
    htmx: bool = False,
    **changes: str,
) -> Response:
    """Submit ``form`` to its own action with its own method (changing some fields)."""
    method, action = form.attrs["method"].lower(), form.attrs["action"]
    data = form_fields(form, button=button, tick=tick)
    data.update({name: [value] for name, value in changes.items()})
    headers = HTMX if htmx else {}
    if method == "post":
        return client.post(action, data, headers=headers)
    assert method == "get"
    return client.get(action, data, headers=headers)


def written() -> dict[str, Any]:
    """Both queues, every pathway's hits and every audit event: equal before and after means nothing was written."""
    return {
        "requests": list(ResearchRequest.objects.order_by("pk").values()),
        "reviews": list(ClaimReview.objects.order_by("pk").values()),
        "hits": list(Pathway.objects.order_by("pk").values_list("pk", "hit_count", "last_hit_at")),
        "reuses": list(PathwayHit.objects.order_by("pk").values_list("pk", "undone_at", "previous_last_hit_at")),
        "audit": list(AuditEvent.objects.order_by("id").values_list("id", flat=True)),
    }


def demoted() -> dict[str, Any]:
    return {"demoted_at": timezone.now(), "demotion_reason": Pathway.DemotionReason.COLD}


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    path: str
    data: dict[str, str]
    ok_status: int


ROUTE_NAMES = ["page", "candidates", "compare", "backlog", "reviews", "reuse", "undo", "deeper", "review"]


def call(client: Client, route: Route, method: str | None = None) -> Response:
    if (method or route.method) == "get":
        return client.get(route.path, route.data)
    return client.post(route.path, route.data)


def candidate_rows(page: Element) -> list[Element]:
    return page.by_id("candidates").select("li", "candidate")


def reuse_form_on_page(client: Client, pathway: Pathway, query: dict[str, str]) -> Element:
    page = doc(client.get(CONSOLE, query))
    button = page.by_id(f"candidate-{pathway.pk}").one("button", form=f"reuse-{pathway.pk}")
    return page.by_id(button.attrs["form"])


EXACT = "<the exact candidate>"  # stands for library["exact"].pk in the cases below


def deeper_form_on_page(client: Client) -> Element:
    page = doc(client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "vitals/heart-rate"}))
    return page.by_id("deeper-research").one("form")


def chips(panel: Element) -> dict[str, str]:
    return {li.attrs["data-status"]: li.one("strong").text for li in panel.select("li", "chip")}


def facts(panel: Element) -> dict[str, str]:
    dl = panel.one("dl", "facts")
    terms, values = dl.select("dt"), dl.select("dd")
    return {dt.text: dd.text for dt, dd in zip(terms, values, strict=True)}


def place_failures(count: int) -> None:
    for n in range(count):
        make_request(status="failed_voluntary", completed_at=NOW - timedelta(hours=n + 1), failure_reason="vendor_down")


def pending_ids(panel: Element) -> list[str]:
    return [li.attrs["data-claim"] for li in panel.select("li", "card")]


def review_form_on_page(client: Client, entry: ClaimReview) -> Element:
    return doc(client.get(CONSOLE)).by_id(f"review-{entry.pk}").one("form")


# 1 session, 2 operator (user).
AUTH = 2
# base.html on full operator pages (not fragments): 1 the audit chain's lag for the banner
# (the oldest queued event, two primary keys).
CHAIN_LAG = 1
# match(): 1 the structural candidates in one UNION ALL (the trigger type's most reused,
# the ref and its ancestors, its siblings, its children); 2 SAVEPOINT, 3 set_config
# (hnsw.ef_search, hnsw.iterative_scan), 4 the nearest embeddings (raw), 5 RELEASE;
# candidate_radars(): 6 every radar input of the final candidates in one statement
# (their fields, seed metrics, verdicts, aborted siblings), 7 family maturity; the match
# audit: 8 SAVEPOINT, 9 the event with its chainer queue row, 10 RELEASE; the cards:
# 11 every seed flow's step summaries, 12 the operator's reuses that can still be undone.
CANDIDATES_QUERIES = 12
# backlog_status(): 1 counts by status, 2 counts by retries, 3 oldest pending, 4 oldest
# dispatched, 5 recent failure count, 6 recent failure rows; the read audit: 7 SAVEPOINT,
# 8 the event, 9 RELEASE.
BACKLOG_QUERIES = 9
# claims_pending_review(): 1 the oldest pending, 2 their count, 3 the recent resolutions;
# the listing audit: 4 SAVEPOINT, 5 the event, 6 RELEASE.
REVIEWS_QUERIES = 6
# The compare partial: 1 the two pathways; candidate_radars(): 2 their radar inputs,
# 3 family maturity. (Reading a comparison is not audited.)
COMPARE_QUERIES = 3

QUERY = {"trigger_type": "lab_result", "trigger_ref": "labs/test-0"}


def make_candidates(count: int, *, embedded: bool = False, steps: int = 0) -> list[Pathway]:
    """``count`` lab_result pathways that all match QUERY (one exact, the rest siblings),
    each seed flow with ``steps`` steps."""
    rows = [make_pathway("lab_result", f"labs/test-{n}", hit_count=n) for n in range(count)]
    for row in rows:
        add_seed_steps(row, *(f"Step {n} of {row.trigger_ref}" for n in range(1, steps + 1)))
    if embedded:  # candidates then also come back from the HNSW query, with a cosine
        backfill_embeddings(HashBucketEmbedding())
    return rows


def add_seed_steps(pathway: Pathway, *summaries: str, kind: str = "evidence_assembly") -> None:
    """Steps on the pathway's seed flow (set up directly, as make_pathway sets up the flow)."""
    start = ReasoningStep.objects.filter(flow_id=pathway.seed_flow_id).count()
    flow_created_at = ReasoningFlow.objects.values_list("created_at", flat=True).get(pk=pathway.seed_flow_id)
    ReasoningStep.objects.bulk_create(
        ReasoningStep(
            flow_id=pathway.seed_flow_id,
            flow_created_at=flow_created_at,
            position=start + n,
            kind=kind,
            agent="researcher",
            summary_text=summary,
            request_hash="test",
        )
        for n, summary in enumerate(summaries, start=1)
    )
