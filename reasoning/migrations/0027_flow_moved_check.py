"""``reasoning_flow_moved(flow)``: an integrity error, raised by a write that finds a stored flow
changed since it was read.

A request that changes one stored flow (a step, a batch of steps, a close) reads the flow without
locking it and writes as one statement with no transaction around it
(``reasoning.recording.ingest.write``). The statement's update of the flow sets its step count to
what was read plus the new steps only when the stored row still holds the count and the state it
was read with; otherwise it calls this function, and the statement fails whole. The request is
then written again under the flow's row lock, as before.
"""

from django.db import migrations

CREATE = """
CREATE FUNCTION reasoning_flow_moved(flow uuid) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'flow % changed since it was read', flow USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""

DROP = "DROP FUNCTION reasoning_flow_moved(uuid);"


class Migration(migrations.Migration):
    dependencies = [
        ("reasoning", "0026_no_pending_span_check"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
