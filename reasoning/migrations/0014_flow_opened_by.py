from __future__ import annotations

from django.db import migrations, models

# Who opened each stored flow: the actor of its reasoning.flow.started audit event (every flow
# has one, written in the transaction that opened it).
BACKFILL = """
UPDATE reasoning_flow f SET opened_by = e.actor
FROM audit_event e
WHERE e.action = 'reasoning.flow.started' AND e.target_type = 'reasoning.reasoningflow'
  AND e.target_id = f.id::text AND f.opened_by = ''
"""


class Migration(migrations.Migration):
    dependencies = [
        ("reasoning", "0013_audit_read_scope"),
        ("audit", "0005_database_time_stamps"),
    ]

    operations = [
        migrations.AddField(
            model_name="reasoningflow",
            name="opened_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
