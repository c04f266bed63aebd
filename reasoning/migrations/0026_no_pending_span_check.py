"""``reasoning_no_pending_span(traces)``: true, or an integrity error when a span of one of
``traces`` is pending (waits in ``reasoning_pending_span`` for its parent).

A trace's first OTLP request writes its spans without looking them up first
(``reasoning.recording.traces._record``): its one statement ends with this check, so that it
fails whole when spans of its traces were parked earlier (they must be placed with it), as the
primary keys make it fail when some of its spans are stored already. The request then looks its
spans up and writes as before.
"""

from django.db import migrations

CREATE = """
CREATE FUNCTION reasoning_no_pending_span(traces text[]) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM reasoning_pending_span WHERE trace_id = ANY(traces)) THEN
        RAISE EXCEPTION 'spans of these traces are pending' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN true;
END;
$$;
"""

DROP = "DROP FUNCTION reasoning_no_pending_span(text[]);"


class Migration(migrations.Migration):
    dependencies = [
        ("reasoning", "0025_drop_unread_indexes"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
