"""ASGI plumbing shared by the web front (config.asgi) and the MCP app (mcp_server.http)."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import io
import itertools
import json
import queue
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any


async def answer_json(
    send: Any, status: int, detail: str, *, close: bool, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Answer ``{"detail": detail}`` with ``status`` (never cached; ``close``: and end the connection)."""
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(b"connection", b"close")] if close else []
    head += [*headers, (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})


# ---------------------------------------------------------------------------------------------
# A WSGI application behind an event loop, one hand-off to a thread a request.

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_BODY = "http.response.body"


class WsgiInThreads:
    """Runs a WSGI application (Django's) for an ASGI server, in a pool of ``threads`` threads.

    The request's body is read whole on the event loop before the application starts (the
    front, ``config.asgi.BufferedBody``, has already bounded it in time and size), so
    ``wsgi.input`` is bytes in memory. Then one hand-off: the thread calls the application and,
    for an answer whose body is in memory (Django's ``HttpResponse``: ``streaming`` False), joins
    the body and closes the answer (Django's ``request_finished``: the thread's database
    connections) before handing back. The event loop sends the head and the body. A request
    costs the loop one hand-off and back, against a2wsgi's five (the body read, the head, each
    chunk and the end each crossed from the thread to the loop and waited there).

    A streamed answer (``StreamingHttpResponse``, ``FileResponse``, any other iterable) is
    iterated in the same thread that called the application, each chunk sent through the loop
    and waited for (the transport's flow control paces the thread), so a generator's database
    cursor never changes threads.

    The hand-off is ``ThreadHandOff``'s, not ``loop.run_in_executor``'s.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]], threads: int) -> None:
        self.app = app
        self.threads = ThreadHandOff(threads, name="wsgi")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the server runs no lifespan; no websockets here
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1000})
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # nobody to answer
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                break
        environ = wsgi_environ(scope, b"".join(chunks))
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, self._call, environ, send, loop)
        answer = await self.threads.run(loop, call)
        if answer is not None:  # in memory: the thread has finished with it
            status, headers, body = answer
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": _BODY, "body": body, "more_body": False})

    def _call(
        self, environ: dict[str, Any], send: Send, loop: asyncio.AbstractEventLoop
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """In a pool thread: the answer, or None once a streamed answer has been sent."""
        head: list[Any] = []
        written: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            if exc_info is not None and head and head[0] is _SENT:
                raise exc_info[1].with_traceback(exc_info[2])
            head[:] = [int(status.split(" ", 1)[0]), _encoded(headers)]
            return written.append

        result = self.app(environ, start_response)
        try:
            if getattr(result, "streaming", None) is False or isinstance(result, list | tuple):
                body = b"".join([*written, *result])
                return head[0], head[1], body
            status, headers = head
            head[:] = [_SENT]

            def through_loop(message: Message) -> None:
                asyncio.run_coroutine_threadsafe(send(message), loop).result()  # type: ignore[arg-type]

            through_loop({"type": "http.response.start", "status": status, "headers": headers})
            for chunk in itertools.chain(written, result):
                if chunk:
                    through_loop({"type": _BODY, "body": chunk, "more_body": True})
            through_loop({"type": _BODY, "body": b"", "more_body": False})
            return None
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()


_SENT = object()


class ThreadHandOff:
    """At most ``threads`` threads that run calls for an event loop: ``run`` queues a call and
    returns the loop's future of its result.

    What ``loop.run_in_executor`` does, for less: there, a call makes a
    ``concurrent.futures.Future`` (with its lock and condition), an asyncio future chained to it
    and their callbacks both ways; here, one asyncio future, set from the thread by one
    ``call_soon_threadsafe``. Threads start as calls find none idle, up to ``threads``, and run
    until the process ends (daemons: the server has finished its requests before it exits)."""

    def __init__(self, threads: int, *, name: str) -> None:
        self._limit = threads
        self._name = name
        self._calls: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._started = 0
        self._idle = 0

    def run(self, loop: asyncio.AbstractEventLoop, call: Callable[[], Any]) -> asyncio.Future[Any]:
        future = loop.create_future()
        self._calls.put((loop, future, call))
        if self._started < self._limit:
            with self._lock:
                start = self._idle < self._calls.qsize() and self._started < self._limit
                if start:
                    self._started += 1
            if start:
                threading.Thread(target=self._work, name=f"{self._name}_{self._started}", daemon=True).start()
        return future

    def _work(self) -> None:
        lock = self._lock
        while True:
            with lock:
                self._idle += 1
            loop, future, call = self._calls.get()
            with lock:
                self._idle -= 1
            try:
                result = call()
            except BaseException as exc:  # the awaiting task's, as from an executor
                loop.call_soon_threadsafe(_settle, future, None, exc)
            else:
                loop.call_soon_threadsafe(_settle, future, result, None)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the loop: the call's outcome to its future, unless the awaiting task gave up on it."""
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.strip().lower().encode("latin1"), value.strip().encode("latin1")) for name, value in headers]


def wsgi_environ(scope: Scope, body: bytes) -> dict[str, Any]:
    """PEP 3333's environ for an ASGI HTTP ``scope`` whose body is ``body``."""
    script_name = scope.get("root_path", "").encode("utf8").decode("latin1")
    path_info = scope["path"].encode("utf8").decode("latin1")
    if script_name and path_info.startswith(script_name):
        path_info = path_info[len(script_name) :]
    server, port = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": script_name,
        "PATH_INFO": path_info,
        "QUERY_STRING": scope["query_string"].decode("ascii"),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "SERVER_NAME": server,
        "SERVER_PORT": str(port or 0),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        # The body is whole: an application may read it to its end, whatever Content-Length says.
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if client := scope.get("client"):
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = client[0], str(client[1])
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin1")
        if name == "content-length":
            key = "CONTENT_LENGTH"
        elif name == "content-type":
            key = "CONTENT_TYPE"
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
        value = raw_value.decode("latin1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ
