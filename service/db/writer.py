"""Writing registration batches: one driver call per batch, on a connection kept for the purpose.

The group commit (``service.db.batch``) hands over a batch; the batch is one transaction. Through
SQLAlchemy's pooled async execution every batch paid about 0.9 ms of CPU before its first row,
measured here: a pool checkout and return with its reset, and for aiosqlite about ten hops to the
driver's thread, for asyncpg a pre-ping and BEGIN/COMMIT round trips. So a batch goes straight to
the driver instead:

- SQLite: a thread of the writer's own holds one ``sqlite3`` connection (opened by a SQLAlchemy
  engine, so the URL and the pragmas are the service's); a batch is one hop to it, an
  ``executemany`` and a commit.
- PostgreSQL: one asyncpg connection held for the writer; a batch is one ``executemany``, which
  asyncpg sends as a single pipeline in one implicit transaction (atomic since asyncpg 0.22).

SQLAlchemy still decides what is written: the statement is ``UPSERT`` from ``registrations``
compiled for the dialect, and each value passes through the column type's own bind processor (on
SQLite, times through ``sqlite_utc_text``, which makes the same text eight times faster), so rows
come out exactly as a Core ``execute`` would store them (tests hold the two to each other).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg.exceptions
import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import NullPool, PoolProxiedConnection
from sqlalchemy.types import TypeDecorator

from service.db.engine import sqlite_pragmas
from service.db.registrations import UPSERT, Registration, batch_order
from service.db.tables import registrations

# Seconds a registration batch may wait for its commit on PostgreSQL (docs/architecture.md "Faults
# and slow clients"): a dead link then costs a few 503s, never a hung registration.
COMMIT_TIMEOUT_S = 5.0
# The statement's parameters, in the order of each row tuple.
PARAMETERS = ("email", "email_key", "intent", "project", "message", "created_at", "updated_at")


# SQLAlchemy's default text for SQLite's DATETIME; ``isoformat`` writes the same characters.
SQLITE_DATETIME = (
    "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d"
)


def _sqlite_storage_format(dialect: Dialect) -> str | None:
    column_type = registrations.c.created_at.type
    assert isinstance(column_type, TypeDecorator)  # UTCDateTime over DateTime
    return getattr(column_type.impl_instance.dialect_impl(dialect), "_storage_format", None)


def sqlite_utc_text(value: datetime) -> str:
    """What ``UTCDateTime``'s processor on SQLite makes of ``value``, in 0.4 µs instead of 3.2 µs.

    The column type's processor runs ``process_bind_param`` and then SQLAlchemy's ``%`` format over
    a dict of the fields; this is the same conversion to naive UTC and the same text, by
    ``isoformat`` (a property test holds the two to each other over every aware datetime).
    """
    if value.tzinfo is None:
        raise ValueError("naive datetimes are not stored; pass an aware UTC datetime")
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(" ", "microseconds")


class Upsert:
    """``UPSERT`` compiled once for a dialect, and the row tuples its driver takes."""

    def __init__(self, dialect: Dialect) -> None:
        compiled = UPSERT[dialect.name].compile(
            dialect=dialect, column_keys=list(PARAMETERS), for_executemany=True
        )
        if tuple(compiled.positiontup or ()) != PARAMETERS:
            raise RuntimeError(f"unexpected parameter order: {compiled.positiontup}")
        self.sql = str(compiled)
        processors = {
            name: registrations.c[name].type.dialect_impl(dialect).bind_processor(dialect)
            for name in PARAMETERS
        }
        # Text goes to both drivers as it is; the two times share one type and, per row, one value.
        if any(processors[name] for name in PARAMETERS[:5]) or processors["created_at"] is None:
            raise RuntimeError(f"unexpected bind processors for {dialect.name}: {processors}")
        self._time: Callable[[Any], Any] = processors["created_at"]
        if dialect.name == "sqlite" and _sqlite_storage_format(dialect) == SQLITE_DATETIME:
            self._time = sqlite_utc_text

    def rows(self, entries: Sequence[Registration]) -> list[tuple[Any, ...]]:
        rows = []
        for entry in batch_order(entries):
            at = self._time(entry.at)
            rows.append((entry.email, entry.email_key, entry.intent, entry.project, entry.message, at, at))
        return rows


def refused_rows(error: BaseException) -> bool:
    """Whether a batch failed on its rows (a constraint, a value) rather than on the database.

    Only such a batch is worth writing again row by row (``BatchWriter``'s ``split``): one bad row
    then fails alone. A lost or refused connection, a timeout or a locked database fails the batch
    whole, at once.
    """
    # Through SQLAlchemy the driver's error is wrapped: look at the whole chain of causes.
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, _REFUSALS):
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


_REFUSALS = (
    sqlite3.IntegrityError,
    sqlite3.DataError,
    asyncpg.exceptions.IntegrityConstraintViolationError,
    asyncpg.exceptions.DataError,
)


class RegistrationWriter(Protocol):
    async def write(self, entries: Sequence[Registration]) -> None:
        """Store the batch in one transaction; return only after it is committed."""

    async def close(self) -> None: ...


class SQLiteWriter:
    """A thread of its own with one ``sqlite3`` connection; a batch is one hop to it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = sqlalchemy.create_engine(
            engine.url.set(drivername="sqlite+pysqlite"), poolclass=NullPool, hide_parameters=True
        )
        event.listen(self._engine, "connect", sqlite_pragmas)
        self._upsert = Upsert(self._engine.dialect)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="registrations")
        self._connection: PoolProxiedConnection | None = None  # opened and used in the thread only

    async def write(self, entries: Sequence[Registration]) -> None:
        rows = self._upsert.rows(entries)
        await asyncio.get_running_loop().run_in_executor(self._thread, self._write, rows)

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        if self._connection is None:
            self._connection = self._engine.raw_connection()
        connection = self._connection
        try:
            # sqlite3 opens the transaction at the first INSERT; the commit ends it.
            connection.cursor().executemany(self._upsert.sql, rows)
            connection.commit()
        except BaseException:
            self._disconnect()  # the next batch starts on a fresh connection: nothing half-done carries over
            raise

    def _disconnect(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            try:
                connection.rollback()
            finally:
                connection.close()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._thread, self._disconnect)
        self._thread.shutdown()
        self._engine.dispose()


