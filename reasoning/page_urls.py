"""Pages of the reasoning app (the API routes are in reasoning/urls.py)."""

from __future__ import annotations

from django.urls import path

from reasoning.agents import agent_page, list_page
from reasoning.dashboard import page as dashboard
from reasoning.evaluation import views as evaluation
from reasoning.flows import pages as flows
from reasoning.outcomes import pages as outcomes
from reasoning.turns import page as turns

urlpatterns = [
    path("dashboard/reasoning/<uuid:decision_id>", flows.narrative_page, name="narrative-page"),
    path("dashboard/admin/reasoning/", dashboard.reasoning_dashboard_page, name="reasoning-dashboard"),
    path("dashboard/admin/reasoning/evaluation", evaluation.evaluation_page_view, name="evaluation-page"),
    path("dashboard/admin/reasoning/evaluation/export", evaluation.evaluation_export, name="evaluation-export"),
    path("dashboard/admin/reasoning/flows", flows.admin_flow_list_page, name="admin-flow-list"),
    path("dashboard/admin/reasoning/flows/summary", flows.admin_flow_list_summary, name="admin-flow-list-summary"),
    path("dashboard/admin/reasoning/turns/<path:trace_id>", turns.admin_turn_page, name="admin-turn-page"),
    path("dashboard/admin/reasoning/access-report", flows.access_report_page, name="access-report-page"),
    path("dashboard/admin/reasoning/sessions", outcomes.sessions_page, name="admin-sessions-page"),
    path("dashboard/admin/reasoning/sessions/<str:session_id>", outcomes.session_page, name="admin-session-page"),
    path("dashboard/admin/reasoning/agents", list_page.agents_page, name="admin-agents-page"),
    path("dashboard/admin/reasoning/agents/<str:agent>", agent_page.agent_page, name="admin-agent-page"),
    path("dashboard/admin/reasoning/<uuid:flow_id>", flows.admin_flow_page, name="admin-flow-page"),
]
