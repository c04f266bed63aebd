from django.db import migrations, models
import django.utils.timezone


class Migration(migrations.Migration):
    dependencies = [
        ("reasoning", "0011_flow_outcome"),
    ]

    operations = [
        migrations.CreateModel(
            name="DriftReport",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("agent", models.CharField(max_length=100)),
                ("session_id", models.CharField(max_length=100)),
                ("session_ended_at", models.DateTimeField()),
                ("computed_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("baseline_sessions", models.PositiveIntegerField()),
                ("decisions", models.PositiveIntegerField()),
                ("signals", models.JSONField(default=dict)),
                (
                    "level",
                    models.CharField(
                        choices=[
                            ("insufficient_baseline", "Insufficient Baseline"),
                            ("normal", "Normal"),
                            ("watch", "Watch"),
                            ("alert", "Alert"),
                            ("investigate", "Investigate"),
                        ],
                        max_length=32,
                    ),
                ),
            ],
            options={
                "db_table": "reasoning_drift_report",
                "indexes": [
                    models.Index(fields=["agent", "-session_ended_at"], name="reasoning_drift_agent_ended")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("agent", "session_id"), name="reasoning_driftreport_agent_session")
                ],
            },
        ),
    ]
