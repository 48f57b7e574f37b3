"""Waking workers in other processes when deliveries become due: PostgreSQL's LISTEN/NOTIFY.

A publish, a resume or an admin retry makes deliveries due. The worker in the same process is
woken through its ``asyncio.Event``; a worker elsewhere (``python -m service worker``, another
server) would see them only at its next poll. On PostgreSQL the transaction that makes deliveries
due also calls ``pg_notify``, and every listening worker is woken when, and only if, it commits:
a notification is sent at commit and dropped with a rollback, so no worker looks before the rows
are there. SQLite has no such channel; its deployments are one machine, and the poll remains.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger(__name__)

CHANNEL = "service_outbox"
RETRY_SECONDS = 5.0  # after a lost listening connection; the worker's poll covers the gap
# A link that went silent ends nothing: no termination comes, and a listener would wait for ever on
# a connection that hears nothing. Every PING_SECONDS the listening connection must answer a ping
# within PING_TIMEOUT_SECONDS, or it counts as lost and listening starts again on a new one.
PING_SECONDS = 30.0
PING_TIMEOUT_SECONDS = 10.0
_NOTIFY = select(func.pg_notify(CHANNEL, ""))


async def notify(conn: AsyncConnection) -> None:
    """Wake every listening worker when the caller's transaction commits (PostgreSQL only)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(_NOTIFY)


class Listener:
    """Sets ``wake`` on every notification, over one connection of ``engine``'s pool.

    The connection is held while listening, and pinged every ``ping_seconds``. When it is lost (or
    a ping goes unanswered for ``ping_timeout`` seconds), listening resumes on a new one after
    ``retry_seconds``, and ``wake`` is set on every (re)start, so what was published meanwhile is
    claimed at once. A listener on any other database does nothing.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        wake: asyncio.Event,
        *,
        retry_seconds: float = RETRY_SECONDS,
        ping_seconds: float = PING_SECONDS,
        ping_timeout: float = PING_TIMEOUT_SECONDS,
    ) -> None:
        self._engine = engine
        self._wake = wake
        self._retry_seconds = retry_seconds
        self._ping_seconds = ping_seconds
        self._ping_timeout = ping_timeout
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while a connection listens (for tests, health)

    async def start(self) -> None:
        if self._engine.dialect.name == "postgresql" and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="outbox-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _notified(self, *_: Any) -> None:  # asyncpg passes (connection, pid, channel, payload)
        self._wake.set()

    async def _listen(self) -> None:
        while True:
            try:
                await self._listen_once()
            except Exception:
                log.warning("listening for due deliveries failed; polling until it resumes", exc_info=True)
            await asyncio.sleep(self._retry_seconds)

    async def _listen_once(self) -> None:
        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection  # the asyncpg connection
            assert driver is not None
            lost = asyncio.Event()
            driver.add_termination_listener(lambda _: lost.set())
            await driver.add_listener(CHANNEL, self._notified)
            self.listening.set()
            self._wake.set()
            try:
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), self._ping_seconds)
                        continue
                    try:
                        await driver.execute("SELECT 1", timeout=self._ping_timeout)
                    except Exception:  # a silent link: this connection never goes back to the pool
                        lost.set()
                        await conn.invalidate()
            finally:
                self.listening.clear()
                with contextlib.suppress(Exception):
                    await driver.remove_listener(CHANNEL, self._notified)
        log.warning("the connection listening for due deliveries was lost")
