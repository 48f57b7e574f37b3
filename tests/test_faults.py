"""The server on a link that lies: a PostgreSQL connection that goes silent, a full disk.

The server runs as a child process (``python -m service serve``), as in production; PostgreSQL is
reached through a TCP proxy in the test that can stop forwarding without closing anything.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg.exceptions
import httpx
import pytest
from sqlalchemy import event, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from service.clock import ManualClock
from service.db import engine as db_engine
from service.db.engine import create_engine, migrate
from service.db.faults import quiet_orphaned_waiters, unavailable
from service.settings import Settings
from service.webhooks import wiring
from service.webhooks.claim import CLAIM_LOCK
from service.webhooks.notify import Listener, notify
from tests.conftest import POSTGRES_URL, RUN_ID
from tests.faultproxy import SilentProxy
from tests.processes import free_port, kill, start_server, wait_ready
from tests.scratch import migrated_database
from tests.webhook_helpers import (
    ADMIN_TOKEN,
    AUTH,
    TEST_SECRETS_KEY,
    Receiver,
    fixed_keyring,
    room_claimed,
    settings,
)

# What the design asks of a silent link (README "Faults, slow clients and shutdown").
READY_FALLS_WITHIN = 15.0  # /readyz says 503 this soon after the link goes silent
RESUMES_WITHIN = 30.0  # registrations and delivery work again this soon after it heals
ATTEMPT_TIMEOUT = 5.0  # SERVICE_WEBHOOK_TIMEOUT in these tests; the shutdown deadline is this + 10 s
SHUTDOWN_DEADLINE = ATTEMPT_TIMEOUT + 10.0


def poll(check: Callable[[], Any], within: float, every: float = 0.2) -> Any:
    """The first truthy ``check()`` before ``within`` seconds pass; None if none was."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)  # polling a condition against a deadline, not waiting for time to pass
    return None


@pytest.fixture
def scratch_postgres() -> Iterator[str]:
    """A migrated database of this test's own on the machine's PostgreSQL."""
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    with migrated_database(POSTGRES_URL, f"service_faults_{RUN_ID}_{uuid.uuid4().hex[:6]}") as url:
        yield url


def _through(url: str, proxy: SilentProxy) -> str:
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


async def _stored_emails(url: str) -> set[str]:
    import asyncpg

    parsed = make_url(url)
    conn = await asyncpg.connect(
        host=parsed.host, port=parsed.port or 5432, user=parsed.username, database=parsed.database
    )
    try:
        return {row["email"] for row in await conn.fetch("SELECT email FROM registrations")}
    finally:
        await conn.close()


