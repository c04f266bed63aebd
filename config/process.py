"""Process lifetime: every process of the stack dies with the one that started it.

``make run``'s supervisor (``scripts/run.py``) starts each child in its own session, so a
Ctrl-C reaches the supervisor alone and it stops them in order. A supervisor killed
outright (``kill -9``, the OOM killer, a benchmark harness that SIGKILLs its process group)
runs no shutdown code, though: without this its children would live on as orphans,
holding the port and the database. Linux's parent-death signal closes that gap: each child,
and each process those children fork (gunicorn's workers through ``config/gunicorn.py``,
django-q2's cluster through the at-fork hook in ``config/settings.py``), is killed by the
kernel the moment its parent dies. Elsewhere this is a no-op.

No Django imports: the supervisor and gunicorn's master load this before any settings.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``signum`` to this process when its parent exits."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The parent may have died between our fork and the prctl: then nobody will signal us.
    if os.getppid() != parent:
        os._exit(1)
