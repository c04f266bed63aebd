from __future__ import annotations

from django.apps import AppConfig


class ResearchBacklogConfig(AppConfig):
    name = "research_backlog"
    verbose_name = "Research backlog"

    def ready(self) -> None:
        from reasoning.signals import flows_closed
        from research_backlog.producers import produce_after_close

        # Producers run after every flow close commits (reasoning never imports this app).
        flows_closed.connect(produce_after_close, dispatch_uid="research_backlog.produce_after_close")
