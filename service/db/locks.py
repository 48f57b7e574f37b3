"""PostgreSQL's transaction-scoped advisory locks, which a client cut off cannot hold for ever.

The delivery workers take turns through such locks (``webhooks.claim.CLAIM_LOCK``). PostgreSQL
frees one when the session holding it ends, and ends a session idle in its transaction after
``engine.BRIEF_IDLE_IN_TRANSACTION_MS``. One case escapes every server-side timeout: a link cut in
the middle of an extended-protocol exchange (after Bind and Execute, before Sync). The session then
counts as *active*, waiting on its client (``ClientRead``), so neither the idle timeout nor the
statement timeout applies, and it holds the lock until TCP gives up on the client, which takes as
long as the keepalives allow, or for ever behind a proxy that answers them.

``take`` therefore asks for the lock without waiting first. When another session holds it, it
ends that session if it belongs to this service (same role, same ``application_name``) and has
been waiting on its client for longer than ``STUCK_AFTER_MS``, then waits its turn. No healthy
transaction of a worker waits on its client that long: its statements are answered in
milliseconds and its idle moments are cut at the same bound by the server.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.engine import BRIEF_IDLE_IN_TRANSACTION_MS

log = logging.getLogger(__name__)

STUCK_AFTER_MS = BRIEF_IDLE_IN_TRANSACTION_MS

# A bigint advisory key is shown in pg_locks as its high and low 32 bits, with objsubid 1.
_END_STUCK_HOLDERS = text(
    """
    SELECT a.pid, EXTRACT(EPOCH FROM clock_timestamp() - a.state_change) AS silent_s,
           pg_terminate_backend(a.pid) AS ended
      FROM pg_locks AS l
      JOIN pg_stat_activity AS a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
       AND l.classid = :b_high AND l.objid = :b_low
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND a.pid <> pg_backend_pid()
       AND a.usename = current_user
       AND a.application_name = current_setting('application_name')
       AND a.wait_event = 'ClientRead'
       AND a.state_change < clock_timestamp() - make_interval(secs => :b_stuck_s)
    """
).bindparams(bindparam("b_high"), bindparam("b_low"), bindparam("b_stuck_s"))


def _try(key: int) -> Any:
    return select(func.pg_try_advisory_xact_lock(key))


def _wait(key: int) -> Any:
    return select(func.pg_advisory_xact_lock(key))


async def take(conn: AsyncConnection, key: int, *, stuck_after_ms: int | None = None) -> list[int]:
    """Hold advisory lock ``key`` until ``conn``'s transaction ends; first end the session holding
    it if that session is this service's and has waited on its client longer than
    ``stuck_after_ms`` (``STUCK_AFTER_MS``). Returns the ended sessions' process ids (almost always
    none)."""
    if await conn.scalar(_try(key)):
        return []
    stuck_s = (STUCK_AFTER_MS if stuck_after_ms is None else stuck_after_ms) / 1000
    params = {"b_high": key >> 32, "b_low": key & 0xFFFF_FFFF, "b_stuck_s": stuck_s}
    ended = (await conn.execute(_END_STUCK_HOLDERS, params)).all()
    for row in ended:
        log.warning(
            "ended PostgreSQL session %s: it held advisory lock %#x and had waited %.1f s on a "
            "client gone silent",
            row.pid,
            key,
            row.silent_s,
        )
    await conn.execute(_wait(key))
    return [row.pid for row in ended if row.ended]
