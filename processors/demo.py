"""Demo registry rows for ``load_demo``: the built-ins, and the vendors as pending compliance."""

from __future__ import annotations

from processors.catalogue import KNOWN
from processors.services import register

DEMO_ACTOR = "system:demo"


def load_demo_data() -> str:
    """Register every catalogue processor; idempotent (existing rows are left as they are).
    Built-ins are active; OpenAI, Voyage and the dispatcher start pending compliance."""
    created = sum(register(key, actor=DEMO_ACTOR)[1] for key in KNOWN)
    return f"{len(KNOWN)} processors ({created} new)"
