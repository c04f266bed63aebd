"""``manage.py check --deploy --database default``: warns when the application's database
role could rewrite the audit trail (docs/deploy.md, "Database roles")."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, Warning, register


@register(Tags.database, deploy=True)
def audit_tables_least_privilege(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not databases or "default" not in databases:
        return []
    from audit.privileges import problems

    return [
        Warning(
            problem,
            hint="Run the application as a role that owns nothing and may only INSERT and SELECT the audit "
            "tables; set DATABASE_MIGRATION_URL to the owner role (docs/deploy.md, 'Database roles').",
            id="audit.W001",
        )
        for problem in problems()
    ]
