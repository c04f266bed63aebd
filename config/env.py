"""Typed environment helpers.

Every helper raises ``ImproperlyConfigured`` naming the variable when the value is
malformed, so a bad deployment fails at start-up instead of at the first request.
A secret may also be given as ``<NAME>_FILE`` pointing at a file that holds it.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    """The variable's value, or the content of the file named by ``<NAME>_FILE`` (stripped).

    Setting both (non-empty) is refused: which one wins would be a guess. An empty ``NAME``
    beside ``NAME_FILE`` (``NAME=`` left in a compose file) defers to the file.
    """
    value = os.environ.get(name)
    file_name = os.environ.get(f"{name}_FILE")
    if value and file_name:
        raise ImproperlyConfigured(f"{name} and {name}_FILE are both set: set one")
    if value is not None and not file_name:
        return value
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_name!r} ({exc.strerror})") from exc
    return default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false/1/0), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum:g}, got {raw.strip()}")
    return value


def env_list(name: str, default: Sequence[str] = ()) -> list[str]:
    raw = env_str(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, choices: Sequence[str], default: str) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return value


def env_networks(name: str) -> list[str]:
    """A comma-separated list of IP addresses and networks (``10.0.0.5, 10.1.0.0/16``), each
    normalised (``10.0.0.5/32``); empty when unset. ``*`` is refused: trusting every peer
    would let any client name its own address."""
    raw = os.environ.get(name, "")
    networks = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        if item == "*":
            raise ImproperlyConfigured(f"{name}: '*' would trust every client; name the proxies' addresses")
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or network") from exc
    return networks


# The prices a model override may set, in USD per million tokens (genai-prices' names).
PRICE_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok")


def env_prices(name: str) -> dict[str, dict[str, Decimal]]:
    """Model prices as JSON: ``{"clinic-llm": {"input_mtok": 0.2, "output_mtok": 0.6}}`` (USD per
    million tokens; ``cache_read_mtok`` optional, else cached input costs ``input_mtok``). Model
    names are matched without case. Empty when unset."""
    raw = env_str(name)
    if not raw or not raw.strip():
        return {}
    try:
        data = json.loads(raw, parse_float=Decimal, parse_int=Decimal)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object of model prices ({exc})") from exc
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f'{name} must be a JSON object: {{"model": {{"input_mtok": 1, "output_mtok": 2}}}}')
    prices: dict[str, dict[str, Decimal]] = {}
    for model, price in data.items():
        if not model.strip() or not isinstance(price, dict):
            raise ImproperlyConfigured(f"{name}: {model!r} must name a model and map to an object of prices")
        unknown = sorted(set(price) - set(PRICE_KEYS))
        if unknown:
            raise ImproperlyConfigured(f"{name}: {model!r} has unknown keys {unknown}; known: {', '.join(PRICE_KEYS)}")
        for key in ("input_mtok", "output_mtok"):
            if key not in price:
                raise ImproperlyConfigured(f"{name}: {model!r} needs {key}")
        for key, value in price.items():
            if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
                raise ImproperlyConfigured(f"{name}: {model!r}.{key} must be a number >= 0, got {value!r}")
        prices[model.strip().lower()] = dict(price)
    return prices
