"""reasoning_step becomes a table partitioned by month of its flow's created_at (core.partitions).

The conversion copies every row (docs/deploy.md, "Partitioned history"); the old table's
constraints carry over as:

* PRIMARY KEY (id) -> PRIMARY KEY (id, flow_created_at) on the partitioned table, plus
  ``reasoning_step_registry (id PRIMARY KEY)``, filled by a statement trigger in the same
  statement as the steps, so a step id stays unique across all partitions (an idempotent
  replay names the same flow, hence the same partition; an id reused by another flow is
  refused by the registry's key whatever the months);
* UNIQUE (flow_id, position) -> UNIQUE (flow_id, position, flow_created_at): equivalent, since
  a flow has one created_at;
* the self-FK parent_step_id -> reasoning_step(id) cannot reference a partitioned table by a
  key without the partition column: the write path already checks every parent in bulk
  (reasoning.recording.ingest._check_parents); the model keeps the relation with db_constraint=False;
* the FK flow_id -> reasoning_flow(id), the CHECKs and the three partial indexes stay.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

SQL = """
ALTER TABLE reasoning_step RENAME TO reasoning_step_unpartitioned;
ALTER TABLE reasoning_step_unpartitioned
    DROP CONSTRAINT reasoning_step_parent_step_id_439e5a91_fk_reasoning_step_id;
ALTER INDEX reasoning_step_pkey RENAME TO reasoning_step_unpartitioned_pkey;
ALTER INDEX reasoning_step_flow_position RENAME TO reasoning_step_unpartitioned_flow_position;
ALTER INDEX reasoning_step_parent_created RENAME TO reasoning_step_unpartitioned_parent_created;
ALTER INDEX reasoning_step_cot_created RENAME TO reasoning_step_unpartitioned_cot_created;
ALTER INDEX reasoning_step_span RENAME TO reasoning_step_unpartitioned_span;
ALTER TABLE reasoning_step_unpartitioned
    RENAME CONSTRAINT reasoning_step_confidence_range TO reasoning_step_unpartitioned_confidence_range;

CREATE TABLE reasoning_step (
    LIKE reasoning_step_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    flow_created_at timestamptz NOT NULL,
    PRIMARY KEY (id, flow_created_at),
    CONSTRAINT reasoning_step_flow_position UNIQUE (flow_id, position, flow_created_at),
    CONSTRAINT reasoning_step_flow_id_fk FOREIGN KEY (flow_id) REFERENCES reasoning_flow (id)
        DEFERRABLE INITIALLY DEFERRED
) PARTITION BY RANGE (flow_created_at);
ALTER TABLE reasoning_step RENAME CONSTRAINT reasoning_step_unpartitioned_confidence_range
    TO reasoning_step_confidence_range;
CREATE INDEX reasoning_step_cot_created ON reasoning_step (created_at) WHERE reasoning_content IS NOT NULL;
CREATE INDEX reasoning_step_span ON reasoning_step (span_id) WHERE span_id <> '';
CREATE INDEX reasoning_step_parent_created ON reasoning_step (parent_step_id, created_at)
    WHERE parent_step_id IS NOT NULL;
CREATE TABLE reasoning_step_default PARTITION OF reasoning_step DEFAULT;

CREATE TABLE reasoning_step_registry (id uuid PRIMARY KEY, flow_created_at timestamptz NOT NULL);
CREATE FUNCTION reasoning_step_register() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO reasoning_step_registry (id, flow_created_at) SELECT id, flow_created_at FROM new_steps;
    RETURN NULL;
END;
$$;
CREATE TRIGGER reasoning_step_register AFTER INSERT ON reasoning_step
    REFERENCING NEW TABLE AS new_steps FOR EACH STATEMENT EXECUTE FUNCTION reasoning_step_register();
"""


def convert(apps: Any, schema_editor: Any) -> None:
    from core.partitions import create_month, ensure_ahead

    with schema_editor.connection.cursor() as cursor:
        cursor.execute(SQL)
        cursor.execute(
            "SELECT DISTINCT date_trunc('month', f.created_at AT TIME ZONE 'UTC')"
            " FROM reasoning_step_unpartitioned s JOIN reasoning_flow f ON f.id = s.flow_id"
        )
        for (month,) in cursor.fetchall():
            create_month(cursor, "reasoning_step", month.replace(tzinfo=UTC))
        ensure_ahead(cursor, datetime.now(UTC))
        # Columns in the same order: the old table's, then flow_created_at.
        cursor.execute(
            "INSERT INTO reasoning_step SELECT s.*, f.created_at"
            " FROM reasoning_step_unpartitioned s JOIN reasoning_flow f ON f.id = s.flow_id"
        )
        cursor.execute("DROP TABLE reasoning_step_unpartitioned")


class Migration(migrations.Migration):
    dependencies = [("reasoning", "0016_rate_limit_table")]
    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(convert, elidable=False)],
            state_operations=[
                migrations.AddField(
                    model_name="reasoningstep",
                    name="flow_created_at",
                    field=models.DateTimeField(editable=False),
                    preserve_default=False,
                ),
                migrations.AlterField(
                    model_name="reasoningstep",
                    name="parent_step",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="children",
                        to="reasoning.reasoningstep",
                    ),
                ),
                migrations.RemoveConstraint(model_name="reasoningstep", name="reasoning_step_flow_position"),
                migrations.AddConstraint(
                    model_name="reasoningstep",
                    constraint=models.UniqueConstraint(
                        fields=("flow", "position", "flow_created_at"), name="reasoning_step_flow_position"
                    ),
                ),
                migrations.CreateModel(
                    name="ReasoningStepRegistry",
                    fields=[
                        ("id", models.UUIDField(primary_key=True, serialize=False)),
                        ("flow_created_at", models.DateTimeField()),
                    ],
                    options={"db_table": "reasoning_step_registry"},
                ),
            ],
        )
    ]
