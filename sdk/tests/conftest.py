"""The SDK's own tests: no Django, no database. ``ingest`` is a loopback stand-in for the
server's ``POST /api/reasoning/ingest`` that records each body and answers as scripted."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from reasoning_flow_sdk import _log, _turn


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # None: every item "created"


@dataclass
class FakeIngest:
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)
    # Accepted bodies of the outcome route (POST /api/reasoning/outcomes), with their path.
    outcomes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    script: list[Answer] = field(default_factory=list)
    hang: threading.Event | None = None  # set: requests wait until it is cleared
    lock: threading.Lock = field(default_factory=threading.Lock)

    def steps(self) -> list[dict[str, Any]]:
        """Every step of every accepted body, in arrival order."""
        return [step for body in self.bodies for item in body["flows"] for step in item.get("steps", [])]


def _recorded(body: dict[str, Any]) -> dict[str, Any]:
    results = [
        {"index": n, "flow_id": item.get("flow_id"), "status": "recorded", "reason": "", "errors": {}}
        for n, item in enumerate(body["outcomes"])
    ]
    return {"outcomes": results, "recorded": len(results), "rejected": 0}


def _created(body: dict[str, Any]) -> dict[str, Any]:
    flows = [
        {"index": n, "id": item.get("id"), "status": "created", "flow_state": "active", "step_count": 0, "errors": {}}
        for n, item in enumerate(body["flows"])
    ]
    return {"flows": flows, "created": len(flows), "replayed": 0, "rejected": 0}


@pytest.fixture(autouse=True)
def _no_turn() -> Iterator[None]:
    """Each test starts outside any turn (``new_turn()`` sets a context variable that would last)."""
    token = _turn._turn.set(None)
    yield
    _turn._turn.reset(token)


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    _log.reset()


@pytest.fixture
def ingest() -> Iterator[FakeIngest]:
    import time

    state = FakeIngest()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if state.hang is not None:
                while state.hang.is_set():
                    time.sleep(0.01)
            body = json.loads(raw)
            with state.lock:
                state.times.append(time.monotonic())
                answer = state.script.pop(0) if state.script else Answer()
                if 200 <= answer.status < 300:
                    if "outcomes" in body:
                        state.outcomes.append((self.path, body))
                    else:
                        state.bodies.append(body)
            default = _recorded(body) if "outcomes" in body else _created(body)
            payload = json.dumps(answer.body if answer.body is not None else default).encode()
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass

    server = Server(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        if state.hang is not None:
            state.hang.clear()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def dead_url() -> str:
    """A loopback port nothing listens on: every connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"
