"""The roster: which delivery workers run now, wherever they run.

Each worker run writes one row of the ``workers`` table when it starts and again every
``HEARTBEAT`` while it runs (its heartbeat: the moment, and how many attempts it has logged), and
deletes it when it stops cleanly. A worker that died leaves its row behind: unseen for
``SILENT_AFTER`` it is listed as silent, and the next beat of any worker forgets it once it has
been unseen for ``FORGET_AFTER``. The console's overview, ``GET /admin/workers`` and
``python -m service workers`` list the roster, so an operator running workers on several servers
sees from one place whether each is alive, without reaching every worker's own ``/healthz``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from service.clock import format_timestamp
from service.db.tables import workers

HEARTBEAT = timedelta(seconds=15)
# Three beats missed: the worker is stopped, stuck, or cut off from the database.
SILENT_AFTER = 3 * HEARTBEAT
FORGET_AFTER = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Presence:
    """One worker run, as its last beat wrote it."""

    id: str  # the run's name on its claims (deliveries.claimed_by)
    host: str
    pid: int
    role: str  # "serve": inside the server; "worker": python -m service worker
    loop: str  # "uvloop" or "asyncio"
    concurrency: int
    attempts: int  # attempts logged since it started
    started_at: datetime
    seen_at: datetime

    def silent(self, now: datetime) -> bool:
        return now - self.seen_at > SILENT_AFTER

    def public(self, now: datetime) -> dict[str, Any]:
        return {
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "role": self.role,
            "loop": self.loop,
            "concurrency": self.concurrency,
            "attemptsLogged": self.attempts,
            "startedAt": format_timestamp(self.started_at),
            "seenAt": format_timestamp(self.seen_at),
            "state": "silent" if self.silent(now) else "live",
        }


async def beat(conn: AsyncConnection, presence: Presence) -> None:
    """Write ``presence`` (its row, made on the first beat), and forget the rows of workers unseen
    for ``FORGET_AFTER``."""
    changed = await conn.execute(
        update(workers)
        .where(workers.c.id == presence.id)
        .values(attempts=presence.attempts, seen_at=presence.seen_at)
    )
    if not changed.rowcount:
        await conn.execute(insert(workers).values(**asdict(presence)))
    await conn.execute(delete(workers).where(workers.c.seen_at < presence.seen_at - FORGET_AFTER))


async def leave(conn: AsyncConnection, worker_id: str) -> None:
    """Delete the row of a worker stopping cleanly."""
    await conn.execute(delete(workers).where(workers.c.id == worker_id))


async def roster(conn: AsyncConnection) -> Sequence[Presence]:
    """Every worker with a row, the longest-running first."""
    rows = await conn.execute(select(workers).order_by(workers.c.started_at, workers.c.id))
    return [Presence(**row._mapping) for row in rows]
