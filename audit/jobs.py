"""Scheduled work for the audit app."""

from __future__ import annotations

from audit.chain import chain_all

# The chainer process links events within milliseconds; this schedule is the safety net
# for deployments that run only the web server and the worker.
SCHEDULES = [
    {"name": "audit.chain_pending", "func": "audit.jobs.run_chainer", "schedule_type": "I", "minutes": 1},
]


def run_chainer() -> int:
    return chain_all()
