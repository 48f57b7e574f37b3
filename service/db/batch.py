"""Group commit: many concurrent writers share one transaction (or one round trip).

Each request awaits ``submit(item)``; a single task flushes whatever has queued since its last
flush in one call, then wakes every waiter. A lone request is flushed at once (no added latency);
under load, one commit carries hundreds of rows. ``submit`` returns only after the flush, so a
caller that answers after it never acknowledges an uncommitted write. A flush may return one result
per item (the Redis limiter's verdicts); ``submit`` then returns its item's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)


def _never(error: BaseException) -> bool:
    return False


class BatchWriter(Generic[T, R]):
    """``flush`` writes a batch; ``split`` says which of its errors may be one item's fault.

    A batch failing with such an error (a row the database refuses) is flushed again item by item,
    so one bad row fails alone. Any other error (the store unreachable, a timeout) fails the whole
    batch at once: flushing each item again would only repeat it, once per item, while every caller
    waits.
    """

    def __init__(
        self,
        flush: Callable[[list[T]], Awaitable[Sequence[R] | None]],
        max_batch: int = 500,
        split: Callable[[BaseException], bool] = _never,
        name: str = "batch",
    ) -> None:
        self._flush = flush
        self._split = split
        self._name = name
        self._max_batch = max_batch
        self._pending: list[tuple[T, asyncio.Future[R | None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def submit(self, item: T) -> R | None:
        if self._closing:
            raise RuntimeError("the writer is closed")
        future: asyncio.Future[R | None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._wake.set()
        return await future

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

    async def _commit(self, batch: list[tuple[T, asyncio.Future[R | None]]]) -> None:
        try:
            results = await self._flush([item for item, _ in batch])
        except Exception as error:
            if len(batch) > 1 and self._split(error):
                # One bad row must not fail its neighbours: retry each alone.
                for entry in batch:
                    await self._commit([entry])
                return
            log.warning("%s failed", self._name, exc_info=error, extra={"items": len(batch)})
            _settle(batch, [None] * len(batch), error)
        else:
            _settle(batch, [None] * len(batch) if results is None else results, None)


def _settle(
    batch: list[tuple[T, asyncio.Future[R | None]]],
    results: Sequence[R | None],
    error: BaseException | None,
) -> None:
    for (_, future), result in zip(batch, results, strict=True):
        if future.done():  # the waiter went away (client disconnected); the write still stands
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
