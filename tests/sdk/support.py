"""Helpers of the SDK tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_thread(function: Callable[[], T]) -> T:
    """``function()`` in a thread of its own; its exception is raised here.

    Playwright's sync API (the browser tests share the session) keeps an event loop running in
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


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(main())`` in a thread of its own (see ``run_in_thread``)."""

    async def wrapped() -> T:
        return await main()

    return run_in_thread(lambda: asyncio.run(wrapped()))
