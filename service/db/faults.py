"""Which errors mean the storage cannot do the work now, rather than a bug or a bad row.

Such an error answers 503 on every route (the client may try again shortly), never 500, and a
command exits 1: the database unreachable, a link gone silent (a timeout), a full disk, a standby
after a failover, a server shutting down, or PostgreSQL ending a transaction to break a deadlock or
a serialization conflict (``rolled_back``: two transactions met at the wrong moment; the same work
a moment later goes through). A row the database refuses (``service.db.writer.refused_rows``) is
not one.

Some of them will not pass on their own (``lasting``): the schema damaged or not this release's (a
table or column missing), a file that is not a database or is damaged, a database the service may
not write or open where it is configured, a role refused, a database dropped. A request meeting one
is still answered 503 (nothing was accepted), but a command exits 2, which the systemd units do not
restart (``RestartPreventExitStatus``): restarting would meet the same fault for ever.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

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
    sqlite3.OperationalError,  # disk full, locked past the busy timeout, I/O error; and _LASTING_SQLITE
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.InterfaceError,  # the connection is closed
    asyncpg.exceptions.InsufficientResourcesError,  # disk full, out of memory
    asyncpg.exceptions.OperatorInterventionError,  # shut down, cancelled, statement timeout
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # a standby after a failover
    *_ROLLED_BACK,  # a deadlock or a serialization conflict, broken by ending this transaction
)

_PRIMARY = 0xFF  # an extended result code's low byte is its primary code
# SQLite's primary result codes (https://sqlite.org/rescode.html) no wait mends; the others it raises
# as an OperationalError (busy, locked, full, I/O error, interrupted) pass.
_LASTING_SQLITE = frozenset(
    {
        sqlite3.SQLITE_ERROR,  # no such table or column: the schema is damaged or not this release's
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_READONLY,  # attempt to write a readonly database: the file's mode or owner
        sqlite3.SQLITE_CORRUPT,  # database disk image is malformed
        sqlite3.SQLITE_CANTOPEN,  # unable to open database file: its path or directory is wrong
        sqlite3.SQLITE_AUTH,
        sqlite3.SQLITE_NOTADB,  # file is not a database
    }
)
# PostgreSQL's SQLSTATEs no wait mends (the PostgreSQL manual, "Errcodes"). A read-only transaction
# (25006) is not one: a standby after a failover is promoted, or the service reaches the new primary.
_LASTING_POSTGRESQL = (
    asyncpg.exceptions.UndefinedTableError,  # 42P01: the schema is damaged or not this release's
    asyncpg.exceptions.UndefinedColumnError,  # 42703
    asyncpg.exceptions.UndefinedObjectError,  # 42704
    asyncpg.exceptions.InvalidSchemaNameError,  # 3F000
    asyncpg.exceptions.InsufficientPrivilegeError,  # 42501: the role may not use a table
    asyncpg.exceptions.InvalidCatalogNameError,  # 3D000: the database was dropped
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,  # 28000, 28P01: the role is refused
)


def _chain(error: BaseException, *, context: bool = False) -> list[BaseException]:
    """``error`` and the errors under it (a driver's, the cause), and with ``context`` the error
    each was raised while handling."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        under = getattr(current, "orig", None) or current.__cause__
        current = under or (current.__context__ if context else None)
    return seen


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` (or any error under it) is a wait that ran out of time."""
    return any(
        isinstance(seen, TimeoutError | asyncpg.exceptions.QueryCanceledError) for seen in _chain(error)
    )


def out_of_step(error: BaseException) -> bool:
    """Whether asyncpg found its connection partway through an exchange no one had begun.

    A server ending a session (a restart, a failover, ``pg_terminate_backend``, an idle bound) sends
    its reason, then closes the socket. When the reason is read while the connection is idle and the
    close has not yet been, asyncpg's protocol takes the unasked-for message as a broken exchange:
    every later use raises ``InternalClientError``, the close arriving only later. The connection is
    as good as closed. Where that error is what a rollback met, the rollback's own error carries it
    as its context, so the context is followed here too.
    """
    broken = asyncpg.exceptions.InternalClientError
    return any(isinstance(seen, broken) for seen in _chain(error, context=True))


# What asyncio's loop says of a future that failed and was dropped unread.
_NEVER_RETRIEVED = "Future exception was never retrieved"


def quiet_orphaned_waiters(loop: asyncio.AbstractEventLoop) -> None:
    """Keep the waiters asyncpg leaves behind out of ``loop``'s ERROR lines; nothing else changes.

    asyncpg's COPY (the worker's log of its attempts) makes the future its answer will come to
    before it asks the protocol to begin, and drops it unread when the protocol refuses: when the
    connection is ``out_of_step``. That COPY fails as any statement would and the worker turns again
    on a new connection, with its WARNING; but when the connection then closes, asyncpg fails the
    dropped future too, and asyncio logs "Future exception was never retrieved" at ERROR, with
    asyncpg's "connection was closed in the middle of operation" and no word of where: a second
    alarm, about nothing, each time the server ends the worker's session between two statements.

    Such a report (a plain future, never a task, failed by asyncpg's ``ConnectionDoesNotExistError``)
    is logged at DEBUG here; every other report goes on to the handler ``loop`` had. Installed once
    a loop.
    """
    previous = loop.get_exception_handler()
    if getattr(previous, "quiets_orphaned_waiters", False):
        return

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if (
            context.get("message") == _NEVER_RETRIEVED
            and type(context.get("future")) is asyncio.Future
            and isinstance(context.get("exception"), asyncpg.exceptions.ConnectionDoesNotExistError)
        ):
            log.debug("asyncpg dropped the waiter of a statement its lost connection never began")
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handle.quiets_orphaned_waiters = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handle)


def rolled_back(error: BaseException) -> bool:
    """Whether PostgreSQL ended the transaction to break a deadlock (SQLSTATE 40P01) or a
    serialization conflict (40001): nothing of it was written, and it may be run again at once."""
    return any(isinstance(seen, _ROLLED_BACK) for seen in _chain(error))


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the storage cannot do the work now (503), not that the request or the
    code is at fault; some such faults are also ``lasting``."""
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return True
    if out_of_step(error):
        return True
    return any(isinstance(seen, _UNAVAILABLE) for seen in _chain(error)) or lasting(error)


def lasting(error: BaseException) -> bool:
    """Whether ``error`` (or any error under it) is a storage fault that will not pass on its own:
    a command exits 2 on it, not 1 (``service.cli.main``)."""
    for seen in _chain(error):
        if isinstance(seen, _LASTING_POSTGRESQL):
            return True
        code = getattr(seen, "sqlite_errorcode", None) if isinstance(seen, sqlite3.Error) else None
        if isinstance(code, int) and (code & _PRIMARY) in _LASTING_SQLITE:
            return True
    return False


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
