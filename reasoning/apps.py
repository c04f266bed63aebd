from __future__ import annotations

from django.apps import AppConfig


class ReasoningConfig(AppConfig):
    name = "reasoning"
