"""The research dispatcher on its own: no Django, no database. Its flows go to a stand-in for the
server's ingest route (a stdlib HTTP server in a thread), which keeps every piece it is sent."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from reasoning_flow_sdk import dispatcher
from reasoning_flow_sdk.agents import OfflineModel
from reasoning_flow_sdk.dispatcher import Dispatcher, serving, sign

SECRET = "unit-test-dispatcher-secret-0123456789abcdef"  # noqa: S105  (a test secret)
# Distinctive, so a leak into the log cannot be a coincidence.
QUESTION = "Does Wilhelmina Quixote's lisinopril dose explain her morning readings?"
NOW = 1_780_000_000.0


def document(**overrides: Any) -> dict[str, Any]:
    """A webhook body as the server's consumer sends it."""
    return {
        "id": "0d9b6f0e-7c1a-4f7e-9a51-3e6a1b2c4d5f",
        "trigger_type": "user_question",
        "trigger_ref": "chat/42",
        "question": QUESTION,
        "reason": "weak_composite_k",
        "source": "researcher_auto_enqueue",
        "retry_count": 0,
        "dispatched_from_backlog": True,
        "created_at": "2026-12-01T09:00:00Z",
        "complete_path": "/admin/v1/reasoning/research/backlog/0d9b6f0e-7c1a-4f7e-9a51-3e6a1b2c4d5f/complete",
        **overrides,
    }


