from __future__ import annotations

from django.apps import AppConfig


class ResearchBacklogConfig(AppConfig):
    name = "research_backlog"
    verbose_name = "Research backlog"

    def ready(self) -> None:
        from audit.actions import Action
        from reasoning.signals import CloseReceiver, register_close_receiver
        from reasoning.turns.services import register_flow_links
        from research_backlog import producers
        from research_backlog.turns import backlog_links

        # A close that calls for production owes it with the close; done after the commit and
        # retried until done (reasoning.recording.close_work; reasoning never imports this app).
        register_close_receiver(
            CloseReceiver(
                key="research_backlog.produce",
                actor=producers.PRODUCER_ACTOR,
                owes=producers.owes,
                perform=producers.perform,
                skipped_action=Action.BACKLOG_PRODUCER_SKIPPED,
                failed_action=Action.BACKLOG_PRODUCER_FAILED,
            )
        )
        # The turn view links a backlog-dispatched flow to the flow whose request it answered.
        register_flow_links(backlog_links)
