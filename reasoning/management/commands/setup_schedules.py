"""Create or update the django-q2 schedules of every app (idempotent).

Each app lists its schedules in ``<app>/jobs.py`` as ``SCHEDULES``; running this twice
leaves one schedule per name, with the current settings. A spec with ``"enabled": False``
(a job switched off by its setting) has its schedule removed.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand
from django_q.models import Schedule


def collect_schedules() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for config in apps.get_app_configs():
        try:
            module = importlib.import_module(f"{config.name}.jobs")
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.jobs":
                raise
            continue
        found.extend(getattr(module, "SCHEDULES", []))
    return found


class Command(BaseCommand):
    help = "Create or update the scheduled jobs (django-q2) that every app declares."

    def handle(self, *args: Any, **options: Any) -> None:
        for spec in collect_schedules():
            spec = dict(spec)
            name = spec.pop("name")
            if not spec.pop("enabled", True):
                removed, _ = Schedule.objects.filter(name=name).delete()
                self.stdout.write(f"{'removed' if removed else 'skipped'} schedule {name} (disabled)")
                continue
            _, created = Schedule.objects.update_or_create(name=name, defaults={"repeats": -1, **spec})
            self.stdout.write(f"{'created' if created else 'updated'} schedule {name} -> {spec['func']}")
