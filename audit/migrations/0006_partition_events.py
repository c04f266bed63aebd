"""audit_event becomes a table partitioned by month of its created_at (core.partitions).

The conversion copies every event unchanged (id, time, canonical bytes: the chain's hashes
still match) in one transaction (docs/deploy.md, "Partitioned history"):

* PRIMARY KEY (id) -> PRIMARY KEY (id, created_at). Ids stay unique without a registry: they
  come from the table's own sequence (continued past the old identity's last value, so
  sequence numbers keep growing), and the application role may only INSERT through the
  parent, where the stamp trigger refuses a row whose created_at is not the database's time
  during its own statement. Chain links bind event ids one to one (``audit_chain_link``
  UNIQUE (event_id)), and ``audit_verify`` reports any id it finds twice.
* The database still stamps the time (migration 0005), but PostgreSQL routes a row to its
  partition *before* BEFORE triggers run and refuses a trigger that moves it to another
  partition: so the time is now the column's DEFAULT ``clock_timestamp()``, and the trigger
  checks it lies within the inserting statement (``statement_timestamp()`` to now) instead
  of overwriting it, then writes it into the canonical bytes as before. A writer that sends a
  time of its own is refused (backdating is refused, no longer silently corrected).
* The append-only trigger is defined on the parent, which PostgreSQL clones onto every
  partition, the ones made later by ``partitions.ahead`` included.
* No DEFAULT partition: an event is always stamped now, and the job keeps three months
  ahead. Were it stopped for three months, audited writes would fail (closed) rather than
  land outside the partition scheme.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import migrations

RENAME = """
ALTER TABLE audit_event RENAME TO audit_event_unpartitioned;
ALTER SEQUENCE audit_event_id_seq RENAME TO audit_event_unpartitioned_id_seq;
ALTER INDEX audit_event_pkey RENAME TO audit_event_unpartitioned_pkey;
ALTER INDEX audit_event_target RENAME TO audit_event_unpartitioned_target;
ALTER INDEX audit_event_action RENAME TO audit_event_unpartitioned_action;

-- A sequence owned by the column rather than an identity column: PostgreSQL accepts identity
-- columns on partitioned tables only from version 17, and the product runs on 15 and later.
CREATE SEQUENCE audit_event_id_seq AS bigint;
CREATE TABLE audit_event (
    LIKE audit_event_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE audit_event_id_seq OWNED BY audit_event.id;
ALTER TABLE audit_event ALTER COLUMN id SET DEFAULT nextval('audit_event_id_seq');
ALTER TABLE audit_event ALTER COLUMN created_at SET DEFAULT clock_timestamp();
CREATE INDEX audit_event_target ON audit_event (target_type, target_id, id);
CREATE INDEX audit_event_action ON audit_event (action, id);
"""

# The sequence continues past both the old sequence and the largest id (ids are sequence
# numbers: they only grow).
CONTINUE_SEQUENCE = """
SELECT setval(
    pg_get_serial_sequence('audit_event', 'id'),
    greatest(s.last_value, (SELECT coalesce(max(id), 0) FROM audit_event_unpartitioned)),
    true
)
FROM audit_event_unpartitioned_id_seq s
WHERE s.is_called OR EXISTS (SELECT 1 FROM audit_event_unpartitioned)
"""

TRIGGERS = """
CREATE OR REPLACE FUNCTION audit_event_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at integer := position(decode('2c22637265617465645f6174223a2222', 'hex') IN NEW.canonical);
BEGIN
    IF NEW.created_at IS NULL OR NEW.created_at < statement_timestamp() OR NEW.created_at > clock_timestamp() THEN
        RAISE EXCEPTION 'audit_event.created_at is the database''s time: leave the column out of the INSERT'
            USING ERRCODE = 'check_violation';
    END IF;
    IF at = 0 THEN
        RAISE EXCEPTION 'audit_event.canonical must hold the empty time ,"created_at":"" for the database to stamp'
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.canonical := overlay(
        NEW.canonical PLACING convert_to(audit_time_text(NEW.created_at), 'UTF8') FROM at + 15 FOR 0
    );
    RETURN NEW;
END;
$$;

CREATE TRIGGER audit_event_stamp
    BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_event_stamp();

CREATE TRIGGER audit_event_append_only
    BEFORE UPDATE OR DELETE ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_reject_change();
"""


def convert(apps: Any, schema_editor: Any) -> None:
    from core.partitions import create_month, ensure_ahead

    with schema_editor.connection.cursor() as cursor:
        cursor.execute(RENAME)
        cursor.execute(CONTINUE_SEQUENCE)
        cursor.execute("SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC') FROM audit_event_unpartitioned")
        for (month,) in cursor.fetchall():
            create_month(cursor, "audit_event", month.replace(tzinfo=UTC))
        ensure_ahead(cursor, datetime.now(UTC), tables=["audit_event"])
        # Before the triggers: the stamp would refuse the events' own (past) times.
        cursor.execute(
            "INSERT INTO audit_event (id, action, actor, target_type, target_id, payload, created_at, canonical)"
            " SELECT id, action, actor, target_type, target_id, payload, created_at, canonical"
            " FROM audit_event_unpartitioned ORDER BY id"
        )
        # The old table's triggers go with it; its sequence is owned by its identity column.
        cursor.execute("DROP TABLE audit_event_unpartitioned")
        cursor.execute(TRIGGERS)


class Migration(migrations.Migration):
    dependencies = [("audit", "0005_database_time_stamps")]
    operations = [migrations.RunPython(convert, elidable=False)]
