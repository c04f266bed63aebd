"""The Merkle tree over the chain and its signed checkpoints (docs/audit-log.md).

Both tables are INSERT-only like the events and the links (the existing trigger function
``audit_reject_change``). The tree is built for links that exist already.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

SQL = """
CREATE TRIGGER audit_tree_node_append_only
    BEFORE UPDATE OR DELETE ON audit_tree_node
    FOR EACH ROW EXECUTE FUNCTION audit_reject_change();

CREATE TRIGGER audit_checkpoint_append_only
    BEFORE UPDATE OR DELETE ON audit_checkpoint
    FOR EACH ROW EXECUTE FUNCTION audit_reject_change();
"""

REVERSE_SQL = """
DROP TRIGGER IF EXISTS audit_checkpoint_append_only ON audit_checkpoint;
DROP TRIGGER IF EXISTS audit_tree_node_append_only ON audit_tree_node;
"""


def build_tree(apps: Any, schema_editor: Any) -> None:
    from audit.tree import rebuild

    with schema_editor.connection.cursor() as cursor:
        rebuild(cursor)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_protect_pending_queue"),
    ]

    operations = [
        migrations.CreateModel(
            name="AuditTreeNode",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "level", "idx", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("level", models.SmallIntegerField()),
                ("idx", models.BigIntegerField()),
                ("hash", models.BinaryField()),
            ],
            options={
                "db_table": "audit_tree_node",
            },
        ),
        migrations.CreateModel(
            name="AuditCheckpoint",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("origin", models.CharField(max_length=200)),
                ("tree_size", models.BigIntegerField()),
                ("root_hash", models.BinaryField()),
                ("key_id", models.CharField(max_length=8)),
                ("note", models.TextField()),
                ("created_at", models.DateTimeField()),
            ],
            options={
                "db_table": "audit_checkpoint",
                "indexes": [models.Index(fields=["tree_size", "id"], name="audit_checkpoint_size")],
            },
        ),
        migrations.RunSQL(SQL, REVERSE_SQL),
        migrations.RunPython(build_tree, migrations.RunPython.noop),
    ]
