"""Start-up checks: every configured outbound processor is in the registry.

Two layers, so that start-up never queries a database that has not been migrated yet:

* ``configured_processors()`` (``ProcessorsConfig.ready``, no database): the configured
  embedding model and the dispatcher map to catalogue processors; ImproperlyConfigured
  naming the variable otherwise.
* ``processors_registered`` (a system check tagged ``database``, so Django runs it where it
  runs the database checks: ``manage.py migrate`` and ``manage.py check --database
  default``): each configured processor that leaves the host has a registry row. Built-ins
  (the default hash embedding) and an unset dispatcher need no row and cost no query;
  before the registry's table exists (a first ``migrate``) the check passes.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from processors.catalogue import EMBEDDING_PROCESSORS, RESEARCH_DISPATCHER, is_builtin


def configured_processors() -> dict[str, str]:
    """The configured outbound paths as ``{variable: processor key}``."""
    model = settings.PATHWAY_EMBEDDING_MODEL
    key = EMBEDDING_PROCESSORS.get(model)
    if key is None:
        raise ImproperlyConfigured(
            f"PATHWAY_EMBEDDING_MODEL={model!r} has no processor registry entry (processors.catalogue); "
            f"known: {', '.join(EMBEDDING_PROCESSORS)}"
        )
    configured = {"PATHWAY_EMBEDDING_MODEL": key}
    if settings.RESEARCH_DISPATCHER_URL:
        configured["RESEARCH_DISPATCHER_URL"] = RESEARCH_DISPATCHER
    return configured


@register(Tags.database)
def processors_registered(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if not databases or "default" not in databases:
        return []
    outbound = {variable: key for variable, key in configured_processors().items() if not is_builtin(key)}
    if not outbound:
        return []
    from processors.models import Processor

    if Processor._meta.db_table not in connection.introspection.table_names():
        return []  # not migrated yet: the migration that creates the table is about to run
    registered = set(Processor.objects.filter(key__in=outbound.values()).values_list("key", flat=True))
    return [
        Error(
            f"{variable} is set, but its processor {key!r} has no registry entry",
            hint=f"Register it: manage.py processor_set {key} --status pending_compliance --reason '...' "
            "(or active once an agreement covers it); see docs/processors.md.",
            id="processors.E001",
        )
        for variable, key in outbound.items()
        if key not in registered
    ]
