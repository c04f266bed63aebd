from __future__ import annotations

from django.apps import AppConfig


class ProcessorsConfig(AppConfig):
    name = "processors"
    verbose_name = "External processors"

    def ready(self) -> None:
        from processors import checks

        # Fail fast, without the database: the configured embedding model must have a processor.
        checks.configured_processors()
