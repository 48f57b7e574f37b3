"""Engines and migrations: one async code path for SQLite and PostgreSQL.

The operator writes ``sqlite:///var/service.db`` or ``postgresql://user@host/db``; the service picks
the async driver (aiosqlite, asyncpg). SQLite runs in WAL mode so readers never block the writer.

The SQLite file holds partner secrets (sealed) and registrants' addresses, so it is private to its
owner: its directory is made 0700, the database file is created 0600 before SQLite opens it (SQLite
gives the ``-wal`` and ``-shm`` files the database file's mode), and files left readable by an
earlier release are made private at every start (``private_sqlite_files``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import socket
import sqlite3
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg.exceptions
from alembic import command
from alembic.config import Config
from sqlalchemy import bindparam, event, func, select, text
from sqlalchemy.engine import URL, Dialect, ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from service.db.faults import out_of_step, timed_out

MIGRATIONS = "service.db:migrations"
# How long a SQLite connection waits for another process's write lock before giving up; two server
# workers share one file, and a group commit holds the lock for a few milliseconds at most.
SQLITE_BUSY_TIMEOUT_MS = 10_000
# How long opening a PostgreSQL connection may take (asyncpg's default is 60 s): with the server
# unreachable, a registration is answered 503 after this, not after a minute.
POSTGRESQL_CONNECT_TIMEOUT_S = 10.0
# No wait on PostgreSQL is unbounded (docs/architecture.md "Faults and slow clients"): each command
# waits at most this long for its answer (asyncpg's command_timeout; a silent link is otherwise
# waited on for ever), and the connection it timed out on is closed, never reused.
POSTGRESQL_COMMAND_TIMEOUT_S = 10.0
# What the server itself enforces on every session: a statement running longer, or a transaction
# left open and idle longer (its client gone silent, its row locks held), is ended by PostgreSQL.
# About the delivery lease (twice the default attempt timeout plus a margin), so a worker's
# transaction is never cut short while its claims hold.
POSTGRESQL_STATEMENT_TIMEOUT_MS = 35_000
# TCP keepalives on the server's side of each connection: a client host that vanished is noticed
# after about a minute (idle 30 s, then 5 probes 6 s apart) and its session ended. The name marks
# the service's own sessions in pg_stat_activity (and for db.locks, which may end one stuck).
APPLICATION_NAME = "launch-waitlist-service"
POSTGRESQL_SERVER_SETTINGS = {
    "application_name": APPLICATION_NAME,
    "statement_timeout": str(POSTGRESQL_STATEMENT_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": str(POSTGRESQL_STATEMENT_TIMEOUT_MS),
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "6",
    "tcp_keepalives_count": "5",
}
# A transaction of the delivery worker idles between its statements only while its event loop runs
# other tasks: milliseconds. Yet it holds what every worker waits for: the claim lock, its
# deliveries' and partners' row locks. When the link goes silent in the middle of one, PostgreSQL
# ends the session after this long idle and frees them, not after the 35 s every session gets, so
# the other workers (and this one, once the link heals) claim again within seconds.
BRIEF_IDLE_IN_TRANSACTION_MS = 5_000
_BOUND_IDLE = select(func.set_config("idle_in_transaction_session_timeout", bindparam("b_idle_ms"), True))
# The same bound for a whole session (HeldConnection), and the session's own value again.
_SESSION_BOUND_IDLE = select(
    func.set_config("idle_in_transaction_session_timeout", bindparam("b_idle_ms"), False)
)
_RESET_BOUND_IDLE = text("RESET idle_in_transaction_session_timeout")


def async_url(database_url: str) -> URL:
    """The SQLAlchemy URL with the async driver for the operator's plain URL."""
    url = make_url(database_url)
    if url.drivername in ("sqlite", "sqlite+pysqlite"):
        return url.set(drivername="sqlite+aiosqlite")
    if url.drivername in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        url = url.set(drivername="postgresql+asyncpg")
    if url.get_backend_name() == "postgresql" and "sslmode" in url.query:
        # libpq's name, which every guide and hosted database gives; asyncpg takes the same modes
        # (disable ... verify-full) as ``ssl``.
        url = url.difference_update_query(["sslmode"]).update_query_dict({"ssl": url.query["sslmode"]})
    return url



