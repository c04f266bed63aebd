from __future__ import annotations

from django.urls import path

from reasoning.agents import routes as agents
from reasoning.flows import routes as flows
from reasoning.outcomes import routes as outcomes
from reasoning.recording import flow_routes
from reasoning.recording import routes as recording
from reasoning.turns import routes as turns

urlpatterns = [
    path("api/reasoning/ingest", recording.IngestView.as_view(), name="ingest"),
    path("v1/traces", recording.OtlpTracesView.as_view(), name="otlp-traces"),
    path("api/reasoning/flows", flow_routes.FlowCollectionView.as_view(), name="flow-collection"),
    path("api/reasoning/flows/<str:flow_id>", flow_routes.FlowDetailView.as_view(), name="flow-detail"),
    path(
        "api/reasoning/flows/<str:flow_id>/steps",
        flow_routes.StepCollectionView.as_view(),
        name="step-collection",
    ),
    path(
        "api/reasoning/flows/<str:flow_id>/steps/batch",
        flow_routes.StepBatchView.as_view(),
        name="step-batch",
    ),
    path("api/reasoning/flows/<str:flow_id>/outcome", outcomes.FlowOutcomeView.as_view(), name="flow-outcome"),
    path("api/reasoning/outcomes", outcomes.OutcomeBatchView.as_view(), name="outcome-batch"),
    path("admin/v1/reasoning/stats", flows.AdminStatsView.as_view(), name="admin-reasoning-stats"),
    path("admin/v1/reasoning/flows", flows.AdminFlowListView.as_view(), name="admin-flow-list"),
    path("admin/v1/reasoning/flows/<str:flow_id>", flows.AdminFlowDetailView.as_view(), name="admin-flow-detail"),
    path("admin/v1/reasoning/sessions", outcomes.AdminSessionListView.as_view(), name="admin-session-list"),
    path(
        "admin/v1/reasoning/sessions/<str:session_id>",
        outcomes.AdminSessionDetailView.as_view(),
        name="admin-session-detail",
    ),
    path(
        "admin/v1/reasoning/sessions/<str:session_id>/replay",
        outcomes.AdminSessionReplayView.as_view(),
        name="admin-session-replay",
    ),
    path("admin/v1/reasoning/turns/<path:trace_id>", turns.AdminTurnDetailView.as_view(), name="admin-turn-detail"),
    path("admin/v1/reasoning/agents/<str:agent>/drift", agents.AgentDriftView.as_view(), name="admin-agent-drift"),
    path("admin/v1/reasoning/agents/<str:agent>/review", agents.AgentReviewView.as_view(), name="admin-agent-review"),
]
