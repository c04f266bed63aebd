"""``make run``'s supervisor (``scripts/run.py``) and ``make stop`` (``scripts/stop.py``).

Each test starts the real stack (gunicorn, the django-q2 worker, the audit chainer) on
the test database, as ``make run`` does, and checks what an operator at the terminal
would: Ctrl-C leaves no process behind, a crashed child comes back, ``make stop`` from
another terminal stops everything.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.servers import environment_for_test_database, free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.django_db(transaction=True)


def _wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Stack:
    """``scripts/run.py`` in its own session, as a terminal's foreground job is."""

    def __init__(self, tmp_path: Path) -> None:
        self.marker = uuid.uuid4().hex
        self.port = free_port()
        self.state_file = tmp_path / "run.json"
        # The children use the test database on the same server, as tests/servers.py's gunicorn does.
        env = environment_for_test_database()
        env.update(PORT=str(self.port), WEB_CONCURRENCY="1", RFT_TEST_MARKER=self.marker, LOG_LEVEL="WARNING")
        self.proc = subprocess.Popen(
            [sys.executable, "scripts/run.py", "--state-file", str(self.state_file)],
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def processes(self) -> list[psutil.Process]:
        """Every live process started by this stack (they all inherit the marker)."""
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("RFT_TEST_MARKER") == self.marker:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def processes_running(self, command: str) -> list[psutil.Process]:
        found = []
        for proc in self.processes():
            try:
                if command in proc.cmdline():
                    found.append(proc)
            except psutil.NoSuchProcess:
                continue
        return found

    def groups(self) -> dict[str, int]:
        try:
            return dict(json.loads(self.state_file.read_text())["groups"])
        except (OSError, ValueError, KeyError):
            return {}

    def serving(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/accounts/login/", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def ctrl_c(self) -> None:
        # A terminal sends SIGINT to the whole foreground process group.
        os.killpg(self.proc.pid, signal.SIGINT)

    def output(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode(errors="replace")

    @staticmethod
    def errors(output: str) -> list[str]:
        """The lines of ``output`` that report an error (gunicorn's log, a traceback)."""
        return [line for line in output.splitlines() if "[ERROR]" in line or "Traceback" in line]

    def kill_everything(self) -> None:
        for proc in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    running = Stack(tmp_path)
    yield running
    running.kill_everything()


def test_ctrl_c_while_starting_leaves_no_process(stack: Stack) -> None:
    # qcluster has begun forking its processes but is still starting up: the moment a
    # Ctrl-C used to leave four of them running on their own.
    _wait_for(lambda: len(stack.processes_running("qcluster")) >= 2, 30, "the worker to start forking")
    time.sleep(2)

    stack.ctrl_c()

    assert stack.proc.wait(timeout=40) == 0
    _wait_for(lambda: not stack.processes(), 10, "every process to exit")
    assert not stack.state_file.exists()


def test_ctrl_c_once_running_leaves_no_process(stack: Stack) -> None:
    _wait_for(stack.serving, 30, "the web server to answer")
    assert len(stack.processes()) > 3  # the supervisor, gunicorn's arbiter and worker, qcluster's forks, …
    time.sleep(1)  # the box is printed once /healthz has answered

    stack.ctrl_c()

    assert stack.proc.wait(timeout=40) == 0
    _wait_for(lambda: not stack.processes(), 10, "every process to exit")
    output = stack.output()
    # Once it answered, the address (and the demo logins, when loaded) in a box.
    assert f"| Reasoning Flow Tracker on http://127.0.0.1:{stack.port}/" in output
    # A Ctrl-C reaches gunicorn's workers too (SIGINT): they stop, they do not die of it.
    assert stack.errors(output) == []


def test_a_crashed_child_is_restarted_and_the_others_keep_running(stack: Stack) -> None:
    _wait_for(stack.serving, 30, "the web server to answer")
    chainer = stack.groups()["chainer"]

    os.killpg(chainer, signal.SIGKILL)

    _wait_for(lambda: stack.groups().get("chainer", chainer) != chainer, 15, "a new chainer")
    assert psutil.pid_exists(stack.groups()["chainer"])
    assert stack.proc.poll() is None
    assert stack.serving()

    os.kill(stack.proc.pid, signal.SIGTERM)
    assert stack.proc.wait(timeout=40) == 0
    assert "chainer exited with status -9; restarting in 1 s" in stack.output()


def test_stop_script_stops_a_stack_started_elsewhere(stack: Stack) -> None:
    _wait_for(stack.serving, 30, "the web server to answer")

    stopped = subprocess.run(
        [sys.executable, "scripts/stop.py", "--state-file", str(stack.state_file), "--keep-db"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the web server, worker and chainer" in stopped.stdout
    _wait_for(lambda: not stack.processes(), 10, "every process to exit")
    assert not stack.serving()
    # A clean stop is no error: gunicorn's arbiter logs "[ERROR] Worker (pid:N) was sent SIGTERM!"
    # for a worker that dies of the signal instead of exiting once it has shut down.
    assert stack.proc.wait(timeout=10) == 0
    assert stack.errors(stack.output()) == []


def test_stop_script_with_nothing_running_says_so(tmp_path: Path) -> None:
    stopped = subprocess.run(
        [sys.executable, "scripts/stop.py", "--state-file", str(tmp_path / "run.json"), "--keep-db"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert stopped.returncode == 0
    assert "not running" in stopped.stdout


def test_a_supervisor_killed_outright_takes_every_process_with_it(stack: Stack) -> None:
    # A benchmark harness, the OOM killer or `kill -9`: the supervisor runs no shutdown code.
    _wait_for(stack.serving, 60, "the stack to serve")
    _wait_for(lambda: len(stack.processes()) >= 5, 30, "the worker's and the web server's processes")

    stack.proc.send_signal(signal.SIGKILL)
    stack.proc.wait(timeout=5)

    _wait_for(lambda: not stack.processes(), 10, "every child and grandchild to die with the supervisor")
    assert not stack.serving()