def is_sqlite(database_url: str) -> bool:
    return make_url(database_url).get_backend_name() == "sqlite"


PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600
# The files SQLite keeps beside a database in WAL mode, the key file of service.keyring, and the
# lock processes migrating the file take turns under (``migrate``).
MIGRATE_LOCK_SUFFIX = "-migrate.lock"
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal", ".key", MIGRATE_LOCK_SUFFIX)


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases and in-memory SQLite."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    if url.database.startswith("file:"):
        return None  # a URI filename: the operator manages it
    return Path(url.database)


def _ours(directory: Path, database: Path) -> bool:
    """Whether ``directory`` holds nothing but this database's own files (it is the service's)."""
    names = {database.name + suffix for suffix in SQLITE_COMPANIONS}
    return all(entry.name in names for entry in directory.iterdir())


# What stops the database's directory or files being made or made private as configured: a file
# where a directory must be, no permission, a read-only file system. No restart mends these; a full
# disk (ENOSPC), or a process short of file descriptors, may pass, and stays an OSError.
_MISPLACED = frozenset(
    {
        errno.EEXIST,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENAMETOOLONG,
        errno.ELOOP,
    }
)


def _in_the_way(directory: Path) -> Path | None:
    """The nearest of ``directory`` and its parents that exists, when it is not a directory."""
    try:
        for path in (directory, *directory.parents):
            if path.exists():
                return None if path.is_dir() else path
    except OSError:  # a parent that may not be looked into: the error's own words say so
        pass
    return None


def _misplaced(database: Path, error: OSError) -> DatabaseUnusable:
    """The one line for a database whose directory or file cannot be made where it is configured."""
    blocker = _in_the_way(database.parent) if error.errno in (errno.EEXIST, errno.ENOTDIR) else None
    if blocker is not None:
        reason = f"{blocker} is not a directory"
    else:
        reason = f"{error.strerror}: {error.filename}" if error.filename else str(error.strerror)
    return DatabaseUnusable(
        f"the SQLite database {database} cannot be kept there ({reason}); check SERVICE_DATABASE_URL"
    )


def sqlite_directory(database: Path) -> None:
    """Make the database's directory 0700 if it does not exist (or make it 0700 when it holds
    nothing but this database's files); raises ``DatabaseUnusable`` naming the path when it cannot
    be (a file in the way, no permission): a configuration error, exit status 2 for every command."""
    directory = database.parent
    try:
        if not directory.exists():
            directory.mkdir(mode=PRIVATE_DIRECTORY, parents=True, exist_ok=True)
            directory.chmod(PRIVATE_DIRECTORY)  # mkdir's mode is cut by the umask; this is not
        elif _ours(directory, database) and stat.S_IMODE(directory.stat().st_mode) & 0o077:
            directory.chmod(PRIVATE_DIRECTORY)
    except OSError as error:
        if error.errno not in _MISPLACED:
            raise
        raise _misplaced(database, error) from None


