from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("reasoning", "0002_token_patient_reasoning_content")]

    operations = [
        migrations.AddField(
            model_name="reasoningflow",
            name="summary_guard_rule",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
