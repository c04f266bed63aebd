from __future__ import annotations

from django.apps import AppConfig


class ResearchBacklogConfig(AppConfig):
    name = "research_backlog"
    verbose_name = "Research backlog"
