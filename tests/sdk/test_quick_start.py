"""sdk/README.md's quick start, run exactly as printed, records a flow (issue 41, part 6).

The snippet is read from the README (so the test follows the documentation), given a token and
the test server's address, and run in a fresh interpreter without REASONING_FLOW_CAPTURE_ENABLED:
a recorder built with a URL and a token captures; the interpreter's exit delivers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reasoning.models import ReasoningFlow, ReasoningStep
from tests.servers import Gunicorn

README = Path(__file__).resolve().parents[2] / "sdk" / "README.md"


def quick_start() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "the quick start has no python block"
    return match.group(1)


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("REASONING_FLOW_")}
    env["REASONING_FLOW_SPOOL_DIR"] = str(tmp_path / "spool")
    return env


def test_the_quick_start_as_printed_records_its_flow(
    sdk_server: Gunicorn, sdk_token: str, clean_env: dict[str, str]
) -> None:
    snippet = quick_start().replace("http://127.0.0.1:8000", sdk_server.url)
    assert "enabled=" not in snippet and "CAPTURE" not in snippet  # nothing switched on by hand

    subprocess.run([sys.executable, "-c", f"TOKEN = {sdk_token!r}\n{snippet}"], check=True, timeout=60, env=clean_env)

    flow = ReasoningFlow.objects.get(trigger_ref="chat/42")
    assert (flow.flow_state, flow.agent) == ("completed", "researcher")
    assert list(ReasoningStep.objects.filter(flow=flow).order_by("position").values_list("kind", flat=True)) == [
        "retrieval",
        "verdict",
    ]


def test_capture_switched_off_says_so_once_and_records_nothing(
    sdk_server: Gunicorn, sdk_token: str, clean_env: dict[str, str]
) -> None:
    snippet = quick_start().replace("http://127.0.0.1:8000", sdk_server.url)

    ran = subprocess.run(
        [sys.executable, "-c", f"TOKEN = {sdk_token!r}\n{snippet}\n{snippet}"],
        check=True,
        timeout=60,
        env={**clean_env, "REASONING_FLOW_CAPTURE_ENABLED": "0"},
        capture_output=True,
        text=True,
    )

    assert ran.stderr.count("reasoning flow capture is off") == 1, ran.stderr
    assert not ReasoningFlow.objects.filter(trigger_ref="chat/42").exists()
