from __future__ import annotations

from django.db import migrations

# The chainer's queue: anyone may INSERT (record() does), nobody may UPDATE, and only
# the chainer may DELETE: it sets the transaction-local `audit.chainer` setting first
# (set_config(..., true)), which ends with its transaction. Without this, a queued event
# deleted together with its queue row would leave no trace for audit_verify.
SQL = """
CREATE OR REPLACE FUNCTION audit_pending_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('audit.chainer', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_pending rows are removed only by the audit chainer: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_pending_chainer_only
    BEFORE UPDATE OR DELETE ON audit_pending
    FOR EACH ROW EXECUTE FUNCTION audit_pending_guard();
"""

REVERSE_SQL = """
DROP TRIGGER IF EXISTS audit_pending_chainer_only ON audit_pending;
DROP FUNCTION IF EXISTS audit_pending_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only_triggers")]
    operations = [migrations.RunSQL(SQL, REVERSE_SQL)]
