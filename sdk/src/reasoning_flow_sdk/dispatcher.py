"""The research dispatcher: the webhook the server's backlog consumer calls (RESEARCH_DISPATCHER_URL).

Each signed POST (any path) carries one backlog request. The dispatcher runs the reference
Researcher on its question, with dispatched_from_backlog on the flow it opens, waits until
that flow is on the server and answers 200 {"flow_id": ...}. GET /healthz answers 200. The
contract is the server's docs/research-loop.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import re
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from reasoning_flow_sdk._log import logger
from reasoning_flow_sdk.agents import OfflineModel, Researcher
from reasoning_flow_sdk.recorder import ReasoningFlowRecorder

# Names of environment variables, not their values.
SECRET_VARIABLE = "RESEARCH_DISPATCHER_SECRET"  # noqa: S105
URL_VARIABLE = "REASONING_FLOW_URL"
TOKEN_VARIABLE = "REASONING_FLOW_TOKEN"  # noqa: S105
SIGNATURE_HEADER = "X-RFT-Signature"
TIMESTAMP_HEADER = "X-RFT-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_SKEW_SECONDS = 300
MIN_SECRET_LENGTH = 32  # what the server requires of RESEARCH_DISPATCHER_SECRET
MAX_BODY_BYTES = 64 * 1024  # a request document is far smaller (its question is at most 2,000 characters)
MAX_KEY_LENGTH = 200
MAX_ANSWERS = 10_000  # idempotency keys remembered, oldest forgotten first
DEFAULT_PORT = 8700
# Under the server's RESEARCH_DISPATCHER_TIMEOUT_S (30 s), so the consumer hears a 503 rather than a timeout.
DEFAULT_FLUSH_TIMEOUT = 10.0
RETRY_AFTER_SECONDS = 5
_TIMESTAMP = re.compile(r"\d{1,12}", re.ASCII)


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BacklogRequest:
    """The fields of a webhook body the dispatcher uses."""

    id: str
    trigger_type: str
    trigger_ref: str
    retry_count: int
    question: str = field(repr=False)  # may hold PHI: kept out of reprs and logs


def parse_request(body: bytes) -> BacklogRequest:
    """The webhook body as documented; ValueError (its message names the problem) otherwise."""
    try:
        document = json.loads(body)
    except ValueError:
        raise ValueError("the body is not JSON") from None
    if not isinstance(document, dict):
        raise ValueError("the body is not a JSON object")
    for name in ("id", "trigger_type", "question"):
        value = document.get(name)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name} must be a non-empty string")
    trigger_ref = document.get("trigger_ref", "")
    if not isinstance(trigger_ref, str):
        raise ValueError("trigger_ref must be a string")
    retry_count = document.get("retry_count", 0)
    if not isinstance(retry_count, int) or isinstance(retry_count, bool) or retry_count < 0:
        raise ValueError("retry_count must be a non-negative integer")
    return BacklogRequest(document["id"], document["trigger_type"], trigger_ref, retry_count, document["question"])


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-RFT-Signature`` value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def _error(status: int, label: str, message: str, **extra: Any) -> Answer:
    return Answer(status, {"error": label, "message": message, **extra})


class _Entry:
    """One idempotency key: its research runs once; its answer is final once the flow is on the server."""

    def __init__(self) -> None:
        self.ran = threading.Event()
        self.flow_id: str | None = None
        self.final: Answer | None = None


class Dispatcher:
    """Verifies, deduplicates and answers webhook calls; owns the recorder its flows go through.

    ``base_url``, ``token`` and ``spool_dir`` fall back to the recorder's environment variables;
    ``recorder_options`` go to ``ReasoningFlowRecorder`` (e.g. ``flush_interval``). ``model`` is
    the Researcher's model (``OfflineModel()`` by default). Close it (or use ``with``) to flush
    and stop the recorder.
    """

    def __init__(
        self,
        secret: str,
        *,
        base_url: str | None = None,
        token: str | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
        model: OfflineModel | None = None,
        flush_timeout: float = DEFAULT_FLUSH_TIMEOUT,
        max_answers: int = MAX_ANSWERS,
        clock: Callable[[], float] = time.time,
        **recorder_options: Any,
    ) -> None:
        if not secret:
            raise ValueError(f"the dispatcher needs the signing secret ({SECRET_VARIABLE})")
        self._secret = secret
        self.flush_timeout = flush_timeout
        self._max_answers = max_answers
        self._clock = clock
        self._answers: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.recorder: ReasoningFlowRecorder = ReasoningFlowRecorder(
            base_url, token, spool_dir, enabled=True, **recorder_options
        )
        self.researcher = Researcher(self.recorder, model or OfflineModel())

    def close(self, timeout: float = 5.0) -> bool:
        """Flush (up to ``timeout``) and stop the recorder; what is left stays in the spool."""
        return self.recorder.close(timeout)

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def handle(self, headers: Mapping[str, str], body: bytes) -> Answer:
        """Answer one webhook call (``headers``: any case).

        1. The signature must be ``sign(secret, X-RFT-Timestamp, body)`` and the timestamp
           within 300 s of now: otherwise 401.
        2. The body must be the documented request and ``Idempotency-Key`` present: otherwise 400.
        3. A key already answered gets the same answer again; nothing runs.
        4. The first call with a key runs the Researcher (others with that key wait for it).
        5. The recorder is flushed: the flow is on the server → 200 ``{"flow_id"}``, the key's
           final answer; not within ``flush_timeout`` → 503 with Retry-After, and the retry
           (same key) waits for the same flow again.
        """
        lowered = {name.lower(): value for name, value in headers.items()}
        refused = self._verify(lowered, body)
        if refused is not None:
            return refused
        try:
            request = parse_request(body)
        except ValueError as error:
            return _error(400, "bad_request", str(error))
        key = lowered.get(IDEMPOTENCY_HEADER.lower(), "")
        if not key or len(key) > MAX_KEY_LENGTH:
            return _error(400, "bad_idempotency_key", f"{IDEMPOTENCY_HEADER} must be 1 to {MAX_KEY_LENGTH} characters")
        return self._answer(key, request)

    def _verify(self, headers: Mapping[str, str], body: bytes) -> Answer | None:
        timestamp = headers.get(TIMESTAMP_HEADER.lower(), "")
        given = headers.get(SIGNATURE_HEADER.lower(), "")
        expected = sign(self._secret, timestamp, body)
        if not hmac.compare_digest(expected.encode(), given.encode(errors="replace")):
            logger.warning("research dispatcher: refused a call with a bad or missing %s", SIGNATURE_HEADER)
            return _error(401, "bad_signature", f"{SIGNATURE_HEADER} does not match the body")
        if not _TIMESTAMP.fullmatch(timestamp) or abs(self._clock() - int(timestamp)) > MAX_SKEW_SECONDS:
            logger.warning("research dispatcher: refused a call whose %s is not within 300 s", TIMESTAMP_HEADER)
            return _error(401, "stale_timestamp", f"{TIMESTAMP_HEADER} is not within {MAX_SKEW_SECONDS} s of now")
        return None

    def _answer(self, key: str, request: BacklogRequest) -> Answer:
        entry, first = self._entry(key)
        if entry.final is not None:
            logger.info("research request %s: replayed the answer for %s", request.id, key)
            return entry.final
        if first:
            self._research(entry, request)
        elif not entry.ran.wait(self.flush_timeout):
            return self._not_yet(request, None)
        if entry.final is not None:  # the research failed
            return entry.final
        if self.recorder.flush(self.flush_timeout):
            if entry.flow_id is not None and self.recorder.refused(entry.flow_id):
                # The server would not store the flow (a 4xx, logged by the recorder): no flow to name.
                logger.warning("research request %s: the server refused flow %s", request.id, entry.flow_id)
                entry.final = Answer(200, {"error": "flow_rejected"})
                return entry.final
            entry.final = Answer(200, {"flow_id": entry.flow_id})
            logger.info("research request %s: flow %s is on the server", request.id, entry.flow_id)
            return entry.final
        return self._not_yet(request, entry.flow_id)

    def _entry(self, key: str) -> tuple[_Entry, bool]:
        """The key's entry, and whether this call created it."""
        with self._lock:
            entry = self._answers.get(key)
            if entry is not None:
                self._answers.move_to_end(key)
                return entry, False
            entry = self._answers[key] = _Entry()
            while len(self._answers) > self._max_answers:
                self._answers.popitem(last=False)
            return entry, True

    def _research(self, entry: _Entry, request: BacklogRequest) -> None:
        try:
            result = self.researcher.run(
                request.question, trigger_ref=request.trigger_ref, dispatched_from_backlog=True
            )
            entry.flow_id = result.flow_id
            logger.info(
                "research request %s (retry %d): recorded flow %s", request.id, request.retry_count, result.flow_id
            )
        except Exception as error:
            # The class name only: an exception's message may quote the question.
            logger.error("research request %s: the research failed (%s)", request.id, type(error).__name__)
            entry.final = Answer(200, {"error": "research_failed"})
        finally:
            entry.ran.set()

    def _not_yet(self, request: BacklogRequest, flow_id: str | None) -> Answer:
        logger.warning(
            "research request %s: flow %s is not on the server after %.1f s; answering 503",
            request.id,
            flow_id or "(still running)",
            self.flush_timeout,
        )
        answer = _error(
            503,
            "flow_not_delivered",
            "the research flow has not reached the server yet; retry with the same Idempotency-Key",
            flow_id=flow_id,
        )
        return Answer(answer.status, answer.body, {"Retry-After": str(RETRY_AFTER_SECONDS)})


