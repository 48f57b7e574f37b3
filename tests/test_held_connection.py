"""The worker's turns keep one connection while they follow each other (``db.engine.HeldConnection``):
no checkout ping and no idle-bound statement per turn, the bound still on every turn's transaction,
the connection back in the pool with its session's own bound when the worker waits, and thrown away
after a failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from webhook_helpers import Receiver, room_claimed, settings

from service.db.engine import (
    BRIEF_IDLE_IN_TRANSACTION_MS,
    POSTGRESQL_STATEMENT_TIMEOUT_MS,
    ConnectionLost,
    HeldConnection,
    create_engine,
)
from service.db.tables import events
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.webhooks import outbox, partners, wiring

_SHOW_BOUND = text("SHOW idle_in_transaction_session_timeout")


def _counted(engine: AsyncEngine, name: str) -> list[int]:
    """How many times the engine's ``name`` event (a pool or connection event) has fired since."""
    fired = [0]

    def count(*_: Any) -> None:
        fired[0] += 1

    event.listen(engine.sync_engine, name, count)
    return fired


async def _bound(conn: AsyncConnection) -> str | None:
    """The session's idle-in-transaction bound on PostgreSQL; None on SQLite, which has none."""
    if conn.dialect.name != "postgresql":
        return None
    return str(await conn.scalar(_SHOW_BOUND))


