"""Which errors mean the storage cannot do the work now, rather than a bug or a bad row.

Such an error answers 503 on every route (the client may try again shortly), never 500, and a
command exits 1: the database unreachable, a link gone silent (a timeout), a full disk, a read-only
file or database, a server shutting down, or PostgreSQL ending a transaction to break a deadlock or
a serialization conflict (``rolled_back``: two transactions met at the wrong moment; the same work
a moment later goes through). A row the database refuses (``service.db.writer.refused_rows``) is
not one.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg.exceptions
import sqlalchemy.exc

log = logging.getLogger(__name__)
T = TypeVar("T")

# PostgreSQL ended the transaction so that another could go on; nothing of it was written.
_ROLLED_BACK = (
    asyncpg.exceptions.DeadlockDetectedError,  # 40P01
    asyncpg.exceptions.SerializationError,  # 40001
)

_UNAVAILABLE = (
    TimeoutError,  # a command timeout or a probe's bound
    ConnectionError,
    OSError,
    sqlalchemy.exc.TimeoutError,  # no pooled connection came free in time
    sqlite3.OperationalError,  # disk full, read-only, locked past the busy timeout, I/O error
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.InterfaceError,  # the connection is closed
    asyncpg.exceptions.InsufficientResourcesError,  # disk full, out of memory
    asyncpg.exceptions.OperatorInterventionError,  # shut down, cancelled, statement timeout
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # a standby after a failover
    *_ROLLED_BACK,  # a deadlock or a serialization conflict, broken by ending this transaction
)


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = getattr(current, "orig", None) or current.__cause__
    return seen


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` (or any error under it) is a wait that ran out of time."""
    return any(
        isinstance(seen, TimeoutError | asyncpg.exceptions.QueryCanceledError) for seen in _chain(error)
    )


def rolled_back(error: BaseException) -> bool:
    """Whether PostgreSQL ended the transaction to break a deadlock (SQLSTATE 40P01) or a
    serialization conflict (40001): nothing of it was written, and it may be run again at once."""
    return any(isinstance(seen, _ROLLED_BACK) for seen in _chain(error))


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the storage cannot do the work now (503), not that the request or the
    code is at fault."""
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return True
    return any(isinstance(seen, _UNAVAILABLE) for seen in _chain(error))


async def once_more_if_rolled_back(transaction: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``transaction`` (a whole transaction: begun, worked and committed by the callable); run
    it once more should PostgreSQL end it to break a deadlock or a serialization conflict. The
    other transaction went on, so the second run rarely meets it again; if it does, the error
    stands (``unavailable``: 503, exit status 1)."""
    try:
        return await transaction()
    except sqlalchemy.exc.DBAPIError as error:
        if not rolled_back(error):
            raise
        log.warning("%s was rolled back by the database (%s); running it once more", what, _sqlstate(error))
    return await transaction()


def _sqlstate(error: BaseException) -> str:
    for seen in _chain(error):
        if state := getattr(seen, "sqlstate", None):
            return str(state)
    return type(error).__name__