class _Handler(BaseHTTPRequestHandler):
    server: DispatcherServer
    protocol_version = "HTTP/1.1"  # keep-alive: every answer has a Content-Length
    server_version = "reasoning-flow-dispatcher"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/healthz":
            self._send(Answer(200, {"status": "ok"}))
        else:
            self._send(_error(404, "not_found", "only GET /healthz and POST exist here"))

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length", "")
        if not length.isascii() or not length.isdigit():
            self.close_connection = True
            self._send(_error(411, "length_required", "send the body with a Content-Length"))
            return
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(_error(413, "body_too_large", f"the body is over {MAX_BODY_BYTES} bytes"))
            return
        body = self.rfile.read(int(length))
        self._send(self.server.dispatcher.handle(dict(self.headers.items()), body))

    def _send(self, answer: Answer) -> None:
        payload = json.dumps(answer.body).encode()
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        # The request line holds the path only; the question travels in the body.
        logger.debug("research dispatcher %s: " + format, self.address_string(), *args)


class DispatcherServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.exception("research dispatcher: a call from %s failed", client_address[0])


def serve(dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0) -> DispatcherServer:
    """A bound server (``port`` 0: a free one, see ``.url``); run ``serve_forever()`` to answer."""
    return DispatcherServer((host, port), dispatcher)


