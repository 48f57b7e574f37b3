"""The gauges read from the database when metrics are scraped, for ``/admin/metrics`` and the
worker's ``/metrics`` alike: the outbox (``stats``), the partners (``standing``) and the workers
(``roster``), in one connection, so every process reports the same numbers and a restart loses none of them.

When the database cannot be read the gauges are dropped rather than left at their last values
(a scrape must never show a queue or a circuit that may no longer be true), the counters are still
served, and ``service_ready`` says 0.

A database that does not answer counts as one that cannot be read once ``DATABASE_WITHIN``
seconds have passed, so the scrape answers in time and Prometheus sees ``service_ready`` 0 rather
than a target down (the engine's own limits would hold it 10 s and more, Prometheus's whole scrape
timeout). As the readiness probe does (``db.engine.Probe``), a read that has not answered in time
is left to end by itself (the engine's timeouts end it, and its connection is replaced), and the
next scrape waits on that same read rather than piling another on a link that does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from service.metrics import Metrics
from service.webhooks import roster, standing, stats

log = logging.getLogger(__name__)

# How long a scrape waits for the database: the bound each readiness probe gets (/readyz gives
# SELECT 1 1.5 s, service.health.PROBE_WITHIN), so service_ready says 0 exactly where /readyz would
# answer 503 for the database, and a scrape answers well inside the scrape_timeout of
# deploy/prometheus/prometheus.yml. A healthy read takes milliseconds (README, "Logs and metrics").
DATABASE_WITHIN = 1.5


class Read(NamedTuple):
    """What one read of the database found for the gauges."""

    outbox: stats.OutboxStats
    partners: list[standing.Standing]
    workers: Sequence[roster.Presence]


# The read under way for each engine (one per app); a finished one is replaced at the next scrape.
_reads: weakref.WeakKeyDictionary[AsyncEngine, asyncio.Task[Read | None]] = weakref.WeakKeyDictionary()


async def refresh_gauges(
    engine: AsyncEngine, metrics: Metrics, now: datetime, *, within: float | None = None
) -> bool:
    """Set the database gauges as of ``now``; whether the database could be read, within
    ``within`` seconds (``DATABASE_WITHIN`` unless given)."""
    bound = DATABASE_WITHIN if within is None else within
    reading = _reading(engine)
    done, _ = await asyncio.wait({reading}, timeout=bound)
    found = reading.result() if done else None
    if found is None:
        if not done:
            log.warning("metrics scrape: the database did not answer in %g s; its gauges are left out", bound)
        metrics.clear_database_gauges()
        return False
    metrics.set_outbox(found.outbox, now)
    metrics.set_partners(found.partners)
    silent = sum(1 for worker in found.workers if worker.silent(now))
    metrics.set_workers(live=len(found.workers) - silent, silent=silent)
    return True


def _reading(engine: AsyncEngine) -> asyncio.Task[Read | None]:
    """The read of ``engine`` still under way, or a new one."""
    loop = asyncio.get_running_loop()
    reading = _reads.get(engine)
    if reading is None or reading.done() or reading.get_loop() is not loop:
        reading = _reads[engine] = loop.create_task(_read(engine), name="metrics-scrape-read")
    return reading


async def _read(engine: AsyncEngine) -> Read | None:
    """The gauges' figures; None when the database could not be read (logged)."""
    try:
        async with engine.connect() as conn:
            outbox = await stats.outbox_stats(conn)
            partners = await standing.standings(conn)
            workers = await roster.roster(conn)
    except (SQLAlchemyError, OSError):
        log.warning("metrics scrape: the database could not be read; its gauges are left out", exc_info=True)
        return None
    return Read(outbox, partners, workers)


async def close(engine: AsyncEngine) -> None:
    """Stop a read of ``engine`` still under way (the app is stopping: nothing will wait on it)."""
    reading = _reads.pop(engine, None)
    if reading is not None and not reading.done() and reading.get_loop() is asyncio.get_running_loop():
        reading.cancel()
        with contextlib.suppress(BaseException):
            await reading
