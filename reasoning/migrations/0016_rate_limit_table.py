from __future__ import annotations

from django.db import migrations

# The rate-limit counters (core.throttling): one row per key, overwritten when a new window
# starts. Unlogged: no WAL on the write path, and a crash merely forgets the counts. Not a
# model, so the test flush leaves it alone; keys carry token, user and patient ids, which are
# never reused. The application role gets its grants from migrate (audit.privileges).
CREATE = """
CREATE UNLOGGED TABLE rft_rate_limit (
    key text PRIMARY KEY,
    window_start bigint NOT NULL,
    hits integer NOT NULL
) WITH (fillfactor = 50)
"""


class Migration(migrations.Migration):
    dependencies = [("reasoning", "0015_api_token_rotation_and_last_use")]
    operations = [migrations.RunSQL(CREATE, "DROP TABLE rft_rate_limit")]