def _shown(ms: int) -> str:
    """How PostgreSQL shows a bound given in milliseconds (5000 -> '5s')."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


async def _backlog(engine: AsyncEngine, config: Settings, clock: Any, url: str, count: int) -> None:
    """One partner at ``url`` and ``count`` events for it, each its own delivery."""
    async with engine.begin() as conn:
        new = partners.NewPartner("held", url, None, None)
        await partners.create_partner(conn, new, now=clock(), keyring=load_keyring(config))
    for index in range(count):
        await outbox.publish_event(
            engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
        )


def test_transactions_in_a_row_share_one_checkout_and_each_carries_the_bound(database_url: str) -> None:
    async def scenario() -> tuple[int, list[str | None], str | None, int]:
        engine = create_engine(database_url, bounded=True)
        checkouts = _counted(engine, "checkout")
        held = HeldConnection(engine)
        try:
            seen = []
            for _ in range(3):
                async with held.transaction() as conn:
                    seen.append(await _bound(conn))
                    assert await conn.scalar(select(func.count()).select_from(events)) == 0
            assert held.held
            await held.release()
            assert not held.held
            checked_out = checkouts[0]
            back_in_pool = engine.sync_engine.pool.checkedin()  # type: ignore[attr-defined]
            async with engine.connect() as conn:  # the same connection, as the pool hands it on
                after = await _bound(conn)
            return checked_out, seen, after, back_in_pool
        finally:
            await engine.dispose()

    checkouts, seen, after, back_in_pool = asyncio.run(scenario())
    postgres = database_url.startswith("postgres")
    assert checkouts == 1
    assert seen == [_shown(BRIEF_IDLE_IN_TRANSACTION_MS) if postgres else None] * 3
    # Released, it is in the pool again with the bound every other session gets.
    assert back_in_pool == 1
    assert after == (_shown(POSTGRESQL_STATEMENT_TIMEOUT_MS) if postgres else None)


def test_a_failed_transaction_throws_its_connection_away_and_the_next_one_checks_out_afresh(
    database_url: str, clock: Any
) -> None:
    async def scenario() -> tuple[int, int, bool]:
        engine = create_engine(database_url, bounded=True)
        checkouts, connections = _counted(engine, "checkout"), _counted(engine, "connect")
        held = HeldConnection(engine)
        try:
            async with held.transaction() as conn:
                await outbox.publish(conn, parse_event(room_claimed(), now=clock()), now=clock())
            with pytest.raises(RuntimeError):
                async with held.transaction() as conn:
                    await conn.execute(events.delete())
                    raise RuntimeError("a turn failed halfway")
            assert not held.held
            async with held.transaction() as conn:
                kept = await conn.scalar(select(func.count()).select_from(events)) == 1
            await held.release()
            return checkouts[0], connections[0], kept
        finally:
            await engine.dispose()

    checkouts, connections, kept = asyncio.run(scenario())
    assert kept  # the failed transaction was rolled back
    # The connection it ran on was closed, never handed on in an unknown state: the next
    # transaction checked out a new one.
    assert checkouts == 2
    assert connections == 2


def test_a_worker_draining_a_backlog_checks_out_once_for_many_turns_and_gives_it_back(
    database_url: str, clock: Any
) -> None:
    """Turns of 16 (two senders) drain 96 deliveries back to back on one checkout; the drained
    worker, about to wait, has given the connection back."""
    config = Settings(database_url=database_url, **settings())
    count = 96
    with Receiver() as receiver:

        async def scenario() -> tuple[int, int, bool, int]:
            engine = create_engine(database_url)
            try:
                await _backlog(engine, config, clock, receiver.url(), count)
                worker = wiring.worker(engine, config, clock=clock, concurrency=2)
                checkouts, commits = _counted(engine, "checkout"), _counted(engine, "commit")
                async with worker:
                    logged = await worker.drain()
                return checkouts[0], commits[0], worker.connection.held, logged
            finally:
                await engine.dispose()

        checkouts, commits, still_held, logged = asyncio.run(scenario())
    assert logged == count
    assert commits >= count // 16  # a turn logs and claims at most 16 (8 a sender)
    assert checkouts <= 2, f"{checkouts} checkouts for {commits} commits"
    assert not still_held


def test_a_held_connection_the_server_ended_fails_one_transaction_and_the_next_reconnects(
    postgres_database: str,
) -> None:
    """Held, a connection is not pinged between transactions: one the server ended meanwhile
    (PostgreSQL's ``pg_terminate_backend``) fails the next transaction as ``ConnectionLost``, is
    thrown away, and the one after runs on a new connection."""

    async def scenario() -> tuple[bool, bool, bool]:
        engine = create_engine(postgres_database, bounded=True)
        admin = create_engine(postgres_database)
        held = HeldConnection(engine)
        try:
            async with held.transaction() as conn:
                pid = await conn.scalar(select(func.pg_backend_pid()))
            async with admin.begin() as conn:
                await conn.execute(select(func.pg_terminate_backend(pid)))
            failed = False
            try:
                async with held.transaction() as conn:
                    await conn.scalar(select(1))
            except ConnectionLost as error:
                failed = isinstance(error.__cause__, DBAPIError)
            thrown_away = not held.held
            async with held.transaction() as conn:
                other = await conn.scalar(select(func.pg_backend_pid())) != pid
            await held.release()
            return failed, thrown_away, other
        finally:
            await engine.dispose()
            await admin.dispose()

    failed, thrown_away, other = asyncio.run(scenario())
    assert failed
    assert thrown_away
    assert other


def test_a_worker_run_cancelled_mid_backlog_gives_its_connection_back(database_url: str, clock: Any) -> None:
    """However the loop ends (here cancelled between two turns), the pool gets the connection back."""
    config = Settings(database_url=database_url, **settings())
    with Receiver() as receiver:

        async def scenario() -> tuple[bool, bool]:
            engine = create_engine(database_url)
            try:
                await _backlog(engine, config, clock, receiver.url(), 200)
                worker = wiring.worker(engine, config, clock=clock, concurrency=2)
                async with worker:
                    running = asyncio.get_running_loop().create_task(worker.run())
                    # Cancelled between turns (a turn's own failure throws the connection away):
                    # the bookkeeper waits for finished attempts with the connection still held.
                    while not worker.connection.held or worker._turning:
                        await asyncio.sleep(0)
                    was_held = worker.connection.held
                    running.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await running
                return was_held, worker.connection.held
            finally:
                await engine.dispose()

        was_held, still_held = asyncio.run(scenario())
    assert was_held
    assert not still_held


_END_OTHER_SESSIONS = text(
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def test_a_worker_whose_held_connection_the_server_ended_turns_again_at_once(
    empty_postgres: str, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the worker holds its connection, the server ends every other session, the worker's
    included (between two turns, or in the turn that has just begun): the turn runs again at once
    on a new connection, with a warning, not the outage's error and its pause, and every delivery
    is logged."""
    config = Settings(database_url=empty_postgres, **settings())
    count = 96
    with Receiver() as receiver:

        async def scenario() -> tuple[int, int]:
            engine, admin = create_engine(empty_postgres), create_engine(empty_postgres)
            try:
                await _backlog(engine, config, clock, receiver.url(), count)
                # An hour's poll: an outage's pause would outlast the test's own timeout.
                worker = wiring.worker(engine, config, clock=clock, concurrency=2, poll_interval=3600)
                async with worker, admin.connect() as ending:
                    draining = asyncio.get_running_loop().create_task(worker.drain())
                    while not worker.connection.held or worker._turning:  # after a turn
                        await asyncio.sleep(0)
                    ended = int(await ending.scalar(_END_OTHER_SESSIONS) or 0)
                    logged = await asyncio.wait_for(draining, timeout=30)
                # The log's COPY may have met the ended session: asyncpg's dropped future is no
                # ERROR line on the worker's loop (db.faults.quiet_orphaned_waiters).
                guard = asyncio.get_running_loop().get_exception_handler()
                assert getattr(guard, "quiets_orphaned_waiters", False)
                return ended, logged
            finally:
                await engine.dispose()
                await admin.dispose()

        with caplog.at_level("WARNING", logger="service.webhooks.worker"):
            ended, logged = asyncio.run(scenario())
    assert ended >= 1
    assert logged == count
    lines = [(record.levelname, record.getMessage()) for record in caplog.records]
    assert ("WARNING", "the database ended the connection held between turns; turning again") in lines
    assert not [line for line in lines if line[0] == "ERROR"], lines
