"""Operator pages of the pathway library."""

from __future__ import annotations

from django.urls import URLPattern, path

from pathways import console, views

# The Research Console's pathway panels (the page itself is research_backlog's).
CONSOLE = "dashboard/admin/reasoning/research-console"

urlpatterns: list[URLPattern] = [
    path("dashboard/admin/reasoning/pathway-library", views.pathway_library_page, name="pathway-library"),
    path(f"{CONSOLE}/candidates", console.candidates_partial, name="research-console-candidates"),
    path(f"{CONSOLE}/compare", console.comparison_partial, name="research-console-compare"),
    path(f"{CONSOLE}/pathways/<uuid:pathway_id>/reuse", console.reuse_pathway, name="research-console-reuse"),
    path(f"{CONSOLE}/reuses/<uuid:hit_id>/undo", console.undo_reuse, name="research-console-undo-reuse"),
]
