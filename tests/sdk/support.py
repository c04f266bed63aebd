"""Helpers of the SDK tests run against this server: ``run_in_thread`` is the SDK's own test
helper (``sdk/tests/support.py``, loaded from its file: the SDK's tests import nothing from the
project, so the project borrows from them rather than the other way round)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

SDK_SUPPORT = Path(__file__).resolve().parents[2] / "sdk" / "tests" / "support.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reasoning_flow_sdk_tests_support", SDK_SUPPORT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_in_thread: Callable[[Callable[[], Any]], Any] = _load().run_in_thread


def run_async(main: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(main())`` in a thread of its own (see ``run_in_thread``)."""

    async def wrapped() -> T:
        return await main()

    value: T = run_in_thread(lambda: asyncio.run(wrapped()))
    return value
