"""The step word index over words the write path computes (``ReasoningStep.summary_words``).

PostgreSQL's text search parser costs about 40 µs for a 200-character summary, a quarter of its
work per span on the OTLP write path (docs/performance.md). The write path now gives the vector
when it can prove it identical to ``to_tsvector('english', summary_text)`` (``core.words``), and
the index takes it, or computes it from the summary when it is null (steps written before, or
whose summary's shape is not proven): the same words either way, so the word search
(``reasoning.flows.search``) is unchanged. Created on the parent table, so every partition has it.
"""

from __future__ import annotations

import django.contrib.postgres.search
from django.db import migrations

NEW_INDEX = (
    "DROP INDEX IF EXISTS reasoning_step_words;"
    " CREATE INDEX reasoning_step_words ON reasoning_step"
    " USING gin (coalesce(summary_words, to_tsvector('english', summary_text)))"
)
OLD_INDEX = (
    "DROP INDEX IF EXISTS reasoning_step_words;"
    " CREATE INDEX reasoning_step_words ON reasoning_step USING gin (to_tsvector('english', summary_text))"
)


class Migration(migrations.Migration):
    dependencies = [("reasoning", "0027_flow_moved_check")]

    operations = [
        migrations.AddField(
            model_name="reasoningstep",
            name="summary_words",
            field=django.contrib.postgres.search.SearchVectorField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(NEW_INDEX, OLD_INDEX),
    ]
