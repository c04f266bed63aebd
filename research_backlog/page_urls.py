"""The Research Console: the operators' workbench (each htmx partial has its own URL)."""

from __future__ import annotations

from django.urls import path

from research_backlog import views

PREFIX = "dashboard/admin/reasoning/research-console"

urlpatterns = [
    path(PREFIX, views.console_page, name="research-console"),
]
