from __future__ import annotations

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        from audit import keys

        # The signing key, generated for a local run and checked: a bad one stops start-up.
        keys.configure()
        from audit import (
            checks,  # noqa: F401  (registers the least-privilege deploy check)
            logins,  # noqa: F401  (audits logins, logouts and lockouts)
        )
