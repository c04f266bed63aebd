from __future__ import annotations

from django.apps import AppConfig


class PathwaysConfig(AppConfig):
    name = "pathways"
