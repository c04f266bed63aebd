"""The dashboard's rollups (issue 42, part 5; reasoning.rollups): flows per UTC hour (and agent),
model usage per hour, agent and model, the marks of hours to recompute and the usage owed.

Backfill: every hour that holds a flow is marked dirty and every stored token-reporting step's
usage is owed, here in SQL; the refresh job (every minute; ``manage.py refresh_rollups``, which
``make db`` runs after ``migrate``) builds the rows from them. Meanwhile the dashboard reads the
marked hours from the flows themselves, so it is exact from the first request.
"""

import django.contrib.postgres.fields
from django.db import migrations, models

MARK_HOURS = (
    "INSERT INTO reasoning_flow_rollup_dirty (hour)"
    " SELECT DISTINCT date_trunc('hour', created_at, 'UTC') FROM reasoning_flow"
)
OWE_USAGE = """
INSERT INTO reasoning_step_rollup_pending
    (hour, agent, model, steps, input_tokens, output_tokens, reasoning_tokens, cost, priced)
SELECT date_trunc('hour', created_at, 'UTC'), agent, model, count(*), coalesce(sum(input_tokens), 0),
       coalesce(sum(output_tokens), 0), coalesce(sum(reasoning_tokens), 0), coalesce(sum(cost_usd), 0), count(cost_usd)
FROM reasoning_step
WHERE input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR reasoning_tokens IS NOT NULL
GROUP BY 1, 2, 3
"""


class Migration(migrations.Migration):

    dependencies = [
        ('reasoning', '0023_flow_usage_and_cost'),
    ]

    operations = [
        migrations.CreateModel(
            name='FlowRollup',
            fields=[
                ('hour', models.DateTimeField(primary_key=True, serialize=False)),
                ('completed', models.IntegerField()),
                ('aborted', models.IntegerField()),
                ('active', models.IntegerField()),
                ('blocked', models.IntegerField()),
                ('cost', models.DecimalField(decimal_places=10, max_digits=30, null=True)),
                ('step_buckets', django.contrib.postgres.fields.ArrayField(base_field=models.IntegerField(), size=None)),
                ('duration_buckets', django.contrib.postgres.fields.ArrayField(base_field=models.SmallIntegerField(), size=None)),
                ('duration_counts', django.contrib.postgres.fields.ArrayField(base_field=models.IntegerField(), size=None)),
            ],
            options={
                'db_table': 'reasoning_flow_rollup',
            },
        ),
        migrations.CreateModel(
            name='FlowRollupDirty',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('hour', models.DateTimeField()),
            ],
            options={
                'db_table': 'reasoning_flow_rollup_dirty',
            },
        ),
        migrations.CreateModel(
            name='StepRollupPending',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('hour', models.DateTimeField()),
                ('agent', models.CharField(max_length=100)),
                ('model', models.CharField(max_length=200)),
                ('steps', models.BigIntegerField()),
                ('input_tokens', models.BigIntegerField()),
                ('output_tokens', models.BigIntegerField()),
                ('reasoning_tokens', models.BigIntegerField()),
                ('cost', models.DecimalField(decimal_places=10, max_digits=30)),
                ('priced', models.BigIntegerField()),
            ],
            options={
                'db_table': 'reasoning_step_rollup_pending',
            },
        ),
        migrations.CreateModel(
            name='FlowAgentRollup',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('hour', models.DateTimeField()),
                ('agent', models.CharField(max_length=100)),
                ('completed', models.IntegerField()),
                ('aborted', models.IntegerField()),
                ('active', models.IntegerField()),
                ('blocked', models.IntegerField()),
            ],
            options={
                'db_table': 'reasoning_flow_agent_rollup',
                'constraints': [models.UniqueConstraint(fields=('hour', 'agent'), name='reasoning_flowagentrollup_hour_agent')],
            },
        ),
        migrations.CreateModel(
            name='StepRollup',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('hour', models.DateTimeField()),
                ('agent', models.CharField(max_length=100)),
                ('model', models.CharField(max_length=200)),
                ('steps', models.BigIntegerField()),
                ('input_tokens', models.BigIntegerField()),
                ('output_tokens', models.BigIntegerField()),
                ('reasoning_tokens', models.BigIntegerField()),
                ('cost', models.DecimalField(decimal_places=10, max_digits=30)),
                ('priced', models.BigIntegerField()),
            ],
            options={
                'db_table': 'reasoning_step_rollup',
                'constraints': [models.UniqueConstraint(fields=('hour', 'agent', 'model'), name='reasoning_steprollup_hour_agent_model')],
            },
        ),
        migrations.RunSQL(MARK_HOURS, migrations.RunSQL.noop),
        migrations.RunSQL(OWE_USAGE, migrations.RunSQL.noop),
    ]
