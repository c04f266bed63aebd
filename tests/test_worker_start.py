"""A web worker loads the URLconf, and with it every view module, as it starts (``config.asgi``),
so that its first request does not wait the ~0.15 s of CPU the imports take."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys
import config.asgi  # what each gunicorn worker imports (config.gunicorn.APP)
print(",".join(name for name in ("config.urls", "reasoning.urls", "reasoning.recording.routes") if name in sys.modules))
"""


def test_a_worker_has_its_urls_and_views_loaded_before_its_first_request() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "config.urls,reasoning.urls,reasoning.recording.routes"


FREEZE_PROBE = """
import gc
import config.asgi
print(gc.get_freeze_count(), len(gc.get_objects()))
"""


def test_a_worker_keeps_what_it_loaded_out_of_the_cyclic_collectors_passes() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    frozen, tracked = map(int, done.stdout.split())
    # Everything the worker loaded is frozen; the collector tracks only what came after.
    assert frozen > 50_000
    assert tracked < frozen / 10
