"""SDK tests run the real client against a real server: gunicorn on the test database.

The data must be committed for the server process to see it, hence ``transactional_db``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reasoning_flow_sdk import AsyncReasoningFlowRecorder, ReasoningFlowRecorder, _turn
from reasoning_flow_sdk import _log as sdk_log

from tests.servers import Gunicorn


@pytest.fixture(autouse=True)
def _no_turn() -> Iterator[None]:
    """Each test starts outside any turn (``new_turn()`` sets a context variable that would last)."""
    token = _turn._turn.set(None)
    yield
    _turn._turn.reset(token)


@pytest.fixture(autouse=True)
def _fresh_sdk_log() -> None:
    sdk_log.reset()


@pytest.fixture
def server_env() -> dict[str, str]:
    """Extra environment for the server; a test overrides it (e.g. to turn producers on)."""
    return {}


@pytest.fixture
def sdk_server(transactional_db: None, server_env: dict[str, str]) -> Iterator[Gunicorn]:
    with Gunicorn(server_env) as server:
        yield server


@pytest.fixture
def sdk_token(make_token: Callable[..., str]) -> str:
    """An agent's token that may also drive the research loop (a dispatcher's)."""
    return make_token("reasoning.write", "reasoning.admin")


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


@pytest.fixture
def recorder_for(
    sdk_server: Gunicorn, sdk_token: str, spool_dir: Path
) -> Iterator[Callable[..., ReasoningFlowRecorder]]:
    """``recorder_for(**options)``: a capturing recorder on the test server, closed after the test."""
    made: list[ReasoningFlowRecorder] = []

    def make(**options: Any) -> ReasoningFlowRecorder:
        options.setdefault("base_url", sdk_server.url)
        options.setdefault("token", sdk_token)
        options.setdefault("spool_dir", spool_dir)
        options.setdefault("flush_interval", 0.05)
        recorder = ReasoningFlowRecorder(enabled=True, **options)
        made.append(recorder)
        return recorder

    yield make
    for recorder in made:
        recorder.close(timeout=1)


@pytest.fixture
def async_recorder_for(
    sdk_server: Gunicorn, sdk_token: str, spool_dir: Path
) -> Callable[..., AsyncReasoningFlowRecorder]:
    def make(**options: Any) -> AsyncReasoningFlowRecorder:
        options.setdefault("base_url", sdk_server.url)
        options.setdefault("token", sdk_token)
        options.setdefault("spool_dir", spool_dir)
        options.setdefault("flush_interval", 0.05)
        return AsyncReasoningFlowRecorder(enabled=True, **options)

    return make
