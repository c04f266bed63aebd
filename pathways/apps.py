from __future__ import annotations

from django.apps import AppConfig


class PathwaysConfig(AppConfig):
    name = "pathways"

    def ready(self) -> None:
        from audit.actions import Action
        from core.panels import register_panel
        from pathways.console import CONSOLE_PAGE, console_panels
        from pathways.matcher import active_client
        from pathways.radar import library_facts
        from pathways.services import (
            EXTRACTOR_ACTOR,
            extraction_in_close,
            owes_extraction,
            perform_extraction,
            skip_events,
        )
        from reasoning.radar import register_library_facts
        from reasoning.signals import CloseReceiver, register_close_events, register_close_receiver

        # Fail fast: an unknown PATHWAY_EMBEDDING_MODEL or a missing vendor key stops start-up.
        active_client()
        # A qualifying close owes an extraction, recorded with the close and done after its
        # commit, retried until done (reasoning.recording.close_work; reasoning never imports pathways);
        # a close written as one statement does the extraction in that statement, owing nothing.
        register_close_receiver(
            CloseReceiver(
                key="pathways.extract",
                actor=EXTRACTOR_ACTOR,
                owes=owes_extraction,
                perform=perform_extraction,
                skipped_action=Action.PATHWAY_SKIPPED,
                failed_action=Action.PATHWAY_FAILED,
                in_close=extraction_in_close,
            )
        )
        # ... and the flows that cannot seed one are audited as skipped in the close itself.
        register_close_events("pathways.skips", skip_events)
        # Flow radars read the trigger family's maturity from the library.
        register_library_facts(library_facts)
        # The Research Console (research_backlog's page) shows the candidates and comparison.
        register_panel(CONSOLE_PAGE, "pathways.candidates", console_panels)
