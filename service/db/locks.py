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
been waiting on its client for longer than ``STUCK_AFTER_MS``, then waits its turn, at most that
long at a time (``lock_timeout``, in a savepoint), looking again between waits: a holder that gets
stuck while others already wait is ended within about twice the bound. No healthy transaction of
a worker waits on its client that long: its statements are answered in milliseconds and its idle
moments are cut at the same bound by the server. Past ``WAIT_AT_MOST_S`` in all it gives up, as a
single wait would have at the command timeout.

The service's advisory keys, one per purpose: ``webhooks.claim.CLAIM_LOCK`` and
``webhooks.batching.FORM_LOCK`` (transaction-scoped, taken here), and ``engine.MIGRATE_LOCK``
(session-level, held by ``engine.migrate`` on a connection of its own while migrations run, so
processes migrating together take turns; it cannot live here, as this module imports the engine).
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import BigInteger, bindparam, func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.engine import BRIEF_IDLE_IN_TRANSACTION_MS, POSTGRESQL_COMMAND_TIMEOUT_S

log = logging.getLogger(__name__)

STUCK_AFTER_MS = BRIEF_IDLE_IN_TRANSACTION_MS
WAIT_AT_MOST_S = POSTGRESQL_COMMAND_TIMEOUT_S
LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE of a wait cut by lock_timeout
_LOCK_TIMEOUT = select(func.current_setting("lock_timeout"))
_SET_LOCK_TIMEOUT = select(func.set_config("lock_timeout", bindparam("b_lock_timeout"), True))

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


# Built once: every claim on PostgreSQL asks for its lock.
_TRY = select(func.pg_try_advisory_xact_lock(bindparam("b_key", type_=BigInteger())))
_WAIT = select(func.pg_advisory_xact_lock(bindparam("b_key", type_=BigInteger())))


async def take(conn: AsyncConnection, key: int, *, stuck_after_ms: int | None = None) -> list[int]:
    """Hold advisory lock ``key`` until ``conn``'s transaction ends; end on the way any session
    holding it that is this service's and has waited on its client longer than ``stuck_after_ms``
    (``STUCK_AFTER_MS``). Returns the ended sessions' process ids (almost always none)."""
    if await conn.scalar(_TRY, {"b_key": key}):
        return []
    bound_ms = STUCK_AFTER_MS if stuck_after_ms is None else stuck_after_ms
    deadline = asyncio.get_running_loop().time() + WAIT_AT_MOST_S
    previous = str(await conn.scalar(_LOCK_TIMEOUT))
    ended: list[int] = []
    while True:
        ended += await _end_stuck_holders(conn, key, bound_ms)
        if await _wait_within(conn, key, max(bound_ms, 100), restore=previous):
            return ended
        if asyncio.get_running_loop().time() >= deadline:
            raise TimeoutError(f"advisory lock {key:#x} still held after {WAIT_AT_MOST_S:g} s")


async def _end_stuck_holders(conn: AsyncConnection, key: int, bound_ms: int) -> list[int]:
    params = {"b_high": key >> 32, "b_low": key & 0xFFFF_FFFF, "b_stuck_s": bound_ms / 1000}
    ended = (await conn.execute(_END_STUCK_HOLDERS, params)).all()
    for row in ended:
        log.warning(
            "ended PostgreSQL session %s: it held advisory lock %#x and had waited %.1f s on a "
            "client gone silent",
            row.pid,
            key,
            row.silent_s,
        )
    return [row.pid for row in ended if row.ended]


async def _wait_within(conn: AsyncConnection, key: int, wait_ms: int, *, restore: str) -> bool:
    """Wait for the lock at most ``wait_ms``; whether it was taken. The wait runs in a savepoint,
    so a wait cut short leaves the transaction usable (and its lock_timeout as it was)."""
    try:
        async with conn.begin_nested():
            await conn.execute(_SET_LOCK_TIMEOUT, {"b_lock_timeout": str(wait_ms)})
            await conn.execute(_WAIT, {"b_key": key})
    except DBAPIError as error:
        if getattr(error.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            return False
        raise
    # A setting made in a released savepoint lasts to the end of the transaction: put it back.
    await conn.execute(_SET_LOCK_TIMEOUT, {"b_lock_timeout": restore})
    return True
