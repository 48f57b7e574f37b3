"""Which errors mean the storage cannot do the work now, rather than a bug or a bad row.

Such an error answers 503 on every route (the client may try again shortly), never 500: the
database unreachable, a link gone silent (a timeout), a full disk, a read-only file or database,
a server shutting down. A row the database refuses (``service.db.writer.refused_rows``) is not one.
"""

from __future__ import annotations

import sqlite3

import asyncpg.exceptions
import sqlalchemy.exc

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


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the storage cannot do the work now (503), not that the request or the
    code is at fault."""
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return True
    return any(isinstance(seen, _UNAVAILABLE) for seen in _chain(error))
