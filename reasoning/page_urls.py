"""Pages of the reasoning app (the API routes are in reasoning/urls.py)."""

from __future__ import annotations

from django.urls import path

from reasoning import views

urlpatterns = [
    path("dashboard/reasoning/<str:decision_id>", views.narrative_page, name="narrative-page"),
    # Included after the other operator pages: this pattern would match their paths too.
    path("dashboard/admin/reasoning/<str:flow_id>", views.admin_flow_page, name="admin-flow-page"),
]
