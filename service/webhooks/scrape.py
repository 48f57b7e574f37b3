"""The gauges read from the database when metrics are scraped, for ``/admin/metrics`` and the
worker's ``/metrics`` alike: the outbox (``stats``), the partners (``standing``) and the workers
(``roster``), in one connection, so every process reports the same numbers and a restart loses none of them.

When the database cannot be read the gauges are dropped rather than left at their last values
(a scrape must never show a queue or a circuit that may no longer be true), the counters are still
served, and ``service_ready`` says 0.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from service.metrics import Metrics
from service.webhooks import roster, standing, stats

log = logging.getLogger(__name__)


async def refresh_gauges(engine: AsyncEngine, metrics: Metrics, now: datetime) -> bool:
    """Set the database gauges as of ``now``; whether the database could be read."""
    try:
        async with engine.connect() as conn:
            outbox = await stats.outbox_stats(conn)
            partners = await standing.standings(conn)
            workers = await roster.roster(conn)
    except (SQLAlchemyError, OSError):
        log.warning("metrics scrape: the database could not be read; its gauges are left out", exc_info=True)
        metrics.clear_database_gauges()
        return False
    metrics.set_outbox(outbox, now)
    metrics.set_partners(partners)
    silent = sum(1 for worker in workers if worker.silent(now))
    metrics.set_workers(live=len(workers) - silent, silent=silent)
    return True
