"""Time, injected: every component takes a ``Clock`` instead of reading the system time itself.

``utc_now`` is the production clock. ``ManualClock`` moves only when its owner moves it; tests, the
demo generator and the benchmarks pass one so nothing waits for real time to pass. Durations are
read from a ``Timer`` (``time.perf_counter`` in production), which the demo generator replaces too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]
Timer = Callable[[], float]  # seconds from an arbitrary origin: only differences mean anything


def utc_now() -> datetime:
    return datetime.now(UTC)


def epoch_seconds(clock: Clock) -> Callable[[], float]:
    """``clock`` as seconds since the epoch; the production clock as ``time.time`` itself, which
    code called on every request reads for a fraction of the cost."""
    if clock is utc_now:
        return time.time
    return lambda: clock().timestamp()


class ManualClock:
    """A clock that stands still until told: ``advance(seconds)`` or ``set(moment)``; never backwards."""

    def __init__(self, start: datetime = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)) -> None:
        if start.tzinfo is None:
            raise ValueError("a clock keeps aware UTC datetimes")
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock cannot go back")
        self.now += timedelta(seconds=seconds)

    def set(self, moment: datetime) -> None:
        if moment.tzinfo is None:
            raise ValueError("a clock keeps aware UTC datetimes")
        if moment < self.now:
            raise ValueError(f"the clock cannot go back from {self.now} to {moment}")
        self.now = moment


def format_timestamp(moment: datetime) -> str:
    """The one way a resource writes a time: UTC, microseconds, ``Z`` (``2026-06-29T12:00:00.000000Z``).

    Partners, deliveries, attempts, registrations and their exports all use it, so a client parses
    one format of one fixed width, and a time read back (``nextAttemptAt``) is exactly the stored one.
    """
    if moment.tzinfo is None:
        raise ValueError("format_timestamp needs an aware datetime")
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
