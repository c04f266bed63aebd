"""Settings: each argument of a recorder, else its environment variable, else the default.

A bad value never raises into the agent: it is logged once and the default is used.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from reasoning_flow_sdk._log import warn_limited

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def default_spool_dir(base_url: str | None) -> Path:
    """One spool per server: a recorder delivers every batch of its spool to its own server."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    server = hashlib.sha256((base_url or "unset").encode()).hexdigest()[:16]
    return Path(cache) / "reasoning-flow-sdk" / "spool" / server


def env_flag(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value not in FALSE:
        warn_limited(f"config:{name}", "%s=%r is not a boolean (1/0, true/false); using %s", name, raw, default)
        return default
    return False


def _number(name: str, given: float | None, default: float, minimum: float) -> float:
    if given is not None:
        value: object = given
    else:
        raw = os.environ.get(name)
        if raw is None or not raw.strip():
            return default
        value = raw
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        warn_limited(f"config:{name}", "%s=%r is not a number; using %s", name, value, default)
        return default
    if number < minimum or number != number:
        warn_limited(f"config:{name}", "%s=%r is below %s; using %s", name, value, minimum, default)
        return default
    return number


@dataclass(frozen=True)
class Settings:
    base_url: str | None
    token: str | None
    spool_dir: Path
    batch_steps: int  # a batch is sent when it holds this many steps …
    flush_interval: float  # … or when its oldest record has waited this long (seconds)
    spool_max_bytes: int
    max_queue: int  # records held in memory before the sender has batched them
    timeout: float  # seconds for one HTTP request

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        token: str | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        *,
        batch_steps: int | None = None,
        flush_interval: float | None = None,
        spool_max_bytes: int | None = None,
        max_queue: int | None = None,
        timeout: float | None = None,
    ) -> Settings:
        url = (base_url or os.environ.get("REASONING_FLOW_URL") or "").rstrip("/") or None
        spool = spool_dir or os.environ.get("REASONING_FLOW_SPOOL_DIR") or default_spool_dir(url)
        return cls(
            base_url=url,
            token=token or os.environ.get("REASONING_FLOW_TOKEN") or None,
            spool_dir=Path(spool),
            # The ingest route takes at most 1,000 steps per request.
            batch_steps=min(int(_number("REASONING_FLOW_BATCH_STEPS", batch_steps, 100, 1)), 1000),
            flush_interval=_number("REASONING_FLOW_FLUSH_INTERVAL_MS", _ms(flush_interval), 200, 1) / 1000,
            spool_max_bytes=int(_number("REASONING_FLOW_SPOOL_MAX_BYTES", spool_max_bytes, 256 * 2**20, 2**16)),
            max_queue=int(_number("REASONING_FLOW_MAX_QUEUE", max_queue, 100_000, 100)),
            timeout=_number("REASONING_FLOW_TIMEOUT_S", timeout, 10.0, 0.1),
        )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
