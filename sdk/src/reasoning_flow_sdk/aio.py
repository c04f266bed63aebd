"""``AsyncReasoningFlowRecorder``: the same recording API for asyncio code; the sender is a task.

Recording stays synchronous (it only queues a record, so it needs no ``await``); ``flush`` and
``close`` are coroutines. The sender task starts with the first record made inside a running
event loop; spool writes and reads run in a worker thread (``asyncio.to_thread``), so an
``fsync`` never stalls the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx

from reasoning_flow_sdk._core import SPOOL_CHECK_SECONDS, Batch, Record, Verdict, backoff, judge, path_of
from reasoning_flow_sdk._log import log_limited, logger
from reasoning_flow_sdk._spool import SpoolFile
from reasoning_flow_sdk.recorder import NoOpRecorder, _live, _Recording, capture_enabled


class AsyncNoOpRecorder(NoOpRecorder):
    async def flush(self, timeout: float = 5.0) -> bool:  # type: ignore[override]
        return True

    async def close(self, timeout: float = 5.0) -> bool:  # type: ignore[override]
        return True

    async def __aenter__(self) -> AsyncNoOpRecorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class AsyncReasoningFlowRecorder(_Recording):
    """Records flows from asyncio code. Arguments and environment as ``ReasoningFlowRecorder``."""

    def __new__(cls, *args: Any, enabled: bool | None = None, **kwargs: Any) -> Any:
        if not capture_enabled(enabled, args, kwargs):
            return AsyncNoOpRecorder()
        return super().__new__(cls)

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        spool_dir: Any = None,
        *,
        enabled: bool | None = None,
        **options: Any,
    ) -> None:
        super().__init__(base_url, token, spool_dir, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._work: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None

    # --- starting --------------------------------------------------------------------------
    def _record(self, record: Record) -> None:
        super()._record(record)
        if self._loop is None:
            self._start()

    def _start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not in a loop yet: the records wait in the queue (and are spooled at exit)
        self._loop = loop
        self._wake, self._work, self._stopping = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._tasks = [
            loop.create_task(self._batch_loop(), name="reasoning-flow-batcher"),
            loop.create_task(self._deliver_loop(), name="reasoning-flow-sender"),
        ]

    def _kick(self) -> None:
        if self._loop is not None and self._wake is not None and not self._wake.is_set():
            self._loop.call_soon_threadsafe(self._wake.set)

    # --- flush and close -----------------------------------------------------------------
    async def flush(self, timeout: float = 5.0) -> bool:
        try:
            self._release_held()
            if self._loop is None:
                self._start()
            deadline = time.monotonic() + max(timeout, 0.0)
            while not self._pipeline.idle():
                if time.monotonic() >= deadline:
                    return False
                if self._wake is not None and self._pipeline.queue:
                    self._wake.set()
                if self._work is not None:
                    self._work.set()
                await asyncio.sleep(0.005)
            return True
        except Exception:
            logger.exception("flush failed")
            return False

    async def close(self, timeout: float = 5.0) -> bool:
        if self._closed:
            return self._pipeline.idle()
        try:
            self._release_held()
            delivered = False if self._pipeline.attempt > 0 else await self.flush(timeout)
            self._closed = True
            if self._stopping is not None:
                self._stopping.set()
            for event in (self._wake, self._work):
                if event is not None:
                    event.set()
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=max(timeout, 0.05))
            await asyncio.to_thread(self._pipeline.spill_everything)
            if self._client is not None:
                await self._client.aclose()
            _live.discard(self)
            return delivered
        except Exception:
            logger.exception("close failed")
            return False

    def _at_exit(self) -> None:
        # No loop to await at interpreter exit: what is in memory goes to the spool.
        self._release_held()
        self._closed = True
        self._pipeline.spill_everything()

    async def __aenter__(self) -> AsyncReasoningFlowRecorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the two tasks -----------------------------------------------------------------------
    async def _sleep(self, seconds: float) -> None:
        assert self._stopping is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)

    async def _batch_loop(self) -> None:
        assert self._wake is not None and self._work is not None and self._stopping is not None
        pipeline = self._pipeline
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.settings.flush_interval)
            self._wake.clear()
            try:
                self._release_held(untimed_only=True)
                if pipeline.queue:
                    batches = pipeline.form_batches()
                    if batches:
                        woke: bool = await asyncio.to_thread(pipeline.accept, batches)
                        if woke:
                            self._work.set()
            except Exception:
                logger.exception("the reasoning flow batcher failed; retrying")
                await self._sleep(1.0)

    async def _deliver_loop(self) -> None:
        assert self._work is not None and self._stopping is not None
        pipeline = self._pipeline
        last_look = 0.0
        while not self._stopping.is_set():
            try:
                batch = pipeline.outbox_head()
                if batch is not None:
                    await self._deliver(batch)
                    continue
                if pipeline.spooling or time.monotonic() - last_look > SPOOL_CHECK_SECONDS:
                    last_look = time.monotonic()
                    if await self._drain():
                        continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._work.wait(), timeout=SPOOL_CHECK_SECONDS)
                self._work.clear()
            except Exception:
                logger.exception("the reasoning flow sender failed; retrying")
                await self._sleep(1.0)

    async def _deliver(self, batch: Batch) -> None:
        verdict = await self._send(batch.body, batch.steps)
        spill = self._pipeline.settle(batch, verdict)
        if verdict.retry:
            await asyncio.to_thread(self._pipeline.write_to_spool, spill)
            await self._sleep(backoff(self._pipeline.attempt, verdict.retry_after))

    async def _drain(self) -> bool:
        assert self._stopping is not None
        pipeline = self._pipeline
        spool = pipeline.spool
        if not await asyncio.to_thread(spool.try_acquire):
            await self._sleep(0.5)
            return pipeline.spooling
        try:
            worked = False
            while not self._stopping.is_set():
                files = await asyncio.to_thread(spool.files)
                if not files:
                    await asyncio.to_thread(pipeline.spool_drained)
                    if not pipeline.spooling:
                        return worked
                    continue
                for spooled in files:
                    if self._stopping.is_set():
                        return True
                    worked = True
                    if not await self._send_spooled(spooled):
                        return True
            return worked
        finally:
            spool.release()

    async def _send_spooled(self, spooled: SpoolFile) -> bool:
        body = await asyncio.to_thread(self._pipeline.spool.read, spooled)
        if body is None:
            return True
        verdict = await self._send(body, spooled.steps)
        await asyncio.to_thread(self._pipeline.settle_spooled, spooled, verdict)
        if verdict.retry:
            await self._sleep(backoff(self._pipeline.attempt, verdict.retry_after))
            return False
        return True

    async def _send(self, body: bytes, steps: int) -> Verdict:
        unsendable = self._unsendable()
        if unsendable is not None:
            return unsendable
        try:
            if self._client is None:
                self._client = httpx.AsyncClient(
                    base_url=self.settings.base_url or "", headers=self._headers(), timeout=self.settings.timeout
                )
            response = await self._client.post(path_of(body), content=body)
        except Exception as error:
            log_limited(
                logging.WARNING, "unreachable", "reasoning flow server unreachable (%s): spooling", type(error).__name__
            )
            return Verdict(retry=True)
        verdict = judge(response.status_code, response.content, body, response.headers.get("retry-after"), steps)
        if verdict.retry:
            log_limited(
                logging.WARNING, "retry-status", "reasoning flow server answered %d: spooling", response.status_code
            )
        return verdict
