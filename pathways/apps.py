from __future__ import annotations

from django.apps import AppConfig


class PathwaysConfig(AppConfig):
    name = "pathways"

    def ready(self) -> None:
        from core.panels import register_panel
        from pathways.console import CONSOLE_PAGE, console_panels
        from pathways.matcher import active_client
        from pathways.radar import library_facts
        from pathways.services import extract_after_close, skip_events
        from reasoning.radar import register_library_facts
        from reasoning.signals import flows_closed, register_close_events

        # Fail fast: an unknown PATHWAY_EMBEDDING_MODEL or a missing vendor key stops start-up.
        active_client()
        # Extraction runs after every flow close commits (reasoning never imports pathways).
        flows_closed.connect(extract_after_close, dispatch_uid="pathways.extract_after_close")
        # ... and the flows that cannot seed one are audited as skipped in the close itself.
        register_close_events("pathways.skips", skip_events)
        # Flow radars read the trigger family's maturity from the library.
        register_library_facts(library_facts)
        # The Research Console (research_backlog's page) shows the candidates and comparison.
        register_panel(CONSOLE_PAGE, "pathways.candidates", console_panels)
