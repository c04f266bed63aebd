from __future__ import annotations

from django.urls import path

from pathways import api

urlpatterns = [
    path("admin/v1/reasoning/pathways/match", api.PathwayMatchView.as_view(), name="pathway-match"),
    path("admin/v1/reasoning/pathways/stats", api.PathwayStatsView.as_view(), name="pathway-stats"),
    path("admin/v1/reasoning/pathways/<str:pathway_id>/hit", api.PathwayHitView.as_view(), name="pathway-hit"),
]
