from __future__ import annotations

from django.apps import AppConfig


class ResearchBacklogConfig(AppConfig):
    name = "research_backlog"
    verbose_name = "Research backlog"

    def ready(self) -> None:
        from reasoning.signals import flows_closed
        from reasoning.turns import register_flow_links
        from research_backlog.producers import produce_after_close
        from research_backlog.turns import backlog_links

        # Producers run after every flow close commits (reasoning never imports this app).
        flows_closed.connect(produce_after_close, dispatch_uid="research_backlog.produce_after_close")
        # The turn view links a backlog-dispatched flow to the flow whose request it answered.
        register_flow_links(backlog_links)
