"""Model usage and cost (issue 41): each step's cost, and the flow's token totals, cost and models,
kept by the write path from now on; the steps and flows already stored are filled in here."""

from typing import Any

import django.contrib.postgres.fields
from django.db import migrations, models

# The flows' totals, from their steps (only flows with a step that reported usage or a model).
FLOW_USAGE = """
UPDATE reasoning_flow f SET
    input_tokens = s.input_tokens,
    output_tokens = s.output_tokens,
    cost_usd = s.cost_usd,
    model_names = s.model_names
FROM (
    SELECT flow_id,
           sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens,
           sum(cost_usd) AS cost_usd,
           coalesce(array_agg(DISTINCT model ORDER BY model) FILTER (WHERE model <> ''), '{}') AS model_names
    FROM reasoning_step
    WHERE input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR model <> ''
    GROUP BY flow_id
) s
WHERE f.id = s.flow_id
"""


def price_steps(apps: Any, schema_editor: Any) -> None:
    """Each stored step that names a model and reports tokens, priced as of the day it was written."""
    from reasoning.recording.pricing import step_cost

    step = apps.get_model("reasoning", "ReasoningStep")
    rows = (
        step.objects.exclude(model="")
        .filter(models.Q(input_tokens__isnull=False) | models.Q(output_tokens__isnull=False))
        .values_list("id", "model", "input_tokens", "output_tokens", "cached_tokens", "created_at")
    )
    priced = []
    for pk, model, inputs, outputs, cached, created_at in rows.iterator(chunk_size=2000):
        cost = step_cost(model, inputs, outputs, cached, at=created_at)
        if cost is not None:
            priced.append((cost, pk))
    with schema_editor.connection.cursor() as cursor:
        for start in range(0, len(priced), 2000):
            chunk = priced[start : start + 2000]
            cursor.execute(
                "UPDATE reasoning_step s SET cost_usd = v.cost FROM unnest(%s::numeric[], %s::uuid[]) AS v(cost, id)"
                " WHERE s.id = v.id",
                [[cost for cost, _ in chunk], [pk for _, pk in chunk]],
            )


class Migration(migrations.Migration):
    dependencies = [
        ("patients", "0003_legal_hold"),
        ("reasoning", "0022_flow_word_search"),
    ]

    operations = [
        migrations.AddField(
            model_name="reasoningflow",
            name="cost_usd",
            field=models.DecimalField(blank=True, decimal_places=10, max_digits=20, null=True),
        ),
        migrations.AddField(
            model_name="reasoningflow",
            name="input_tokens",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="reasoningflow",
            name="model_names",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=200), blank=True, db_default=[], default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="reasoningflow",
            name="output_tokens",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="reasoningstep",
            name="cost_usd",
            field=models.DecimalField(blank=True, decimal_places=10, max_digits=20, null=True),
        ),
        migrations.AddIndex(
            model_name="reasoningflow",
            index=models.Index(
                condition=models.Q(("user_ref", ""), _negated=True),
                fields=["user_ref", "created_at"],
                name="reasoning_flow_user_created",
            ),
        ),
        migrations.RunPython(price_steps, migrations.RunPython.noop),
        migrations.RunSQL(FLOW_USAGE, migrations.RunSQL.noop),
    ]
