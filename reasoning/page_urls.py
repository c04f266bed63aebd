"""Pages of the reasoning app (the API routes are in reasoning/urls.py)."""

from __future__ import annotations

from django.urls import path

from reasoning import agent_page, agents_page, views
from reasoning.evaluation import views as evaluation

urlpatterns = [
    path("dashboard/reasoning/<uuid:decision_id>", views.narrative_page, name="narrative-page"),
    path("dashboard/admin/reasoning/", views.reasoning_dashboard_page, name="reasoning-dashboard"),
    path("dashboard/admin/reasoning/evaluation", evaluation.evaluation_page_view, name="evaluation-page"),
    path("dashboard/admin/reasoning/evaluation/export", evaluation.evaluation_export, name="evaluation-export"),
    path("dashboard/admin/reasoning/flows", views.admin_flow_list_page, name="admin-flow-list"),
    path("dashboard/admin/reasoning/flows/summary", views.admin_flow_list_summary, name="admin-flow-list-summary"),
    path("dashboard/admin/reasoning/turns/<path:trace_id>", views.admin_turn_page, name="admin-turn-page"),
    path("dashboard/admin/reasoning/agents", agents_page.agents_page, name="admin-agents-page"),
    path("dashboard/admin/reasoning/agents/<str:agent>", agent_page.agent_page, name="admin-agent-page"),
    path("dashboard/admin/reasoning/<uuid:flow_id>", views.admin_flow_page, name="admin-flow-page"),
]