def post(
    url: str,
    body: dict[str, Any] | bytes,
    *,
    key: str | None = "0d9b6f0e-7c1a-4f7e-9a51-3e6a1b2c4d5f.0",
    secret: str = SECRET,
    timestamp: float | None = None,
    signed_timestamp: float | None = None,
) -> httpx.Response:
    """POST ``body`` signed as the consumer signs it (``signed_timestamp``: sign another time than sent)."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = str(int(time.time() if timestamp is None else timestamp))
    signed = sent if signed_timestamp is None else str(int(signed_timestamp))
    headers = {
        "Content-Type": "application/json",
        "X-RFT-Timestamp": sent,
        "X-RFT-Signature": sign(secret, signed, raw),
    }
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(url, content=raw, headers=headers, timeout=30)


# --- The stand-in ingest route -------------------------------------------------------------


class Ingest:
    """Keeps every flow piece posted to /api/reasoning/ingest and answers 200, as the server does."""

    def __init__(self) -> None:
        self.pieces: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def flows(self) -> dict[str, dict[str, Any]]:
        """The flows received, by id, their pieces merged (steps appended)."""
        merged: dict[str, dict[str, Any]] = {}
        with self.lock:
            for piece in self.pieces:
                flow = merged.setdefault(piece["id"], {"steps": []})
                flow["steps"] += piece.get("steps", [])
                flow.update({name: value for name, value in piece.items() if name != "steps"})
        return merged


@contextlib.contextmanager
def ingest_on(port: int = 0) -> Iterator[tuple[Ingest, str]]:
    state = Ingest()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.pieces.extend(body["flows"])
            answer = json.dumps({"flows": [{"index": n, "status": "created"} for n in range(len(body["flows"]))]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def ingest() -> Iterator[tuple[Ingest, str]]:
    with ingest_on() as running:
        yield running


StartDispatcher = Callable[..., tuple[Dispatcher, str]]


@pytest.fixture
def start(ingest: tuple[Ingest, str], tmp_path: Path) -> Iterator[StartDispatcher]:
    """``start(**options)``: a dispatcher recording on the stand-in ingest, serving on a free port."""
    with contextlib.ExitStack() as stack:

        def make(**options: Any) -> tuple[Dispatcher, str]:
            options.setdefault("base_url", ingest[1])
            options.setdefault("token", "unit-test-token")
            options.setdefault("spool_dir", tmp_path / "spool")
            options.setdefault("flush_interval", 0.02)
            made = stack.enter_context(Dispatcher(SECRET, **options))
            server = stack.enter_context(serving(made))
            return made, server.url

        yield make


# --- Health ------------------------------------------------------------------------------


def test_healthz_is_200(start: StartDispatcher) -> None:
    _, url = start()

    response = httpx.get(url + "healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


# --- Who may call ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [
        {"secret": "another-secret-that-is-long-enough-0123456789"},
        {"signed_timestamp": time.time() - 1},  # a valid signature of another timestamp
    ],
    ids=["wrong_secret", "signature_of_another_timestamp"],
)
def test_bad_signature_is_401_and_runs_nothing(
    start: StartDispatcher, ingest: tuple[Ingest, str], sent: dict[str, Any]
) -> None:
    made, url = start()

    response = post(url, document(), **sent)

    assert response.status_code == 401
    assert response.json()["error"] == "bad_signature"
    assert made.recorder.flush(5)
    assert ingest[0].flows() == {}


def test_missing_signature_is_401(start: StartDispatcher) -> None:
    _, url = start()

    response = httpx.post(url, json=document(), headers={"Idempotency-Key": "k.0", "X-RFT-Timestamp": "1"})

    assert response.status_code == 401
    assert response.json()["error"] == "bad_signature"


@pytest.mark.parametrize(("offset", "status"), [(-300, 200), (-301, 401), (301, 401), (-3600, 401)])
def test_timestamp_more_than_300_s_off_is_401(
    start: StartDispatcher, ingest: tuple[Ingest, str], offset: int, status: int
) -> None:
    made, url = start(clock=lambda: NOW)

    response = post(url, document(), timestamp=NOW + offset)

    assert response.status_code == status
    if status == 401:
        assert response.json()["error"] == "stale_timestamp"
        assert made.recorder.flush(5)
        assert ingest[0].flows() == {}


# --- What may be sent ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"research this, please",
        b"[]",
        json.dumps({key: value for key, value in document().items() if key != "question"}).encode(),
        json.dumps(document(question="")).encode(),
        json.dumps(document(id=7)).encode(),
        json.dumps(document(trigger_ref=None)).encode(),
        json.dumps(document(retry_count="0")).encode(),
    ],
    ids=["not_json", "not_an_object", "no_question", "empty_question", "id_not_text", "ref_null", "retry_as_text"],
)
def test_body_that_is_not_the_documented_json_is_400(
    start: StartDispatcher, ingest: tuple[Ingest, str], body: bytes
) -> None:
    made, url = start()

    response = post(url, body)

    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"
    assert made.recorder.flush(5)
    assert ingest[0].flows() == {}


def test_missing_idempotency_key_is_400(start: StartDispatcher) -> None:
    _, url = start()

    response = post(url, document(), key=None)

    assert response.status_code == 400
    assert response.json()["error"] == "bad_idempotency_key"


# --- The research ----------------------------------------------------------------------------


def test_flow_is_on_the_server_before_the_answer(start: StartDispatcher, ingest: tuple[Ingest, str]) -> None:
    _, url = start()

    response = post(url, document())

    assert response.status_code == 200
    flow_id = response.json()["flow_id"]
    # Read at once: the answer came after the flow reached the server.
    flow = ingest[0].flows()[flow_id]
    assert flow["agent"] == "researcher"
    assert flow["trigger_ref"] == "chat/42"
    assert flow["dispatched_from_backlog"] is True
    assert flow["close"]["flow_state"] == "completed"
    assert [step["kind"] for step in flow["steps"]] == ["retrieval", "llm_prompt", "verdict"]
    assert flow["steps"][0]["inputs"] == {"question": QUESTION}


def test_same_idempotency_key_replays_the_answer_and_runs_once(
    start: StartDispatcher, ingest: tuple[Ingest, str]
) -> None:
    _, url = start()

    first = post(url, document(), key="req-1.0")
    again = post(url, document(), key="req-1.0")
    retried_row = post(url, document(retry_count=1), key="req-1.1")

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert retried_row.status_code == 200
    assert retried_row.json()["flow_id"] != first.json()["flow_id"]
    assert sorted(ingest[0].flows()) == sorted([first.json()["flow_id"], retried_row.json()["flow_id"]])


def test_concurrent_calls_with_one_key_run_once(start: StartDispatcher, ingest: tuple[Ingest, str]) -> None:
    _, url = start()
    answers: list[httpx.Response] = []
    barrier = threading.Barrier(4)

    def call() -> None:
        barrier.wait(timeout=10)
        answers.append(post(url, document(), key="req-2.0"))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert [answer.status_code for answer in answers] == [200] * 4
    assert len({answer.json()["flow_id"] for answer in answers}) == 1
    assert len(ingest[0].flows()) == 1


def test_server_unreachable_is_503_then_the_retry_gets_the_same_flow(start: StartDispatcher) -> None:
    port = free_port()  # nothing listens here yet
    made, url = start(base_url=f"http://127.0.0.1:{port}", flush_timeout=0.3)

    refused = post(url, document())

    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "5"
    assert refused.json()["error"] == "flow_not_delivered"
    flow_id = refused.json()["flow_id"]
    with ingest_on(port) as (back, _):
        made.flush_timeout = 10.0  # the spooled flow goes out on the sender's next attempt
        retried = post(url, document())

        assert retried.status_code == 200
        assert retried.json() == {"flow_id": flow_id}
        assert list(back.flows()) == [flow_id]


def test_the_question_never_reaches_the_log(start: StartDispatcher, caplog: pytest.LogCaptureFixture) -> None:
    _, url = start(base_url=f"http://127.0.0.1:{free_port()}", flush_timeout=0.2)
    caplog.set_level(logging.DEBUG)

    answer = post(url, document())  # 503: the unhappy path logs the most

    assert answer.status_code == 503
    assert "research request 0d9b6f0e-7c1a-4f7e-9a51-3e6a1b2c4d5f" in caplog.text
    assert "Quixote" not in caplog.text


def test_model_decides_the_flow_metrics(start: StartDispatcher, ingest: tuple[Ingest, str]) -> None:
    _, url = start(model=OfflineModel(weak_share=1.0))

    flow_id = post(url, document()).json()["flow_id"]

    assert ingest[0].flows()[flow_id]["close"]["outcome_metrics"]["composite_k"] < 0.6


# --- The console command ----------------------------------------------------------------------


def arguments(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    dispatcher.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("RESEARCH_DISPATCHER_SECRET", "RESEARCH_DISPATCHER_SECRET_FILE", "REASONING_FLOW_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("REASONING_FLOW_TOKEN", "REASONING_FLOW_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--url", "http://127.0.0.1:1", "--token", "t"], "RESEARCH_DISPATCHER_SECRET is not set"),
        (["--secret", "short", "--url", "http://127.0.0.1:1", "--token", "t"], "at least 32 characters"),
        (["--secret", SECRET, "--token", "t"], "REASONING_FLOW_URL is not set"),
        (["--secret", SECRET, "--url", "http://127.0.0.1:1"], "REASONING_FLOW_TOKEN is not set"),
    ],
    ids=["no_secret", "short_secret", "no_url", "no_token"],
)
def test_run_refuses_to_start_without_its_settings(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert dispatcher.run(arguments(*argv)) == 2
    assert named in capsys.readouterr().err


def test_run_reads_the_secret_from_the_environment_and_stops_on_sigterm(
    clean_env: pytest.MonkeyPatch, ingest: tuple[Ingest, str], tmp_path: Path
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    clean_env.setenv("RESEARCH_DISPATCHER_SECRET_FILE", str(secret_file))
    clean_env.setenv("REASONING_FLOW_URL", ingest[1])
    clean_env.setenv("REASONING_FLOW_TOKEN", "unit-test-token")
    port = free_port()
    answers: list[int] = []
    default_handler = signal.getsignal(signal.SIGTERM)

    def call_then_stop() -> None:
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.TransportError):
                    answers.append(post(f"http://127.0.0.1:{port}/", document()).status_code)
                    return
                time.sleep(0.02)
        finally:
            if signal.getsignal(signal.SIGTERM) is not default_handler:  # run() is serving: stop it
                os.kill(os.getpid(), signal.SIGTERM)

    caller = threading.Thread(target=call_then_stop)
    caller.start()
    code = dispatcher.run(arguments("--port", str(port), "--spool-dir", str(tmp_path / "spool")))
    caller.join(timeout=10)

    assert code == 0
    assert answers == [200]
    assert len(ingest[0].flows()) == 1
    assert signal.getsignal(signal.SIGTERM) is default_handler
