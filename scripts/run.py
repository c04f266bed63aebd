"""Start the web server, the job worker and the audit chainer, and keep them running.

Used by ``make run``; ``make stop`` (``scripts/stop.py``) or Ctrl-C stops everything.

* The web server is gunicorn on 127.0.0.1:$PORT (default 8000), as ``config.gunicorn.command``
  builds it (uvicorn workers in front of Django; see that module).
* The job worker and the audit chainer run in their own sessions (process groups). A
  Ctrl-C in the terminal then reaches this supervisor, which stops every group as a
  whole: the worker's forked processes go with it, whenever the Ctrl-C comes (even while
  a child is still starting up and has not installed its own signal handlers). The web
  server stays in the supervisor's group, so killing that group frees the port at once.
* Every process dies with the supervisor, even when it is killed outright (``kill -9``):
  ``config.process`` asks the kernel for a parent-death signal in each child and in
  every process the children fork.
* A child that exits on its own is restarted after a back-off (1 s, doubling to 30 s,
  reset once it has stayed up for a minute), so one crash (a database restart, say)
  does not take the others down.
* The supervisor's pid and its children's process groups are kept in ``.data/run.json``
  (``$RFT_DATA_DIR/run.json`` when set)
  so ``make stop`` can stop them from another terminal, orphans included.
* Once the web server answers ``/healthz``, the address and the demo logins (written by
  ``manage.py load_demo`` into ``.data/demo_logins.txt``) are printed in a box, last of the
  start-up's output, where a newcomer finds them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from config.gunicorn import command as web_command  # noqa: E402  (no Django: safe before any settings)
from config.process import die_with_parent  # noqa: E402

BIN = Path(sys.executable).parent
DATA_DIR = Path(os.environ.get("RFT_DATA_DIR") or ROOT / ".data")
DEFAULT_STATE_FILE = DATA_DIR / "run.json"
DEMO_LOGINS = DATA_DIR / "demo_logins.txt"
# How long the box waits for the web server's first answer.
READY_WITHIN_S = 120.0

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
# A child that stayed up this long is considered healthy again: its back-off resets.
STABLE_AFTER_S = 60.0
STOP_GRACE_S = 15.0
# How long a group's remaining processes get to exit after their leader before SIGKILL.
ORPHAN_GRACE_S = 2.0


@dataclass
class Child:
    name: str
    command: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    backoff_s: float = BACKOFF_FIRST_S
    restart_at: float | None = None
    restarts: int = field(default=0)
    # Its own session: a Ctrl-C reaches the supervisor alone, which stops the child's group as a
    # whole. The web server stays in the supervisor's group instead, so that whoever kills that
    # group (a harness, `kill -9 -PGID`) frees the port at once, not when the parent-death
    # signal has travelled down; gunicorn stops its workers itself, whatever signal it gets.
    own_session: bool = True

    def start(self) -> None:
        # Killed with the supervisor, even by SIGKILL (config.process).
        self.proc = subprocess.Popen(
            self.command, cwd=ROOT, start_new_session=self.own_session, preexec_fn=die_with_parent
        )
        self.started_at = time.monotonic()
        self.restart_at = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def commands(port: str, workers: str) -> dict[str, list[str]]:
    return {
        "web": web_command(port, workers, gunicorn=BIN / "gunicorn"),
        "worker": [sys.executable, "manage.py", "qcluster"],
        "chainer": [sys.executable, "manage.py", "audit_chainer"],
    }


def signal_group(child: Child, signum: int) -> None:
    """The child's process group when it leads one (its own session), else the child."""
    if child.proc is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if child.own_session:
            os.killpg(child.proc.pid, signum)
        else:
            child.proc.send_signal(signum)


