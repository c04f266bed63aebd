"""Fixtures shared by the Research Console tests: the library, a pending review, the frozen clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from pathways.models import Pathway
from pathways.services import reuse_pathway
from research_backlog import services
from research_backlog.models import ClaimReview
from tests.factories import NOW, QUESTION, make_pathway
from tests.research_backlog.support import (
    BACKLOG,
    CANDIDATES,
    COMPARE,
    CONSOLE,
    DEEPER,
    REVIEWS,
    Route,
    console_review_url,
    demoted,
    reuse_url,
    undo_url,
)


@pytest.fixture
def actor(operator_user: User) -> str:
    return f"user:{operator_user.pk}"


@pytest.fixture
def csrf_client(operator_user: User) -> Client:
    """An operator whose POSTs must carry the CSRF token, as a browser's do."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_user)
    return client


@pytest.fixture
def library() -> dict[str, Pathway]:
    """lab_result pathways around the query ("lab_result", "labs/potassium"):

    exact   labs/potassium  3 hits  -> 1.00 exact_ref
    sibling labs/sodium     1 hit   -> 0.70 prefix_ref
    far     imaging/xray    5 hits  -> 0.30 trigger_type_only
    plus a demoted exact one and another trigger type, which never match.
    """
    return {
        "exact": make_pathway("lab_result", "labs/potassium", hit_count=3),
        "sibling": make_pathway("lab_result", "labs/sodium", hit_count=1),
        "far": make_pathway("lab_result", "imaging/xray", hit_count=5),
        "demoted": make_pathway("lab_result", "labs/potassium/", hit_count=9, **demoted()),
        "other_type": make_pathway("user_question", "labs/potassium", hit_count=2),
    }


@pytest.fixture
def pending_review() -> ClaimReview:
    entry, _ = services.mark_claim_for_review(claim_id="claim-17", actor="token:critic", source="critic")
    return entry


@pytest.fixture
def routes(library: dict[str, Pathway], pending_review: ClaimReview, actor: str) -> dict[str, Route]:
    exact = library["exact"]
    _, hit = reuse_pathway(library["sibling"].pk, actor=actor)  # the operator's, undoable for a minute
    return {
        route.name: route
        for route in [
            Route("page", "get", CONSOLE, {}, 200),
            Route("candidates", "get", CANDIDATES, {"trigger_type": "lab_result"}, 200),
            Route("compare", "get", COMPARE, {"compare": str(exact.pk)}, 200),
            Route("backlog", "get", BACKLOG, {}, 200),
            Route("reviews", "get", REVIEWS, {}, 200),
            Route("reuse", "post", reuse_url(exact.pk), {}, 302),
            Route("undo", "post", undo_url(hit.pk), {}, 302),
            Route("deeper", "post", DEEPER, {"trigger_type": "lab_result", "question": QUESTION}, 302),
            Route("review", "post", console_review_url(pending_review.pk), {"status": "resolved"}, 302),
        ]
    }


@pytest.fixture
def rivals() -> tuple[Pathway, Pathway]:
    """Two candidates whose radars differ: a demoted, never-reused one and an established one."""
    with time_machine.travel(NOW - timedelta(days=200), tick=False):
        weak = make_pathway("lab_result", "labs/old-panel", **demoted())
    strong = make_pathway("lab_result", "labs/new-panel", hit_count=12, last_hit_at=timezone.now())
    return weak, strong
