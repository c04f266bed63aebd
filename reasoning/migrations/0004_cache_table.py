from __future__ import annotations

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps: object, schema_editor: object) -> None:
    # The database cache backs the narrative read throttle across web processes.
    call_command("createcachetable", verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("reasoning", "0003_flow_summary_guard_rule")]
    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