def stop_all(children: list[Child]) -> None:
    """SIGTERM each child, wait for it, then SIGKILL whatever is left in its group.

    The signal goes to the child alone, not its group: django-q2's cluster stops its own
    processes in order, and takes far longer when every one of them is signalled at once.
    What remains in a group once its leader is gone (forks of a child that died while
    starting up) is an orphan, so it is killed.
    """
    running = [c for c in children if c.proc is not None]
    for child in running:
        assert child.proc is not None
        if child.proc.poll() is None:
            child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for child in running:
        assert child.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    for child in running:
        assert child.proc is not None
        if child.own_session:
            _wait_for_group(child.proc.pid, ORPHAN_GRACE_S)
        signal_group(child, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=5)


def _wait_for_group(pgid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)


def write_state(state_file: Path, children: list[Child]) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    # The groups make stop.py's clean-up of orphans possible; the web server has none of its
    # own (it is in the supervisor's group, and dies with it).
    groups = {c.name: c.proc.pid for c in children if c.proc is not None and c.own_session}
    state = {"supervisor": os.getpid(), "groups": groups}
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(state_file)


def clear_state(state_file: Path) -> None:
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return
    if state.get("supervisor") == os.getpid():
        state_file.unlink(missing_ok=True)


def supervise(state_file: Path, children: list[Child], stopping: list[bool]) -> None:
    """Restart children that exit, with back-off, until asked to stop."""
    while not stopping:
        now = time.monotonic()
        changed = False
        for child in children:
            if child.alive():
                if now - child.started_at >= STABLE_AFTER_S:
                    child.backoff_s = BACKOFF_FIRST_S
                continue
            if child.restart_at is None:
                assert child.proc is not None
                child.restart_at = now + child.backoff_s
                print(
                    f"{child.name} exited with status {child.proc.returncode}; restarting in {child.backoff_s:g} s",
                    file=sys.stderr,
                    flush=True,
                )
                child.backoff_s = min(child.backoff_s * 2, BACKOFF_MAX_S)
            elif now >= child.restart_at:
                child.start()
                child.restarts += 1
                changed = True
        if changed:
            write_state(state_file, children)
        time.sleep(0.2)


def announce_when_ready(port: str, stopping: list[bool]) -> None:
    """In a thread: once ``/healthz`` answers (any status), print the box (module docstring)."""

    def wait_and_print() -> None:
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + READY_WITHIN_S
        while not stopping and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).close()
                break
            except urllib.error.HTTPError:
                break  # it answered: degraded is still up
            except OSError:
                time.sleep(0.5)
        if not stopping:
            print(box(port), flush=True)

    threading.Thread(target=wait_and_print, name="announce", daemon=True).start()


def box(port: str) -> str:
    lines = [
        f"Reasoning Flow Tracker on http://127.0.0.1:{port}/   (API docs: /api/docs/)",
        "Ctrl-C here, or `make stop` from any terminal, stops it.",
    ]
    with contextlib.suppress(OSError):
        lines += ["", *DEMO_LOGINS.read_text().strip().splitlines()]
    width = max(len(line) for line in lines)
    rule = "+" + "-" * (width + 2) + "+"
    return "\n".join([rule, *(f"| {line.ljust(width)} |" for line in lines), rule])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-file", type=Path, default=DEFAULT_STATE_FILE, help="Where to record the pids.")
    state_file: Path = parser.parse_args().state_file
    port = os.environ.get("PORT", "8000")
    workers = os.environ.get("WEB_CONCURRENCY", "3")
    stopping: list[bool] = []

    def request_stop(signum: int, frame: object) -> None:
        stopping.append(True)

    # Handlers first: a Ctrl-C while the children start must still stop all of them.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, request_stop)

    children = [Child(name, command, own_session=name != "web") for name, command in commands(port, workers).items()]
    try:
        for child in children:
            if stopping:
                break
            child.start()
        write_state(state_file, children)
        if not stopping:
            announce_when_ready(port, stopping)
            supervise(state_file, children, stopping)
    finally:
        # No second Ctrl-C may interrupt the shutdown half-way and leave orphans.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        stop_all(children)
        clear_state(state_file)
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
