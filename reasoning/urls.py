from __future__ import annotations

from django.urls import path

from reasoning import api, ingest_api

urlpatterns = [
    path("api/reasoning/ingest", ingest_api.IngestView.as_view(), name="ingest"),
    path("v1/traces", ingest_api.OtlpTracesView.as_view(), name="otlp-traces"),
    path("api/reasoning/flows", api.FlowCollectionView.as_view(), name="flow-collection"),
    path("api/reasoning/flows/<str:flow_id>", api.FlowDetailView.as_view(), name="flow-detail"),
    path("api/reasoning/flows/<str:flow_id>/steps", api.StepCollectionView.as_view(), name="step-collection"),
    path("api/reasoning/flows/<str:flow_id>/steps/batch", api.StepBatchView.as_view(), name="step-batch"),
    path("admin/v1/reasoning/stats", api.AdminStatsView.as_view(), name="admin-reasoning-stats"),
    path("admin/v1/reasoning/flows", api.AdminFlowListView.as_view(), name="admin-flow-list"),
    path("admin/v1/reasoning/flows/<str:flow_id>", api.AdminFlowDetailView.as_view(), name="admin-flow-detail"),
]
