"""Operator pages of the pathway library."""

from __future__ import annotations

from django.urls import URLPattern, path

from pathways import views

urlpatterns: list[URLPattern] = [
    path("dashboard/admin/reasoning/pathway-library", views.pathway_library_page, name="pathway-library"),
]
