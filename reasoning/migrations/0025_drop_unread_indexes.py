"""Three indexes no query reads (issue 42). ``reasoning_flow_root_span`` and ``reasoning_step_span``
were made for finding a span's parent by its span id; OTLP ingest finds flows and steps by their
derived ids instead (the primary key, the step id registry), and the turn graph matches span ids
among rows it has already read. ``reasoning_step_parent_created`` was for walking a step's
children; the pages and exports build the graph from a flow's steps, read by flow. Every flow and
step paid an entry in each it matched. Dropping a partitioned index drops its partitions' too.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("reasoning", "0024_dashboard_rollups"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="reasoningflow",
            name="reasoning_flow_root_span",
        ),
        migrations.RemoveIndex(
            model_name="reasoningstep",
            name="reasoning_step_span",
        ),
        migrations.RemoveIndex(
            model_name="reasoningstep",
            name="reasoning_step_parent_created",
        ),
    ]
