"""gunicorn settings for ``make run`` (``-c python:config.gunicorn``): workers die with their
master, even when the master is killed outright (``config.process``)."""

from __future__ import annotations

from typing import Any

from config.process import die_with_parent


def post_fork(server: Any, worker: Any) -> None:
    die_with_parent()
