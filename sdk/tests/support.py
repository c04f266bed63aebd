"""Helpers of the SDK's tests (they import nothing from the project; tests/sdk/support.py borrows these)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_thread(function: Callable[[], T]) -> T:
    """``function()`` in a thread of its own; its exception is raised here.

    Playwright's sync API (the project's browser tests share ``make test``'s session) keeps an event loop running in
    the main thread, and ``asyncio.run`` refuses to start inside a running loop."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=target, name="asyncio-test")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    value: T = outcome["value"]
    return value
