from __future__ import annotations

from django.apps import AppConfig


class PathwaysConfig(AppConfig):
    name = "pathways"

    def ready(self) -> None:
        from pathways.matcher import active_client
        from pathways.services import extract_after_close
        from reasoning.signals import flow_closed

        # Fail fast: an unknown PATHWAY_EMBEDDING_MODEL or a missing vendor key stops start-up.
        active_client()
        # Extraction runs after every flow close commits (reasoning never imports pathways).
        flow_closed.connect(extract_after_close, dispatch_uid="pathways.extract_after_close")