class Server:
    """`python -m service serve` in a child process, and an HTTP client for it."""

    def __init__(self, env: dict[str, str], log: Path | None = None) -> None:
        self.log = log
        self.port = free_port()
        self.process = start_server(self.port, env, log=log)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=70.0)

    def register(self, email: str) -> int:
        return self.http.post("/api/waitlist", json={"email": email, "intent": "claim"}).status_code

    def ready(self) -> httpx.Response:
        return self.http.get("/readyz")

    def close(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            kill(self.process)
        if self.log is not None and self.log.exists():
            # pytest shows what a test printed only when it fails: the server's own account then.
            print("".join(self.log.read_text(errors="replace").splitlines(keepends=True)[-80:]))


def test_a_silent_database_link_costs_a_bounded_burst_of_503s(scratch_postgres: str, tmp_path: Path) -> None:
    """While the link to PostgreSQL is silent /readyz says 503 within 15 s; once it forwards again
    registrations and delivery work within 30 s with no restart; no 200 without a committed row."""
    with SilentProxy("127.0.0.1", make_url(scratch_postgres).port or 5432) as proxy, Receiver() as receiver:
        env = {
            "SERVICE_DATABASE_URL": _through(scratch_postgres, proxy),
            "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY,
            "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
            "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
            "SERVICE_WEBHOOK_TIMEOUT": str(ATTEMPT_TIMEOUT),
            "SERVICE_WEBHOOK_RETRY_SCHEDULE": "1,1,1,1,1",
            "SERVICE_WAITLIST_RATE_LIMIT": "10000/minute",
        }
        server = Server(env, tmp_path / "serve.log")
        try:
            wait_ready(f"http://127.0.0.1:{server.port}/readyz", server.process)
            partner = server.http.post(
                "/admin/partners", json={"name": "P", "url": receiver.url()}, headers=AUTH
            )
            assert partner.status_code == 201, partner.text
            accepted: set[str] = set()
            assert server.register("before@example.com") == 200
            accepted.add("before@example.com")
            # Delivery works before the link goes silent, and the worker has logged it: the link then
            # goes silent between the worker's turns. A turn cut off in its middle is the case of
            # test_a_turn_cut_off_by_a_silent_link_frees_the_claim_lock_within_seconds.
            assert server.http.post("/admin/events", json=room_claimed(), headers=AUTH).status_code == 202

            def logged() -> bool:
                listed = server.http.get("/admin/deliveries", headers=AUTH).json()["deliveries"]
                return len(listed) == 1 and listed[0]["status"] == "delivered"

            assert poll(logged, within=RESUMES_WITHIN), "the first delivery was not logged"

            proxy.silence()
            silent_at = time.monotonic()
            answers: list[int] = []
            for number in range(3):  # registrations meet the dead link: each is answered, in bounded time
                email = f"silent{number}@example.com"
                status = server.register(email)
                answers.append(status)
                if status == 200:
                    accepted.add(email)
            assert set(answers) <= {200, 503}
            fell = poll(lambda: server.ready().status_code == 503, within=READY_FALLS_WITHIN)
            assert fell, "/readyz did not say 503 while the database link was silent"
            assert time.monotonic() - silent_at < READY_FALLS_WITHIN + 3 * 70  # each answer above was bounded
            body = server.ready().json()
            assert body["ok"] is False and body["database"] == "down"

            proxy.heal()
            healed_at = time.monotonic()
            emails = iter(f"after{number}@example.com" for number in range(10_000))

            def registers() -> bool:
                email = next(emails)
                if server.register(email) == 200:
                    accepted.add(email)
                    return True
                return False

            assert poll(registers, within=RESUMES_WITHIN), "registrations did not resume after the heal"

            def publishes() -> bool:
                return server.http.post("/admin/events", json=room_claimed(), headers=AUTH).status_code == 202

            assert poll(publishes, within=RESUMES_WITHIN - (time.monotonic() - healed_at))
            left = RESUMES_WITHIN - (time.monotonic() - healed_at)
            assert receiver.wait_for(lambda requests: len(requests) >= 2, timeout=max(left, 0.0)), (
                "no delivery reached the partner after the heal"
            )
            assert poll(lambda: server.ready().status_code == 200, within=RESUMES_WITHIN)
            assert server.process.poll() is None  # no restart
        finally:
            server.close()
        stored = asyncio.run(_stored_emails(scratch_postgres))
        assert accepted <= stored, f"answered 200 but not stored: {accepted - stored}"


def test_a_turn_cut_off_by_a_silent_link_frees_the_claim_lock_within_seconds(
    scratch_postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link goes silent in the middle of a worker's turn, just after it took the claim lock every
    worker takes. Its session on the server sits idle in that transaction, holding the lock;
    PostgreSQL ends it once it has idled the worker's brief bound (2 s here), not the 35 s every
    session gets, and another worker can claim again."""
    bound = 2.0
    monkeypatch.setattr(db_engine, "BRIEF_IDLE_IN_TRANSACTION_MS", int(bound * 1000))
    config = Settings(database_url=scratch_postgres, **settings())
    with SilentProxy("127.0.0.1", make_url(scratch_postgres).port or 5432) as proxy:
        cut_at: list[float] = []

        def silence_once_locked(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            if "advisory_xact_lock" in statement and not cut_at:
                proxy.silence()
                cut_at.append(time.monotonic())

        async def claim_lock_free(engine: Any) -> bool:
            async with engine.begin() as conn:
                return bool(await conn.scalar(select(func.pg_try_advisory_xact_lock(CLAIM_LOCK))))

        async def scenario() -> tuple[bool, float | None]:
            through = create_engine(
                _through(scratch_postgres, proxy), bounded=True, connect_args={"command_timeout": 0.5, "timeout": 0.5}
            )
            direct = create_engine(scratch_postgres)
            event.listen(through.sync_engine, "after_cursor_execute", silence_once_locked)
            worker = wiring.worker(through, config, clock=ManualClock(), keyring=fixed_keyring(), poll_interval=3600)
            await worker.start()
            try:
                while not cut_at:  # the worker's first turn takes the lock as it claims
                    await asyncio.sleep(0.01)
                held = not await claim_lock_free(direct)
                deadline = cut_at[0] + 15.0
                while time.monotonic() < deadline:
                    if await claim_lock_free(direct):
                        return held, time.monotonic() - cut_at[0]
                    await asyncio.sleep(0.05)
                return held, None
            finally:
                await worker.stop(grace=0)
                await through.dispose()
                await direct.dispose()

        held, freed_after = asyncio.run(scenario())
    assert held, "the silent link did not leave the claim lock held"
    assert freed_after is not None, "the claim lock was still held 15 s after the link went silent"
    assert bound <= freed_after < bound + 3.0


def test_after_a_silent_link_heals_one_dead_pooled_connection_costs_one_wait_not_one_failure_each(
    scratch_postgres: str,
) -> None:
    """Connections pooled before a link went silent stay dead after it heals. The first checkout's
    ping waits its command timeout on one of them; that ping counts as a disconnect, so the pool
    drops every connection as old and the checkout goes on with a new one: each use after the heal
    succeeds, and only the first waits (not one failed request per dead connection)."""
    timeout = 2.0  # long beside the uses' own milliseconds, so only a count of waits can pass it
    with SilentProxy("127.0.0.1", make_url(scratch_postgres).port or 5432) as proxy:

        async def scenario() -> tuple[list[bool], float]:
            engine = create_engine(
                _through(scratch_postgres, proxy),
                bounded=True,
                connect_args={"command_timeout": timeout, "timeout": timeout},
            )
            try:

                async def use() -> bool:
                    try:
                        async with engine.connect() as conn:
                            return await conn.scalar(select(1)) == 1
                    except Exception:
                        return False

                async def hold() -> None:  # three connections at once: the pool keeps three
                    async with engine.connect() as conn:
                        await conn.execute(select(func.pg_sleep(0.05)))

                await asyncio.gather(hold(), hold(), hold())
                assert engine.pool.checkedin() == 3  # type: ignore[attr-defined]
                proxy.silence()
                proxy.heal()
                began = time.monotonic()
                answers = [await use() for _ in range(3)]
                return answers, time.monotonic() - began
            finally:
                await engine.dispose()

        answers, took = asyncio.run(scenario())
    assert answers == [True, True, True]
    assert took < 3 * timeout  # one ping's wait, then fresh connections


_END_SESSION = text("SELECT pg_terminate_backend(:pid)")


@pytest.mark.parametrize("use", ["pooled", "request", "held statement", "held copy"])
def test_a_connection_that_read_the_servers_goodbye_before_its_close_is_replaced_not_failed(
    scratch_postgres: str, use: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends a session (a restart, a failover, ``pg_terminate_backend``): its goodbye
    reaches the connection, its close not yet (the proxy holds it), and the driver is out of step.
    - Pooled: the next checkout pings, counts that as a disconnect and goes on with a new one.
    - In a request's hands: the request fails as the database unavailable (a disconnect, 503),
      not as a bug (500), and the connection is not pooled again.
    - Held by the worker, met by a statement or by the driver's own COPY (the worker's log): it is
      lost (``ConnectionLost``: the turn runs again at once, with no outage's pause), and the
      future asyncpg's COPY drops is never an ERROR line (the worker's loop is guarded).
    Either way the next use works, on a new connection."""
    with SilentProxy("127.0.0.1", make_url(scratch_postgres).port or 5432) as proxy:

        async def scenario() -> tuple[int, int, str]:
            quiet_orphaned_waiters(asyncio.get_running_loop())  # as the worker's run does
            through = create_engine(_through(scratch_postgres, proxy), bounded=True)
            direct = create_engine(scratch_postgres)
            held = db_engine.HeldConnection(through)

            async def pid(conn: Any) -> int:
                return int(await conn.scalar(select(func.pg_backend_pid())) or 0)

            async def end(session: int) -> None:
                """End ``session``; once its goodbye is in, the loop reads it."""
                async with direct.begin() as ending:
                    assert await ending.scalar(_END_SESSION, {"pid": session})
                await asyncio.to_thread(proxy.closed_by_server, 1)
                for _ in range(3):
                    await asyncio.sleep(0)

            try:
                proxy.hold_closes()
                met = "nothing"
                if use in ("pooled", "request"):
                    try:
                        async with through.connect() as conn:
                            ended = await pid(conn)
                            if use == "request":
                                await end(ended)
                    except DBAPIError as error:
                        met = "disconnect" if error.connection_invalidated else repr(error)
                    if use == "pooled":
                        await end(ended)
                    async with through.connect() as conn:
                        return ended, await pid(conn), met
                async def log(conn: Any) -> None:  # as the worker logs its attempts
                    driver = (await conn.get_raw_connection()).driver_connection
                    await driver.copy_records_to_table("logged", records=[(1,)])

                async with held.transaction() as conn:  # held from here on
                    await conn.execute(text("CREATE TEMPORARY TABLE logged (n integer)"))
                    await log(conn)  # the driver has the table's columns from now on, as in a worker
                try:
                    async with held.transaction() as conn:
                        await conn.execute(select(1))
                        await end(ended := await pid(conn))
                        await (conn.execute(select(1)) if use == "held statement" else log(conn))
                except db_engine.ConnectionLost as lost:
                    # The driver's own error, too, is the database unavailable, never a bug (500).
                    met = "lost" if unavailable(lost.__cause__) else f"lost, {lost.__cause__!r} not unavailable"
                async with held.transaction() as conn:
                    after = await pid(conn)
                await held.release()
                return ended, after, met
            finally:
                proxy.pass_closes()  # the engine's goodbyes wait on the server's closes
                await through.dispose()
                await direct.dispose()

        with caplog.at_level(logging.DEBUG, logger="service.db.faults"):
            ended, after, met = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
            gc.collect()  # whatever the scenario dropped is reported by now
    assert after not in (0, ended)
    assert met == {"pooled": "nothing", "request": "disconnect"}.get(use, "lost")
    assert not [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


def test_only_asyncpgs_dropped_waiters_are_kept_out_of_the_error_lines() -> None:
    """The guard takes a dropped future failed by asyncpg's lost connection (what its COPY leaves)
    and nothing else: another error dropped unread, or a task dropped with that same error, still
    reaches the handler the loop had, and installing the guard twice wraps it once."""
    seen: list[tuple[str, str]] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: seen.append((context["message"], repr(context["exception"]))))
        quiet_orphaned_waiters(loop)
        guard = loop.get_exception_handler()
        quiet_orphaned_waiters(loop)
        assert loop.get_exception_handler() is guard
        lost = asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        for error in (lost, asyncpg.exceptions.InterfaceError("closed"), ValueError("a bug")):
            loop.create_future().set_exception(error)  # dropped unread at once

        async def fails() -> None:
            raise lost

        task = loop.create_task(fails())
        await asyncio.sleep(0)
        del task
        gc.collect()

    asyncio.run(scenario())
    assert seen == [
        ("Future exception was never retrieved", "InterfaceError('closed')"),
        ("Future exception was never retrieved", "ValueError('a bug')"),
        ("Task exception was never retrieved", "ConnectionDoesNotExistError('connection was closed in the middle of operation')"),
    ]


def test_a_listener_on_a_link_gone_silent_listens_again_once_it_heals(scratch_postgres: str) -> None:
    """A silent link ends nothing, so no termination tells the listener its connection is dead. Its
    ping goes unanswered, it gives that connection up and listens on a new one: a notification
    sent after the heal wakes it."""
    with SilentProxy("127.0.0.1", make_url(scratch_postgres).port or 5432) as proxy:

        async def scenario() -> bool:
            through = create_engine(
                _through(scratch_postgres, proxy), bounded=True, connect_args={"command_timeout": 1, "timeout": 1}
            )
            direct = create_engine(scratch_postgres)
            wake = asyncio.Event()
            listener = Listener(through, wake, retry_seconds=0.05, ping_seconds=0.2, ping_timeout=0.3)
            try:
                await listener.start()
                await asyncio.wait_for(listener.listening.wait(), timeout=10)
                first = proxy.connections
                proxy.silence()
                proxy.heal()
                while proxy.connections == first:  # the ping failed: it connects again
                    await asyncio.sleep(0.01)
                await asyncio.wait_for(listener.listening.wait(), timeout=10)
                wake.clear()
                async with direct.begin() as conn:
                    await notify(conn)
                await asyncio.wait_for(wake.wait(), timeout=10)
                return wake.is_set()
            finally:
                await listener.stop()
                await through.dispose()
                await direct.dispose()

        assert asyncio.run(asyncio.wait_for(scenario(), timeout=30))


def test_sigterm_ends_the_server_within_its_deadline_on_a_silent_link(scratch_postgres: str, tmp_path: Path) -> None:
    """SIGTERM ends the server within the attempt timeout plus its margin while the link is silent."""
    with SilentProxy("127.0.0.1", make_url(scratch_postgres).port or 5432) as proxy:
        env = {
            "SERVICE_DATABASE_URL": _through(scratch_postgres, proxy),
            "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY,
            "SERVICE_WEBHOOK_TIMEOUT": str(ATTEMPT_TIMEOUT),
        }
        server = Server(env, tmp_path / "serve.log")
        try:
            assert server.register("before@example.com") == 200
            proxy.silence()
            quick = httpx.Client(base_url=server.http.base_url, timeout=1.0)
            with quick, pytest.raises(httpx.TimeoutException):  # a registration waits on the dead link
                quick.post("/api/waitlist", json={"email": "stuck@example.com", "intent": "claim"})
            os.kill(server.process.pid, signal.SIGTERM)
            sent_at = time.monotonic()
            try:
                server.process.wait(timeout=SHUTDOWN_DEADLINE + 5)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the server outlived its shutdown deadline ({SHUTDOWN_DEADLINE} s)")
            assert time.monotonic() - sent_at <= SHUTDOWN_DEADLINE + 3  # the deadline, and exiting
        finally:
            server.close()


def test_a_full_disk_is_503_on_every_writing_route_and_on_readyz(tmp_path: Path) -> None:
    """With the disk full under SQLite (a file-size limit set on the running server), registrations
    and /admin/events answer 503, never 500, and /readyz says registrations are failing."""
    database = tmp_path / "service.db"
    url = f"sqlite:///{database}"
    migrate(url)
    with sqlite3.connect(database) as connection:  # the migrations' WAL folded in: it starts empty
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    server = Server(
        {"SERVICE_DATABASE_URL": url, "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN, "SERVICE_WAITLIST_RATE_LIMIT": "10000/minute"}
    )
    try:
        assert server.register("first@example.com") == 200
        # The disk fills: no file of the server's may grow beyond what it holds now, and a little.
        sizes = [path.stat().st_size for path in tmp_path.glob("service.db*")]
        limit = max(sizes) + 32 * 1024
        resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        message = "x" * 600
        answers: list[int] = []

        def refused() -> bool:
            email = f"filler{len(answers)}@example.com"
            status = server.http.post(
                "/api/waitlist", json={"email": email, "intent": "claim", "message": message}
            ).status_code
            answers.append(status)
            return status == 503

        assert poll(refused, within=30.0, every=0.0), "the registrations never met the full disk"
        assert set(answers) <= {200, 503}
        ready = server.ready()
        assert (ready.status_code, ready.json()) == (
            503,
            {
                "ok": False,
                "message": "Registrations are failing to commit.",
                "database": "up",
                "rateLimitStore": "up",
                "registrations": "failing",
            },
        )
        # A publish writes fewer pages than a registration, so one may still fit in what is left:
        # events go on until one meets the full disk, and that one is a 503 too.
        publishes: list[Any] = []

        def publish_refused() -> bool:
            event = room_claimed(slug=f"filler{len(publishes)}", project="x" * 600)
            publishes.append(server.http.post("/admin/events", json=event, headers=AUTH))
            return publishes[-1].status_code == 503

        assert poll(publish_refused, within=30.0, every=0.0), "the publishes never met the full disk"
        assert {published.status_code for published in publishes} <= {202, 503}
        assert publishes[-1].json() == {"ok": False, "message": "The service is briefly unavailable; try again shortly."}
        # Room again: the next registration is stored and the server is ready once more.
        unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, unlimited)
        assert server.register("after@example.com") == 200
        assert server.ready().status_code == 200
    finally:
        server.close()