class AsyncpgWriter:
    """One asyncpg connection held for the writer; a batch is one atomic ``executemany``.

    A batch waits at most ``COMMIT_TIMEOUT_S`` for its commit. A connection that failed for any
    reason but the rows themselves (a timeout, a lost link) is closed and a fresh one opened for
    the next batch: asyncpg keeps a timed-out connection waiting on its cancel request, which a
    silent link never answers.
    """

    def __init__(self, engine: AsyncEngine, commit_timeout: float | None = None) -> None:
        self._engine = engine
        self._upsert = Upsert(engine.dialect)
        self._commit_timeout = COMMIT_TIMEOUT_S if commit_timeout is None else commit_timeout
        self._connection: AsyncConnection | None = None
        self._driver: Any = None  # the asyncpg.Connection under ``_connection``

    async def write(self, entries: Sequence[Registration]) -> None:
        rows = self._upsert.rows(entries)
        try:
            await self._executemany(rows)
        except ServerClosed:
            # The server ended the connection (a restart, a failover): once more on a new one. The
            # upsert is idempotent, so a batch that committed before the loss is only written again.
            await self._executemany(rows)

    async def _executemany(self, rows: list[tuple[Any, ...]]) -> None:
        if self._connection is None:
            connection = await self._engine.connect()
            self._driver = (await connection.get_raw_connection()).driver_connection
            self._connection = connection
        driver = self._driver
        try:
            await driver.executemany(self._upsert.sql, rows, timeout=self._commit_timeout)
        except BaseException as error:
            if refused_rows(error):
                raise  # the rows' fault: the connection is sound
            closed = driver.is_closed()
            await self._release(invalidate=True)
            if closed and isinstance(error, Exception):
                raise ServerClosed() from error
            raise

    async def _release(self, *, invalidate: bool = False) -> None:
        connection, self._connection, self._driver = self._connection, None, None
        if connection is not None:
            if invalidate:
                await connection.invalidate()
            await connection.close()

    async def close(self) -> None:
        await self._release()


class ServerClosed(Exception):
    """The server closed the writer's connection under a batch."""


def registration_writer(engine: AsyncEngine) -> RegistrationWriter:
    """The writer for the engine's database."""
    if engine.dialect.name == "sqlite":
        return SQLiteWriter(engine)
    return AsyncpgWriter(engine)
