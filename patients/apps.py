from __future__ import annotations

from django.apps import AppConfig


class PatientsConfig(AppConfig):
    name = "patients"
