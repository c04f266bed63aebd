from __future__ import annotations

from django.db import migrations

# The database stamps the time of every audit event and of every chain link, so that no
# writer (the application's role included) can backdate one (docs/audit-log.md, "Time
# stamps"). record() writes the canonical bytes with an empty time, `,"created_at":""`
# (the first occurrence is the key itself: the action and actor before it are JSON strings,
# whose quotes are escaped); this trigger sets created_at to clock_timestamp() and writes
# the same instant, as the documented text, between the two quotes. An event without the
# placeholder is refused. Links get linked_at = clock_timestamp() whatever was sent.
SQL = """
-- The documented text of a time (docs/audit-log.md): UTC, ".ffffff" only when the
-- microseconds are not zero, then "+00:00"; what audit.canonical.format_created_at writes.
CREATE OR REPLACE FUNCTION audit_time_text(stamp timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT to_char(
        stamp AT TIME ZONE 'UTC',
        CASE WHEN extract(microseconds FROM stamp)::bigint % 1000000 = 0
             THEN 'YYYY-MM-DD"T"HH24:MI:SS' ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US' END
    ) || '+00:00'
$$;

CREATE OR REPLACE FUNCTION audit_event_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    stamp timestamptz := clock_timestamp();
    at integer := position(decode('2c22637265617465645f6174223a2222', 'hex') IN NEW.canonical);
BEGIN
    IF at = 0 THEN
        RAISE EXCEPTION 'audit_event.canonical must hold the empty time ,"created_at":"" for the database to stamp'
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.created_at := stamp;
    NEW.canonical := overlay(NEW.canonical PLACING convert_to(audit_time_text(stamp), 'UTF8') FROM at + 15 FOR 0);
    RETURN NEW;
END;
$$;

CREATE TRIGGER audit_event_stamp
    BEFORE INSERT ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_event_stamp();

CREATE OR REPLACE FUNCTION audit_chain_link_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.linked_at := clock_timestamp();
    RETURN NEW;
END;
$$;

CREATE TRIGGER audit_chain_link_stamp
    BEFORE INSERT ON audit_chain_link
    FOR EACH ROW EXECUTE FUNCTION audit_chain_link_stamp();
"""

REVERSE_SQL = """
DROP TRIGGER IF EXISTS audit_chain_link_stamp ON audit_chain_link;
DROP FUNCTION IF EXISTS audit_chain_link_stamp();
DROP TRIGGER IF EXISTS audit_event_stamp ON audit_event;
DROP FUNCTION IF EXISTS audit_event_stamp();
DROP FUNCTION IF EXISTS audit_time_text(timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_merkle_tree_and_checkpoints")]
    operations = [migrations.RunSQL(SQL, REVERSE_SQL)]
