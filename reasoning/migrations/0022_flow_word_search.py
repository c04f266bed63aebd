"""Word search of the flow list (``q``): full-text indexes over the plain-text summaries.

A flow matches when every word of ``q`` is in its trigger summary and trigger ref, or in one
of its steps' summaries (``reasoning.flows.search``; English stemming, so "results" finds
"result"). Only plain-text, guard-checked fields are indexed: never encrypted content. The step
index is created on the parent table, so every month's partition has it (core.partitions).
"""

from __future__ import annotations

from django.db import migrations

FLOW_INDEX = (
    "CREATE INDEX IF NOT EXISTS reasoning_flow_words ON reasoning_flow"
    " USING gin (to_tsvector('english', trigger_summary || ' ' || trigger_ref))"
)
STEP_INDEX = (
    "CREATE INDEX IF NOT EXISTS reasoning_step_words ON reasoning_step"
    " USING gin (to_tsvector('english', summary_text))"
)


class Migration(migrations.Migration):
    dependencies = [("reasoning", "0021_step_content_permissions")]

    operations = [
        migrations.RunSQL(FLOW_INDEX, "DROP INDEX IF EXISTS reasoning_flow_words"),
        migrations.RunSQL(STEP_INDEX, "DROP INDEX IF EXISTS reasoning_step_words"),
    ]
