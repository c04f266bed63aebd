"""A loopback OTLP/HTTP receiver that keeps every traces request it is sent, as sent (stdlib only).

Any ``POST`` whose path ends in ``/v1/traces`` (Langfuse posts to ``/api/public/otel/v1/traces``)
is kept: the body (un-gzipped), its Content-Type, the path, and the scenario the capture script
last announced with ``POST /scenario`` (body: the name). Answers are an empty
ExportTraceServiceResponse in the request's encoding. Every other request is answered
``200 {}`` and noted in ``other``, so a library's extra calls (a project lookup, a score)
never fail the capture.
"""

from __future__ import annotations

import gzip
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Captured:
    scenario: str
    path: str
    content_type: str
    body: bytes


@dataclass
class Store:
    scenario: str = "setup"
    requests: list[Captured] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, content_type: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            with store.lock:
                store.other.append(f"GET {self.path}")
            self._answer("application/json", b"{}")

        def _read_chunked(self) -> bytes:
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()  # the CRLF after each chunk

        def do_POST(self) -> None:
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                body = self._read_chunked()  # Node's OTLP exporters stream the body
            else:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            path = self.path.split("?", 1)[0]
            content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if path == "/scenario":
                with store.lock:
                    store.scenario = body.decode().strip()
                self._answer("text/plain", b"ok")
            elif path.endswith("/v1/traces"):
                with store.lock:
                    store.requests.append(Captured(store.scenario, path, content_type, body))
                if content_type == "application/json":
                    self._answer("application/json", b"{}")
                else:
                    self._answer("application/x-protobuf", b"")
            else:
                with store.lock:
                    store.other.append(f"POST {path}")
                self._answer("application/json", b"{}")

    return Handler


def start(port: int = 0) -> tuple[ThreadingHTTPServer, Store, str]:
    """Serve on 127.0.0.1 in a daemon thread; returns the server, its store and its base URL."""
    store = Store()
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(store))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, store, f"http://127.0.0.1:{server.server_address[1]}"
