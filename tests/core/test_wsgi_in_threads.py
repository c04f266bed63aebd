"""core.asgi.WsgiInThreads: a WSGI application behind uvicorn, the whole request in, one hand-off
to a thread, the answer out; a streamed answer iterated in the thread that made it.

Served for real: a uvicorn server on loopback in front of a small WSGI application, and the
project's web server (gunicorn, ``config.asgi``) streaming the evaluation export, whose generator
reads the database inside a snapshot transaction."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from django.conf import settings
from django.test import Client

from core.asgi import ThreadHandOff, WsgiInThreads
from tests.factories import make_flow
from tests.servers import Gunicorn, free_port

StartResponse = Callable[..., Any]


class Recorded:
    """What the application saw, and in which threads it ran."""

    def __init__(self) -> None:
        self.environ: dict[str, Any] = {}
        self.body = b""
        self.threads: dict[str, int] = {}
        self.closed = 0
        self.closing = threading.Event()


class Answer(list[bytes]):
    """An in-memory answer (``streaming`` False, as Django's ``HttpResponse``) that notes its close."""

    streaming = False

    def __init__(self, chunks: list[bytes], recorded: Recorded) -> None:
        super().__init__(chunks)
        self.recorded = recorded

    def close(self) -> None:
        self.recorded.threads["close"] = threading.get_ident()
        self.recorded.closed += 1
        self.recorded.closing.set()


class Stream:
    """A streamed answer: a generator the application made, with a close."""

    def __init__(self, chunks: list[bytes], recorded: Recorded) -> None:
        self.chunks = chunks
        self.recorded = recorded

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.recorded.threads.setdefault("iterate", threading.get_ident())
            assert self.recorded.threads["iterate"] == threading.get_ident()
            yield chunk

    def close(self) -> None:
        self.recorded.threads["close"] = threading.get_ident()
        self.recorded.closed += 1
        self.recorded.closing.set()


def application(recorded: Recorded) -> Callable[[dict[str, Any], StartResponse], Any]:
    def app(environ: dict[str, Any], start_response: StartResponse) -> Any:
        recorded.environ = environ
        recorded.threads["app"] = threading.get_ident()
        recorded.body = environ["wsgi.input"].read()
        path = environ["PATH_INFO"]
        if path == "/boom":
            raise RuntimeError("the application failed")
        if path == "/stream":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return Stream([b"one\n", b"", b"two\n", b"three\n"], recorded)
        body = b"echo:" + recorded.body
        start_response(
            "201 Created", [("Content-Type", "text/plain"), ("Content-Length", str(len(body))), ("X-Seen", " yes ")]
        )
        return Answer([body], recorded)

    return app


class LoopbackServer:
    """uvicorn on a free loopback port, in a thread of its own, serving ``app``."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, lifespan="off", log_level="critical", access_log=False
            )
        )
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        while not self.server.started:
            self.thread.join(0.01)
            assert self.thread.is_alive(), "uvicorn did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        connection.request(method, path, body=body, headers=headers or {})
        return connection.getresponse()


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def served(recorded: Recorded) -> Iterator[LoopbackServer]:
    with LoopbackServer(WsgiInThreads(application(recorded), threads=2)) as server:
        yield server


def test_an_in_memory_answer_comes_back_whole_after_its_close_ran_in_the_applications_thread(
    served: LoopbackServer, recorded: Recorded
) -> None:
    answer = served.request(
        "POST", "/echo?x=1&y=%C3%A9", body=b"the body", headers={"Content-Type": "text/plain", "X-Twice": "a"}
    )

    assert answer.status == 201
    assert answer.getheader("Content-Type") == "text/plain"
    assert answer.getheader("X-Seen") == "yes"
    assert answer.read() == b"echo:the body"
    assert recorded.body == b"the body"
    environ = recorded.environ
    assert environ["REQUEST_METHOD"] == "POST"
    assert environ["PATH_INFO"] == "/echo"
    assert environ["QUERY_STRING"] == "x=1&y=%C3%A9"
    assert environ["CONTENT_TYPE"] == "text/plain"
    assert environ["CONTENT_LENGTH"] == "8"
    assert environ["HTTP_X_TWICE"] == "a"
    assert environ["REMOTE_ADDR"] == "127.0.0.1"
    assert environ["SERVER_PROTOCOL"] == "HTTP/1.1"
    # The body is whole in memory: Django may read it to its end.
    assert environ["wsgi.input_terminated"] is True
    assert recorded.closed == 1
    assert recorded.threads["close"] == recorded.threads["app"]
    assert recorded.threads["app"] != threading.get_ident()


def test_a_streamed_answer_is_iterated_and_closed_in_the_thread_that_made_it(
    served: LoopbackServer, recorded: Recorded
) -> None:
    answer = served.request("GET", "/stream")

    assert answer.status == 200
    assert answer.getheader("Transfer-Encoding") == "chunked"
    assert answer.read() == b"one\ntwo\nthree\n"
    assert recorded.closing.wait(5)  # the last chunk is sent before the thread closes the answer
    assert recorded.threads["iterate"] == recorded.threads["app"] == recorded.threads["close"]
    assert recorded.closed == 1


def test_an_application_that_raises_is_a_500_and_the_server_keeps_serving(
    served: LoopbackServer, recorded: Recorded
) -> None:
    assert served.request("GET", "/boom").status == 500
    assert served.request("POST", "/echo", body=b"after").read() == b"echo:after"


@pytest.mark.django_db(transaction=True)
def test_the_served_evaluation_export_streams_its_snapshot_from_the_database(operator_client: Client) -> None:
    """Django's streamed answer through the project's own server: chunked, complete, and the
    generator's snapshot transaction ended (the second download on the same worker reads again)."""
    flows = {str(make_flow()) for _ in range(3)}
    cookie = f"{settings.SESSION_COOKIE_NAME}={operator_client.cookies[settings.SESSION_COOKIE_NAME].value}"

    with Gunicorn() as gunicorn:
        for _ in range(2):  # twice on the same worker: the first answer left its connection clean
            answer = gunicorn.server.request(
                "GET", "/dashboard/admin/reasoning/evaluation/export", headers={"Cookie": cookie}
            )
            assert answer.status == 200, answer.body
            assert answer.headers["Transfer-Encoding"] == "chunked"
            assert {json.loads(line)["flow_id"] for line in answer.body.splitlines()} == flows


# --- The hand-off ----------------------------------------------------------------------------


def run_alone(main: Callable[[], Any]) -> Any:
    """``asyncio.run(main())`` in a thread of its own (a browser test may hold an event loop
    running in this one)."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(asyncio.run(main())))
    thread.start()
    thread.join(30)
    return outcome[0]


def test_the_hand_off_runs_calls_in_at_most_its_threads_and_gives_back_results_and_errors() -> None:
    hand_off = ThreadHandOff(3, name="test-hand-off")
    running: list[str] = []
    most = [0]
    guard = threading.Lock()

    def call(n: int) -> int:
        with guard:
            running.append(threading.current_thread().name)
            most[0] = max(most[0], len(running))
        threading.Event().wait(0.02)
        with guard:
            running.remove(threading.current_thread().name)
        if n == 7:
            raise ValueError("seven")
        return n * n

    async def main() -> tuple[list[Any], set[str]]:
        loop = asyncio.get_running_loop()
        names: set[str] = set()

        def named(n: int) -> Callable[[], int]:
            def run() -> int:
                names.add(threading.current_thread().name)
                return call(n)

            return run

        outcomes = await asyncio.gather(*(hand_off.run(loop, named(n)) for n in range(12)), return_exceptions=True)
        return outcomes, names

    outcomes, names = run_alone(main)
    assert outcomes[:7] == [n * n for n in range(7)]
    assert isinstance(outcomes[7], ValueError) and str(outcomes[7]) == "seven"
    assert outcomes[8:] == [n * n for n in range(8, 12)]
    assert most[0] == 3  # twelve calls at once: three at a time, no more
    assert len(names) == 3 and all(name.startswith("test-hand-off_") for name in names)


def test_a_call_whose_task_gave_up_does_not_stop_the_hand_off() -> None:
    hand_off = ThreadHandOff(1, name="test-cancel")
    release = threading.Event()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        slow = hand_off.run(loop, lambda: release.wait(5))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow, 0.05)  # cancels the future; the call still runs
        release.set()
        return int(await hand_off.run(loop, lambda: 42))

    assert run_alone(main) == 42
