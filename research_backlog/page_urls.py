"""The Research Console: the operators' workbench (each htmx partial has its own URL).

The pathway panels' URLs (candidates, compare, reuse) are in ``pathways.page_urls``.
"""

from __future__ import annotations

from django.urls import path

from research_backlog import views

CONSOLE = "dashboard/admin/reasoning/research-console"

urlpatterns = [
    path(CONSOLE, views.console_page, name="research-console"),
    path(f"{CONSOLE}/deeper-research", views.trigger_deeper_research, name="research-console-deeper"),
    path(f"{CONSOLE}/backlog", views.backlog_partial, name="research-console-backlog"),
    path(f"{CONSOLE}/reviews", views.reviews_partial, name="research-console-reviews"),
    path(f"{CONSOLE}/reviews/<str:review_id>", views.resolve_review, name="research-console-review"),
]
