"""A real gunicorn process serving the test database, and a raw HTTP client for it.

The test client never frames a body on the wire, so chunked transfer coding and the bytes of a
JSON body as a server hands them to Django can only be tested against a real server.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.db import connection


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _environment_for_test_database() -> dict[str, str]:
    """The server's environment: settings pick the test database the way they pick the real one."""
    env = dict(os.environ)
    name = str(connection.settings_dict["NAME"])
    if env.get("DATABASE_URL"):
        env["DATABASE_URL"] = urlunsplit(urlsplit(env["DATABASE_URL"])._replace(path="/" + name))
    else:
        env["RFT_EMBEDDED_DB_NAME"] = name
    env.pop("RFT_TEST_DB_NAME", None)
    return env


@dataclass
class Server:
    host: str
    port: int

    def request(
        self,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """Send ``body`` as is (bytes: with Content-Length; an iterable of chunks: chunked)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            chunked = body is not None and not isinstance(body, bytes)
            conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
            response = conn.getresponse()
            return Answer(response.status, dict(response.getheaders()), response.read())
        finally:
            conn.close()


def run_gunicorn() -> Iterator[Server]:
    """Start ``gunicorn config.wsgi`` on a free port against the test database; stop it after."""
    port = free_port()
    command = [
        str(Path(sys.executable).with_name("gunicorn")),
        "config.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "1",
        "--timeout",
        "60",
    ]
    process = subprocess.Popen(
        command,
        cwd=settings.BASE_DIR,
        env=_environment_for_test_database(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for(port, process)
        yield Server("127.0.0.1", port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            errors = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"gunicorn exited with {process.returncode}: {errors[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not start listening within 60 s")
