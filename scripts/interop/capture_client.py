"""What a capture script imports (stdlib only): where to send, and how to name a scenario.

The runner sets ``RFT_INTEROP_OPENAI_URL`` (the fake model server's ``…/v1``) and
``RFT_INTEROP_COLLECTOR`` (the receiver's base URL), and the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (``<collector>/v1/traces``),
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``, ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import os
import urllib.request

OPENAI_URL = os.environ.get("RFT_INTEROP_OPENAI_URL", "")
COLLECTOR = os.environ.get("RFT_INTEROP_COLLECTOR", "")
TRACES_ENDPOINT = f"{COLLECTOR}/v1/traces"


def scenario(name: str) -> None:
    """Requests the receiver gets from now on belong to scenario ``name``: flush the exporter first."""
    request = urllib.request.Request(f"{COLLECTOR}/scenario", data=name.encode(), method="POST")  # noqa: S310 (http on loopback)
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        answer.read()
