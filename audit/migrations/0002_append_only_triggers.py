from __future__ import annotations

from django.db import migrations

# Audit rows are append-only: any UPDATE or DELETE raises. (TRUNCATE stays possible
# for a database owner resetting a test database; it is not a row change.)
SQL = """
CREATE OR REPLACE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit rows are append-only: % on % is not allowed', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_event_append_only
    BEFORE UPDATE OR DELETE ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_reject_change();

CREATE TRIGGER audit_chain_link_append_only
    BEFORE UPDATE OR DELETE ON audit_chain_link
    FOR EACH ROW EXECUTE FUNCTION audit_reject_change();
"""

REVERSE_SQL = """
DROP TRIGGER IF EXISTS audit_chain_link_append_only ON audit_chain_link;
DROP TRIGGER IF EXISTS audit_event_append_only ON audit_event;
DROP FUNCTION IF EXISTS audit_reject_change();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE_SQL)]
