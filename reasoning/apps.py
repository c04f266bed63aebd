from __future__ import annotations

from django.apps import AppConfig


class ReasoningConfig(AppConfig):
    name = "reasoning"

    def ready(self) -> None:
        from core.panels import register_panel
        from reasoning.flows.pages import your_decisions_panel

        # The patient's profile (patients app) shows their decisions; the data is this app's.
        register_panel("patient-profile", "reasoning.your_decisions", your_decisions_panel)
