"""What the paths that do the work said last: the registration writer's commits, the worker's turns.

``/readyz`` reads this beside its own probes (docs/architecture.md "Faults and slow clients"): a
database that answers ``SELECT 1`` while every commit fails (a full disk, a read-only file, a
writer connection gone bad) is not ready. A part counts as failing from its last failure until its
next success; with no attempt at all for ``FORGET_AFTER`` seconds it is tried again as ready, so a
server that a load balancer stopped sending work to can come back by itself.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

# Seconds a failure keeps a part failing when nothing has tried it since: long enough that a
# readiness check between two failed registrations sees it, short enough to let traffic retry.
FORGET_AFTER = 30.0

T = TypeVar("T")
R = TypeVar("R")


class Readiness:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._failed_at: dict[str, float] = {}

    def succeeded(self, part: str) -> None:
        self._failed_at.pop(part, None)

    def failed(self, part: str) -> None:
        self._failed_at[part] = self._monotonic()

    def failing(self) -> list[str]:
        """The parts whose last attempt failed, in the order they are named."""
        now = self._monotonic()
        return sorted(part for part, at in self._failed_at.items() if now - at < FORGET_AFTER)

    def watch(
        self,
        part: str,
        flush: Callable[[list[T]], Awaitable[Sequence[R] | None]],
        refused: Callable[[BaseException], bool] = lambda error: False,
    ) -> Callable[[list[T]], Awaitable[Sequence[R] | None]]:
        """``flush``, recording each call's outcome as ``part``'s; an error ``refused`` says was the
        rows' own fault (not the storage's) counts for nothing."""

        async def watched(batch: list[T]) -> Sequence[R] | None:
            try:
                result = await flush(batch)
            except Exception as error:
                if not refused(error):
                    self.failed(part)
                raise
            self.succeeded(part)
            return result

        return watched
