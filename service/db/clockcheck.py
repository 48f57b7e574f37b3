"""This machine's clock against the database server's: measured, and refused past what leases absorb.

Every process reads time from its own injected clock (``service.clock``): a worker's claims, their
leases and what is due are all judged by the clock of the machine the worker runs on. Workers on
several machines share one PostgreSQL outbox, so their clocks must agree. The database server's
clock is the one every worker can see: ``measure`` reads PostgreSQL's ``clock_timestamp()`` on one
connection a few times and keeps the reading with the shortest round trip, taking this machine's
time at the round trip's midpoint. The offset is this machine's clock less the database's: positive
when this machine runs ahead.

``check_clock`` refuses a start (``python -m service worker``, and ``serve`` with its in-process
worker) whose clock is off by more than ``BOUND``; the running worker measures again at each roster
heartbeat (``service.webhooks.worker``), reports the offset (``service_clock_offset_seconds``) and
logs when it passes the bound. On SQLite there is one machine and one clock: nothing to measure.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from service.clock import Clock, Timer, utc_now
from service.db.engine import DatabaseUnusable, create_engine, is_sqlite, unusable

# How far (seconds) this machine's clock may be from the database server's. A worker starts a
# claimed attempt no later than its lease's end less one attempt timeout and one second
# (``Worker._start_by``), so by its own clock every attempt ends at least 1 s before its lease does.
# Another worker claims the delivery again once *its* clock reaches the lease's end: if that clock
# runs more than 1 s ahead of the first worker's, it sends the delivery while the first may still
# be sending it (the same delivery twice at once, and the partner's cap on attempts in flight
# passed). Each machine is measured against one reference, the database server's clock; two
# machines each within BOUND of it are within twice BOUND of each other, so BOUND is half that
# second. NTP keeps clocks within milliseconds of each other: half a second is passed only by a
# clock that is not synchronised at all.
BOUND = 0.5
# Readings per measurement; the one with the shortest round trip is kept (the least waited on:
# a busy event loop or network delays one reading, seldom all of them).
READS = 3
_DATABASE_NOW = select(func.clock_timestamp())  # the server's time now, not the transaction's start
FIX = "synchronise the clocks with NTP (chrony or systemd-timesyncd) on this machine and the database server"


@dataclass(frozen=True, slots=True)
class Offset:
    """One measurement of this machine's clock against the database server's."""

    seconds: float  # this machine's clock less the database's: positive, this machine runs ahead
    within: float  # half the round trip of the reading: how far off the measurement itself may be

    @property
    def past_bound(self) -> bool:
        return abs(self.seconds) > BOUND

    def describe(self) -> str:
        """``40.000 s ahead of`` / ``0.812 s behind`` the database server's clock, in words."""
        direction = "ahead of" if self.seconds >= 0 else "behind"
        return f"{abs(self.seconds):.3f} s {direction} the database server's"


class ClockSkewed(DatabaseUnusable):
    """This machine's clock is further from the database server's than leases absorb (``BOUND``):
    a worker here could send deliveries other workers are still sending. Nothing starts; NTP may
    bring the clock in shortly (a machine just booted, before its first synchronisation), so exit
    status 1, which the units restart until the clocks agree."""

    passing = True


async def measure(
    conn: AsyncConnection, clock: Clock, *, reads: int = READS, timer: Timer = time.perf_counter
) -> Offset | None:
    """``clock`` against the database's on ``conn``: the best of ``reads`` readings (the shortest
    round trip by ``timer``); None on SQLite, where the database's clock is this machine's."""
    if conn.dialect.name != "postgresql":
        return None
    best: Offset | None = None
    for _ in range(max(1, reads)):
        sent, before = timer(), clock()
        database = (await conn.execute(_DATABASE_NOW)).scalar_one()
        after, answered = clock(), timer()
        here = before + (after - before) / 2
        reading = Offset(seconds=(here - database).total_seconds(), within=(answered - sent) / 2)
        if best is None or reading.within < best.within:
            best = reading
    return best


def refusal(offset: Offset) -> str:
    """The one line a start refused for ``offset`` prints."""
    return (
        f"this machine's clock is {offset.describe()} (to within {offset.within * 1000:.1f} ms); delivery "
        f"leases absorb at most {BOUND:g} s between machines' clocks, so a delivery could be sent by "
        f"two workers at once: {FIX}, then start again"
    )


def check_clock(database_url: str, *, clock: Clock | None = None) -> Offset | None:
    """Measure ``clock`` (by default the system's, ``utc_now``) against the database's; raises
    ``ClockSkewed`` past ``BOUND``, the reason the database cannot be reached as ``check_database``
    does, and returns the offset otherwise (None on SQLite, without connecting)."""
    if is_sqlite(database_url):
        return None
    reading_clock = clock or utc_now

    async def read() -> Offset | None:
        engine = create_engine(database_url, bounded=True)  # no reading waits for ever
        try:
            async with engine.connect() as conn:
                return await measure(conn, reading_clock)
        finally:
            await engine.dispose()

    try:
        offset = asyncio.run(read())
    except Exception as error:
        reason = unusable(database_url, error)
        if reason is None:
            raise
        raise reason from None
    if offset is not None and offset.past_bound:
        raise ClockSkewed(refusal(offset))
    return offset
