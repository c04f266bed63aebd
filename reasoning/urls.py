from __future__ import annotations

from django.urls import path

from reasoning.agents import routes as drift_api
from reasoning.agents import routes as review_api
from reasoning.flows import routes as flows_routes
from reasoning.outcomes import routes as outcomes_api
from reasoning.recording import flow_routes as recording_flow_routes
from reasoning.recording import routes as recording
from reasoning.turns import routes as turns_api

urlpatterns = [
    path("api/reasoning/ingest", recording.IngestView.as_view(), name="ingest"),
    path("v1/traces", recording.OtlpTracesView.as_view(), name="otlp-traces"),
    path("api/reasoning/flows", recording_flow_routes.FlowCollectionView.as_view(), name="flow-collection"),
    path("api/reasoning/flows/<str:flow_id>", recording_flow_routes.FlowDetailView.as_view(), name="flow-detail"),
    path(
        "api/reasoning/flows/<str:flow_id>/steps",
        recording_flow_routes.StepCollectionView.as_view(),
        name="step-collection",
    ),
    path(
        "api/reasoning/flows/<str:flow_id>/steps/batch",
        recording_flow_routes.StepBatchView.as_view(),
        name="step-batch",
    ),
    path("api/reasoning/flows/<str:flow_id>/outcome", outcomes_api.FlowOutcomeView.as_view(), name="flow-outcome"),
    path("api/reasoning/outcomes", outcomes_api.OutcomeBatchView.as_view(), name="outcome-batch"),
    path("admin/v1/reasoning/stats", flows_routes.AdminStatsView.as_view(), name="admin-reasoning-stats"),
    path("admin/v1/reasoning/flows", flows_routes.AdminFlowListView.as_view(), name="admin-flow-list"),
    path(
        "admin/v1/reasoning/flows/<str:flow_id>", flows_routes.AdminFlowDetailView.as_view(), name="admin-flow-detail"
    ),
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
