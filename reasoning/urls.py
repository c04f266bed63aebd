from __future__ import annotations

from django.urls import path

from reasoning import api, drift_api, outcomes_api, review_api
from reasoning.recording import routes as recording
from reasoning.turns import routes as turns_api

urlpatterns = [
    path("api/reasoning/ingest", recording.IngestView.as_view(), name="ingest"),
    path("v1/traces", recording.OtlpTracesView.as_view(), name="otlp-traces"),
    path("api/reasoning/flows", api.FlowCollectionView.as_view(), name="flow-collection"),
    path("api/reasoning/flows/<str:flow_id>", api.FlowDetailView.as_view(), name="flow-detail"),
    path("api/reasoning/flows/<str:flow_id>/steps", api.StepCollectionView.as_view(), name="step-collection"),
    path("api/reasoning/flows/<str:flow_id>/steps/batch", api.StepBatchView.as_view(), name="step-batch"),
    path("api/reasoning/flows/<str:flow_id>/outcome", outcomes_api.FlowOutcomeView.as_view(), name="flow-outcome"),
    path("api/reasoning/outcomes", outcomes_api.OutcomeBatchView.as_view(), name="outcome-batch"),
    path("admin/v1/reasoning/stats", api.AdminStatsView.as_view(), name="admin-reasoning-stats"),
    path("admin/v1/reasoning/flows", api.AdminFlowListView.as_view(), name="admin-flow-list"),
    path("admin/v1/reasoning/flows/<str:flow_id>", api.AdminFlowDetailView.as_view(), name="admin-flow-detail"),
    path("admin/v1/reasoning/sessions", outcomes_api.AdminSessionListView.as_view(), name="admin-session-list"),
    path(
        "admin/v1/reasoning/sessions/<str:session_id>",
        outcomes_api.AdminSessionDetailView.as_view(),
        name="admin-session-detail",
    ),
    path(
        "admin/v1/reasoning/sessions/<str:session_id>/replay",
        outcomes_api.AdminSessionReplayView.as_view(),
        name="admin-session-replay",
    ),
    path("admin/v1/reasoning/turns/<path:trace_id>", turns_api.AdminTurnDetailView.as_view(), name="admin-turn-detail"),
    path("admin/v1/reasoning/agents/<str:agent>/drift", drift_api.AgentDriftView.as_view(), name="admin-agent-drift"),
    path(
        "admin/v1/reasoning/agents/<str:agent>/review", review_api.AgentReviewView.as_view(), name="admin-agent-review"
    ),
]
