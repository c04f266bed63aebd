"""Scheduled work for the audit app."""

from __future__ import annotations

import time

from audit import checkpoints
from audit.chain import chain_all, chainer_loop_running
from audit.chain import run_chainer as chainer_loop

# The chainer process (`manage.py audit_chainer`, started by `make run`) links events
# within milliseconds. This schedule covers deployments that run only the web server and
# the django-q2 worker. django-q2 cannot schedule more often than once a minute, and a
# minute is also the default AUDIT_CHAIN_MAX_LAG_S, so a one-pass job would leave events
# unchained for up to a minute plus the scheduler's jitter. Instead, when no chainer
# loop is running elsewhere, each run stays and polls for JOB_BUDGET_S of its minute: the
# longest wait is then the gap between runs (the scheduler's jitter, seconds), well under
# the threshold. The budget is below the interval, so runs do not pile up. When a chainer
# loop is running, the job makes one pass and returns the worker to other jobs.
JOB_BUDGET_S = 50.0

SCHEDULES = [
    {"name": "audit.chain_pending", "func": "audit.jobs.run_chainer", "schedule_type": "I", "minutes": 1},
    # A signed checkpoint of the Merkle tree whenever it grew (audit.checkpoints).
    {"name": "audit.checkpoint", "func": "audit.jobs.sign_checkpoint", "schedule_type": "I", "minutes": 1},
]


def run_chainer() -> int:
    if chainer_loop_running():
        return chain_all()
    return chainer_loop(lambda: False, interval=0.5, until=time.monotonic() + JOB_BUDGET_S)


def sign_checkpoint() -> int | None:
    """The scheduled signer: the new checkpoint's tree size, or None when the tree did not grow.
    Not wrapped in ``job_run``: its started/completed events would make the tree grow every
    minute; the checkpoint's own event (or the refusal's) is the run's trail."""
    signed = checkpoints.sign_checkpoint()
    return signed.tree_size if signed.checkpoint is not None else None
