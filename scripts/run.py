"""Start the web server, the job worker and the audit chainer; Ctrl-C stops all three.

Used by ``make run``. The web server is gunicorn on 127.0.0.1:$PORT (default 8000).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def main() -> int:
    port = os.environ.get("PORT", "8000")
    workers = os.environ.get("WEB_CONCURRENCY", "3")
    commands = {
        "web": [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            workers,
            "--access-logfile",
            "-",
        ],
        "worker": [sys.executable, "manage.py", "qcluster"],
        "chainer": [sys.executable, "manage.py", "audit_chainer"],
    }
    procs = {name: subprocess.Popen(cmd, cwd=ROOT) for name, cmd in commands.items()}
    print(f"Reasoning Flow Tracker on http://127.0.0.1:{port}/  (API docs: /api/docs/)  Ctrl-C to stop", flush=True)

    def stop(signum: int = signal.SIGTERM, frame: object = None) -> None:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    try:
        while all(proc.poll() is None for proc in procs.values()):
            time.sleep(0.5)
        for name, proc in procs.items():
            if proc.poll() not in (None, 0, -signal.SIGTERM):
                print(f"{name} exited with status {proc.returncode}; stopping the others", file=sys.stderr)
                status = 1
    finally:
        stop()
        deadline = time.monotonic() + 15
        for proc in procs.values():
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
    return status


if __name__ == "__main__":
    sys.exit(main())