def private_sqlite_files(database: Path) -> None:
    """Make the database's directory (``sqlite_directory``) and its files 0600, and create the
    database file 0600 if it does not exist yet; raises ``DatabaseUnusable`` naming the path when
    they cannot be made where they are configured."""
    sqlite_directory(database)
    try:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
        for suffix in SQLITE_COMPANIONS:
            path = database.with_name(database.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                if stat.S_IMODE(path.stat().st_mode) & 0o077:
                    path.chmod(PRIVATE_FILE)
    except OSError as error:
        if error.errno not in _MISPLACED:
            raise
        raise _misplaced(database, error) from None


def sqlite_pragmas(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a committed transaction survives the process being killed (the WAL is in
    # the OS page cache); only a power cut can lose the last commits. FULL would fsync every batch.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def create_engine(database_url: str, *, bounded: bool = False, **options: Any) -> AsyncEngine:
    """The async engine for the operator's URL; its errors never carry statement parameters.

    ``bounded`` (the server and the worker) gives every PostgreSQL command and transaction its
    time limit and the session its keepalives; migrations and the operator's commands, which may
    rightly run for minutes, go without.
    """
    url = async_url(database_url)
    # Parameters hold partner secrets and registrants' addresses; an error that reaches a log must
    # name the statement only.
    options["hide_parameters"] = True
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(database_url)
        if path is not None:
            private_sqlite_files(path)
        engine = create_async_engine(url, **options)
        event.listen(engine.sync_engine, "connect", sqlite_pragmas)
        return engine
    connect_args = options.setdefault("connect_args", {})
    connect_args.setdefault("timeout", POSTGRESQL_CONNECT_TIMEOUT_S)
    if bounded:
        connect_args.setdefault("command_timeout", POSTGRESQL_COMMAND_TIMEOUT_S)
        connect_args.setdefault("server_settings", dict(POSTGRESQL_SERVER_SETTINGS))
        # A pool waits this long for a free connection, not SQLAlchemy's 30 s.
        options.setdefault("pool_timeout", POSTGRESQL_COMMAND_TIMEOUT_S)
    options.setdefault("pool_size", 10)
    options.setdefault("max_overflow", 10)
    options.setdefault("pool_pre_ping", True)
    engine = create_async_engine(url, **options)
    event.listen(engine.sync_engine, "handle_error", _lost_is_disconnect)
    # Two of the dialect's documented hooks, set on this engine's dialect only: see each function.
    engine.dialect.do_ping = _ping_timeout_is_an_error(engine.dialect)  # type: ignore[method-assign,assignment]
    engine.dialect.do_terminate = _terminate_at_once  # type: ignore[method-assign]
    return engine


def _lost_is_disconnect(context: ExceptionContext) -> None:
    # Two failures asyncpg leaves a connection no later use can go through, which SQLAlchemy does
    # not count as a disconnect; counted as one, SQLAlchemy closes the connection, the pool opens a
    # fresh one, and the error says the database is unavailable (503), not that the code failed:
    # - a command that timed out: the connection waits on a cancel request, which a silent link
    #   never answers, and every later use would wait behind it;
    # - the server's goodbye read before its close (``faults.out_of_step``), as when the server
    #   restarts while a request holds the connection.
    error = context.original_exception
    if timed_out(error) or out_of_step(error):
        context.is_disconnect = True


def _ping_timeout_is_an_error(dialect: Dialect) -> Callable[[Any], bool]:
    """The dialect's pre-ping, with a ping that timed out raised as the driver's error.

    asyncpg's timeout is a bare ``TimeoutError``, which SQLAlchemy's pre-ping passes straight to the
    caller: each connection pooled before a link went silent would fail one use after the link
    healed, ten seconds each. As the driver's error it reaches ``_lost_is_disconnect``, the
    pool drops every connection as old as that one, and the checkout goes on with a new one.
    """
    ping = dialect.do_ping

    def do_ping(dbapi_connection: Any) -> bool:
        try:
            return ping(dbapi_connection)
        except TimeoutError as error:
            raise dialect.loaded_dbapi.OperationalError("the pre-ping timed out") from error

    return do_ping


def _terminate_at_once(dbapi_connection: Any) -> None:
    """Close a connection the pool gave up on (it failed, or is older than a failure) at once.

    SQLAlchemy's own terminate first tries a graceful close and gives it 2 s, which a connection
    on a silent link spends in full: after the link healed, each connection pooled before it would
    hold up a checkout for 2 s. A failed connection owes the server no goodbye; PostgreSQL ends the
    session when its socket closes.
    """
    dbapi_connection.driver_connection.terminate()


@contextlib.asynccontextmanager
async def brief_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """``engine.begin()`` for a transaction that never waits on anything but the database (the
    worker's): on PostgreSQL a session left idle in it longer than ``BRIEF_IDLE_IN_TRANSACTION_MS``
    is ended by the server, whatever became of its client."""
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(_BOUND_IDLE, {"b_idle_ms": str(BRIEF_IDLE_IN_TRANSACTION_MS)})
        yield conn


class ConnectionLost(Exception):
    """A held connection turned out to be gone (the server had ended it, or the link failed); the
    transaction did not commit and may be run again on a fresh connection."""


class HeldConnection:
    """One connection for brief transactions that follow each other closely (the delivery worker's
    turns under a backlog), kept checked out from one to the next until ``release``.

    ``brief_transaction`` checks a connection out for every transaction, and on PostgreSQL that
    costs two round trips before the first statement: the pool's ping and the idle bound. On a
    worker whose event loop is busy with hundreds of senders each round trip waits for the loop to
    come round, longest at the start of a turn, just after the senders were handed the last claim:
    up to 13 and 12 ms of a 76 ms turn, ten partners at cap 8 (docs/architecture.md "Delivery
    pipeline"). Held, the connection is pinged when checked out, carries the bound
    (``BRIEF_IDLE_IN_TRANSACTION_MS``) for its whole session, and goes back to the pool with the
    session's own bound when released. A transaction that fails discards it: the next one checks
    out a fresh connection, pinged. One that fails because the server had ended the connection
    while it was held (what the ping would have caught), whether the close had arrived or only the
    server's goodbye before it, raises ``ConnectionLost``, so the holder may run it again at once."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._conn: AsyncConnection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A transaction on the held connection (checked out first if none is held)."""
        held_before = self._conn is not None
        conn = self._conn or await self._check_out()
        try:
            async with conn.begin():
                yield conn
        except BaseException as error:
            self._conn = None
            await _discard(conn)
            # A statement that met a lost connection says so; the driver's own COPY (the worker's
            # log) raises asyncpg's error, which SQLAlchemy never sees (``faults.out_of_step``).
            invalidated = isinstance(error, DBAPIError) and error.connection_invalidated
            if held_before and (invalidated or out_of_step(error)):
                raise ConnectionLost("the held connection was gone") from error
            raise

    async def release(self) -> None:
        """Give the connection back to the pool, its session's own idle bound restored."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if conn.dialect.name == "postgresql":
                await conn.execute(_RESET_BOUND_IDLE)
                await conn.commit()
        except BaseException:
            await _discard(conn)  # never back to the pool still bound
            raise
        await conn.close()

    async def _check_out(self) -> AsyncConnection:
        conn = await self.engine.connect()
        try:
            if conn.dialect.name == "postgresql":
                await conn.execute(_SESSION_BOUND_IDLE, {"b_idle_ms": str(BRIEF_IDLE_IN_TRANSACTION_MS)})
                await conn.commit()
        except BaseException:
            await _discard(conn)
            raise
        self._conn = conn
        return conn


async def _discard(conn: AsyncConnection) -> None:
    """Close a connection and keep it out of the pool: its state is unknown after a failure."""
    with contextlib.suppress(Exception):
        await conn.invalidate()
    with contextlib.suppress(Exception):
        await conn.close()


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["database_url"] = database_url
    return config


# The session-level advisory lock processes migrating one PostgreSQL database take turns under
# (service.db.locks lists the service's advisory locks).
MIGRATE_LOCK = 0x5E5E_317A


def migrate(database_url: str, revision: str = "head") -> None:
    """Bring the database to ``revision``; safe to run on every start.

    On PostgreSQL processes migrating at once (``serve``, ``worker`` and ``migrate`` started
    together, each migrating first) take turns under a session-level advisory lock,
    ``MIGRATE_LOCK``, held on a connection of its own for as long as Alembic migrates on another:
    the later ones find the schema current and change nothing. The lock ends with its session, so
    a process killed while migrating leaves it to the next. On a SQLite file they take turns the
    same way under an exclusive ``flock`` of the file beside it named ``MIGRATE_LOCK_SUFFIX``,
    which the kernel lets go when its holder exits, however it exits.
    """
    config = alembic_config(database_url)
    if is_sqlite(database_url):
        path = sqlite_path(database_url)
        with contextlib.nullcontext() if path is None else _sqlite_turn(path):
            command.upgrade(config, revision)
        return

    async def take_turn(engine: AsyncEngine) -> AsyncConnection:
        conn = await engine.connect()
        try:
            if not await conn.scalar(select(func.pg_try_advisory_lock(MIGRATE_LOCK))):
                logging.getLogger(__name__).info(
                    "another process is migrating the database; waiting for it to finish"
                )
                await conn.scalar(select(func.pg_advisory_lock(MIGRATE_LOCK)))
            await conn.commit()  # the lock outlasts the transaction; the session is not left in one
        except BaseException:
            await conn.close()
            raise
        return conn

    async def end_turn(engine: AsyncEngine, conn: AsyncConnection) -> None:
        try:
            with contextlib.suppress(Exception):  # a session gone took its lock with it
                await conn.scalar(select(func.pg_advisory_unlock(MIGRATE_LOCK)))
            await conn.close()
        finally:
            await engine.dispose()  # closes the session, whatever became of the unlock

    # The lock's connection lives on a loop of its own; Alembic's env runs another (asyncio.run)
    # in between, on this same thread, while this one waits.
    with asyncio.Runner() as runner:
        engine = create_engine(database_url)
        try:
            held = runner.run(take_turn(engine))
        except BaseException:
            runner.run(engine.dispose())
            raise
        try:
            command.upgrade(config, revision)
        finally:
            runner.run(end_turn(engine, held))


@contextlib.contextmanager
def _sqlite_turn(database: Path) -> Iterator[None]:
    """Hold the SQLite file's migration lock: an exclusive ``flock`` of a file of its own beside
    the database, never of the database itself (closing any descriptor of the database would drop
    the POSIX locks SQLite holds on it in this process)."""
    private_sqlite_files(database)  # the directory, made private, before the lock's file is in it
    lock = database.with_name(database.name + MIGRATE_LOCK_SUFFIX)
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logging.getLogger(__name__).info(
                "another process is migrating the database; waiting for it to finish"
            )
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # the lock goes with the descriptor


async def migrate_async(database_url: str) -> None:
    # Alembic's env runs its own event loop; keep it off the caller's.
    await asyncio.to_thread(migrate, database_url)


class DatabaseUnusable(Exception):
    """The database cannot be used as configured (absent, refusing the role, a newer schema):
    nothing starts, and starting again will not help (exit status 2), unless ``passing``."""

    passing = False  # a start a moment later may work: exit status 1, which the units restart


class DatabaseUnreachable(DatabaseUnusable):
    """The database does not answer now (down, restarting, failing over, its file locked past the
    busy timeout): nothing starts, but a start a moment later may (exit status 1, which the units
    restart)."""

    passing = True


# PostgreSQL's SQLSTATE classes a start cannot get past (the PostgreSQL manual, "Errcodes").
MISSING_DATABASE = "3D000"  # invalid_catalog_name
REFUSED_ROLE = "28"  # invalid_authorization_specification, invalid_password


def shown_url(database_url: str) -> str:
    """The URL as a person may see it: its password as ``***``, and without any query parameter
    that carries one (``?password=``, ``?sslpassword=``, which the driver also takes)."""
    url = make_url(database_url)
    hidden = [name for name in url.query if "password" in name.lower()]
    return url.difference_update_query(hidden).render_as_string(hide_password=True)


def _where(url: URL) -> str:
    """host:port/db of a PostgreSQL URL, never its password."""
    host = url.host or "the local socket"
    return f"{host}:{url.port or 5432}/{url.database}"


def _cause(error: BaseException) -> BaseException:
    """The driver's own error under SQLAlchemy's wrappers."""
    seen = error
    while True:
        inner = getattr(seen, "orig", None) or seen.__cause__
        if inner is None or inner is seen:
            return seen
        seen = inner


def unusable(database_url: str, error: BaseException) -> DatabaseUnusable | None:
    """The one-line reason ``error`` (raised while connecting) stops a start; None for others."""
    url = make_url(database_url)
    cause = _cause(error)
    if url.get_backend_name() == "sqlite":
        if isinstance(cause, sqlite3.OperationalError) and "locked" in str(cause):
            held = f"the SQLite database {url.database} is held by another process ({cause})"
            return DatabaseUnreachable(held)
        if isinstance(cause, OSError | sqlite3.Error):
            return DatabaseUnusable(f"the SQLite database {url.database} cannot be opened ({cause})")
        return None
    sqlstate = getattr(cause, "sqlstate", None) or ""
    first_line = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    if sqlstate == MISSING_DATABASE:
        return DatabaseUnusable(
            f'database "{url.database}" does not exist on {_where(url).rsplit("/", 1)[0]}; '
            f"create it first (createdb {url.database}), then run: python -m service migrate"
        )
    if sqlstate.startswith(REFUSED_ROLE):
        return DatabaseUnusable(f'the database at {_where(url)} refused role "{url.username}": {first_line}')
    if isinstance(cause, TimeoutError):
        return DatabaseUnreachable(
            f"the database at {_where(url)} did not answer within {POSTGRESQL_CONNECT_TIMEOUT_S:g} s"
        )
    if isinstance(cause, OSError):
        # asyncpg raises OSError(errno, "Connect call failed (...)"): the errno's own words read better.
        number = cause.errno or 0
        known = number > 0 and not isinstance(cause, socket.gaierror)
        reason = os.strerror(number) if known else (cause.strerror or first_line)
        return DatabaseUnreachable(f"the database at {_where(url)} cannot be reached ({reason})")
    if sqlstate.startswith(_NOT_YET):
        # A server that takes connections but not yet this one: starting up, in recovery, a standby
        # not yet promoted (57P03), shutting down (57P01), out of connection slots (53300). It
        # passes: exit 1, and the units start again until it has.
        return DatabaseUnreachable(f"the database at {_where(url)} takes no connection now: {first_line}")
    if sqlstate:
        return DatabaseUnusable(f"the database at {_where(url)} refused the connection: {first_line}")
    if isinstance(cause, asyncpg.exceptions.InterfaceError):
        # Refused by the driver before anything was sent: an option it cannot use as given (a
        # certificate sslmode=verify-full needs and cannot find, say).
        return DatabaseUnusable(f"the connection to {_where(url)} cannot be made as configured: {first_line}")
    return None


# PostgreSQL's SQLSTATE classes of a refusal that passes: 57P (operator intervention: cannot
# connect now, shutting down), 53 (insufficient resources: too many connections, out of memory or
# disk), 08 (a connection exception the server reported). The PostgreSQL manual, "Errcodes".
_NOT_YET = ("57P", "53", "08")


def check_database(database_url: str) -> None:
    """Connect once; raises ``DatabaseUnusable`` with the reason when the database cannot be used."""

    async def connect() -> None:
        engine = create_engine(database_url)
        try:
            await ping(engine)
        finally:
            await engine.dispose()

    try:
        asyncio.run(connect())
    except Exception as error:
        reason = unusable(database_url, error)
        if reason is None:
            raise
        raise reason from None


async def ping(engine: AsyncEngine) -> None:
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))


async def reachable(engine: AsyncEngine) -> bool:
    """Whether the database answers now (the readiness probes); never raises."""
    try:
        await ping(engine)
    except Exception:
        return False
    return True


class Probe:
    """``SELECT 1`` answered within ``within`` seconds, whatever the database does.

    A ping that has not answered in time is left to end by itself (its command timeout ends it, and
    its connection is replaced); the next probe waits on the same ping rather than piling up more
    on a link that does not answer.
    """

    def __init__(self, engine: AsyncEngine, within: float) -> None:
        self._engine = engine
        self._within = within
        self._ping: asyncio.Task[bool] | None = None

    async def answers(self) -> bool:
        if self._ping is None or self._ping.done():
            self._ping = asyncio.get_running_loop().create_task(reachable(self._engine))
        done, _ = await asyncio.wait({self._ping}, timeout=self._within)
        return bool(done) and self._ping.result()

    async def close(self) -> None:
        if self._ping is not None and not self._ping.done():
            self._ping.cancel()
            with contextlib.suppress(BaseException):
                await self._ping