@contextlib.contextmanager
def serving(dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0) -> Iterator[DispatcherServer]:
    """Answer in a background thread for the block; stop cleanly after (the dispatcher stays open)."""
    server = serve(dispatcher, host, port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- The console command ----------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument(
        "--secret",
        default=None,
        help=f"the webhook signing secret (default ${SECRET_VARIABLE}, or the file ${SECRET_VARIABLE}_FILE names; "
        "prefer those: an argument is visible to other users in the process list)",
    )
    parser.add_argument("--url", default=None, help=f"the Reasoning Flow server (default ${URL_VARIABLE})")
    parser.add_argument(
        "--token", default=None, help=f"a reasoning.write token for that server (default ${TOKEN_VARIABLE})"
    )
    parser.add_argument("--spool-dir", default=None, help="the recorder's spool (default $REASONING_FLOW_SPOOL_DIR)")
    parser.add_argument(
        "--flush-timeout",
        type=float,
        default=DEFAULT_FLUSH_TIMEOUT,
        help=f"seconds to wait for a flow to reach the server before answering 503 (default {DEFAULT_FLUSH_TIMEOUT:g})",
    )


def _from_env(name: str) -> str | None:
    """``$NAME``, else the content of the file ``$NAME_FILE`` names (as the server reads its secrets)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except OSError as error:
        raise ValueError(f"{name}_FILE: cannot read {path!r} ({error.strerror})") from None


def _settings(args: argparse.Namespace) -> tuple[str, str, str]:
    """(secret, url, token); ValueError naming what is missing or wrong."""
    secret = args.secret or _from_env(SECRET_VARIABLE)
    if not secret:
        raise ValueError(f"{SECRET_VARIABLE} is not set (or pass --secret): the server signs every dispatch with it")
    if len(secret) < MIN_SECRET_LENGTH:
        raise ValueError(f"{SECRET_VARIABLE} must be at least {MIN_SECRET_LENGTH} characters, as the server requires")
    url = args.url or os.environ.get(URL_VARIABLE)
    if not url:
        raise ValueError(f"{URL_VARIABLE} is not set (or pass --url): the Reasoning Flow server to record flows on")
    token = args.token or _from_env(TOKEN_VARIABLE)
    if not token:
        raise ValueError(f"{TOKEN_VARIABLE} is not set (or pass --token): a reasoning.write token for {url}")
    if args.flush_timeout <= 0:
        raise ValueError("--flush-timeout must be positive")
    return secret, url, token


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C; 0 after a clean stop, 2 on bad configuration, 1 if the port is taken."""
    try:
        secret, url, token = _settings(args)
    except ValueError as error:
        print(f"reasoning-flow-sdk dispatcher: {error}", file=sys.stderr)
        return 2
    dispatcher = Dispatcher(
        secret, base_url=url, token=token, spool_dir=args.spool_dir, flush_timeout=args.flush_timeout
    )
    try:
        server = serve(dispatcher, args.host, args.port)
    except OSError as error:
        print(f"reasoning-flow-sdk dispatcher: cannot listen on {args.host}:{args.port} ({error})", file=sys.stderr)
        dispatcher.close()
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(target=server.serve_forever, name="research-dispatcher", daemon=True)
    thread.start()
    logger.info("research dispatcher listening on %s, recording on %s", server.url, url)
    try:
        stop.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        logger.info("research dispatcher stopping")
        server.shutdown()
        server.server_close()
        thread.join()
        if not dispatcher.close():
            logger.warning("research dispatcher: some flows did not reach the server; they wait in the spool")
    return 0


__all__ = [
    "Answer",
    "BacklogRequest",
    "Dispatcher",
    "DispatcherServer",
    "add_arguments",
    "parse_request",
    "run",
    "serve",
    "serving",
    "sign",
]
