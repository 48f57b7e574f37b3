"""Group commit: many concurrent writers share one transaction.

Each request awaits ``submit(item)``; a single task flushes whatever has queued since its last
flush in one transaction, then wakes every waiter. A lone request is flushed at once (no added
latency); under load, one commit carries hundreds of rows. ``submit`` returns only after the commit,
so a caller that answers after it never acknowledges an uncommitted write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class BatchWriter(Generic[T]):
    def __init__(self, flush: Callable[[list[T]], Awaitable[None]], max_batch: int = 500) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._pending: list[tuple[T, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="batch-writer")

    async def submit(self, item: T) -> None:
        if self._closing:
            raise RuntimeError("the writer is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._wake.set()
        await future

    async def close(self) -> None:
        """Flush what is queued, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                await self._commit(batch)
            if self._closing:
                return

    async def _commit(self, batch: list[tuple[T, asyncio.Future[None]]]) -> None:
        try:
            await self._flush([item for item, _ in batch])
        except Exception as error:
            if len(batch) > 1:
                # One bad row must not fail its neighbours: retry each alone.
                for entry in batch:
                    await self._commit([entry])
                return
            log.warning("batched write failed", exc_info=error)
            _settle(batch, error)
        else:
            _settle(batch, None)


def _settle(batch: list[tuple[T, asyncio.Future[None]]], error: BaseException | None) -> None:
    for _, future in batch:
        if future.done():  # the waiter went away (client disconnected); the write still stands
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
