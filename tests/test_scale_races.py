"""Races between processes sharing one database, on PostgreSQL where they happen.

- A partner's removal and a worker's turn lock the partner's row before its deliveries: one waits
  for the other. Two transactions locking them in opposite orders deadlock: PostgreSQL ends one,
  a removal runs once more, and a deadlock or serialization failure that stands is a moment's
  fault (503, exit status 1), never a 500.
- A publish storing deliveries for partners whose rows a worker's turn holds does not wait for it.
- A publish racing a removal may leave a delivery waiting for a removed partner: the hourly
  retention pass cancels it.
- Processes migrating one database at once take turns under an advisory lock.

Nothing waits for time to pass: the tests hold locks, and look at the server's lock table until
the waits they set up have begun.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from webhook_helpers import AUTH, TEST_SECRETS_KEY, room_claimed, settings

from service import audit
from service.cli import main
from service.clock import ManualClock
from service.db.engine import MIGRATE_LOCK, create_engine
from service.db.faults import rolled_back, unavailable
from service.db.tables import deliveries, delivery_attempts, events, partners
from service.events import parse_event
from service.exceptions import InvalidInput
from service.keyring import load_keyring
from service.settings import Settings
from service.states import AttemptOutcome, DeliveryStatus, PartnerStatus
from service.webhooks import outbox, retention, settle, stats, wiring
from service.webhooks import partners as partner_store
from service.webhooks.breaker import BreakerPolicy
from service.webhooks.claim import claim_due
from service.webhooks.operations import Operations
from service.webhooks.settle import Settlement
from service.webhooks.stats import Waiting
from tests.conftest import POSTGRES_URL, RUN_ID
from tests.scratch import admin_execute

ROOT = Path(__file__).resolve().parents[1]
RETENTION = timedelta(days=30)


async def _until(check: Callable[[], Awaitable[Any]], what: str, within: float = 15.0) -> Any:
    """The first truthy ``await check()``; fails naming ``what`` if none comes within ``within``
    seconds. It looks again as soon as the loop comes round: it waits for a state, not a time."""
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.01)
    pytest.fail(f"{what} did not happen within {within:g} s")


_WAITERS = text(
    "SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid "
    "WHERE NOT l.granted AND l.locktype = :locktype AND a.datname = current_database()"
)


async def _lock_waiters(observer: AsyncEngine, locktype: str, at_least: int = 1) -> bool:
    """Whether ``at_least`` sessions of this database wait for a lock of ``locktype``
    (``transactionid``: a row another transaction holds; ``advisory``)."""
    async with observer.connect() as conn:
        return int(await conn.scalar(_WAITERS, {"locktype": locktype}) or 0) >= at_least


@pytest.fixture
async def engine(empty_postgres: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(empty_postgres)
    yield engine
    await engine.dispose()


@pytest.fixture
async def operations(
    empty_postgres: str, engine: AsyncEngine, clock: ManualClock
) -> AsyncIterator[Operations]:
    options = Settings(database_url=empty_postgres, webhook_allow_private_urls=True)
    async with wiring.sender(options, clock=clock) as sender:
        yield Operations(engine, options, clock, sender)


# --- A: deadlocks and serialization failures -----------------------------------------------------


async def _deadlock(engine: AsyncEngine) -> DBAPIError:
    """A genuine deadlock between two sessions; the error of the one PostgreSQL ended."""
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS race_rows (id int PRIMARY KEY, n int)"))
        await conn.execute(text("TRUNCATE race_rows"))
        await conn.execute(text("INSERT INTO race_rows VALUES (1, 0), (2, 0)"))
    one, other = await engine.connect(), await engine.connect()
    try:
        await one.execute(text("UPDATE race_rows SET n = 1 WHERE id = 1"))
        await other.execute(text("UPDATE race_rows SET n = 1 WHERE id = 2"))
        first = asyncio.ensure_future(one.execute(text("UPDATE race_rows SET n = 2 WHERE id = 2")))
        await _until(lambda: _lock_waiters(engine, "transactionid"), "the first session's wait")
        second = asyncio.ensure_future(other.execute(text("UPDATE race_rows SET n = 2 WHERE id = 1")))
        errors = [
            r for r in await asyncio.gather(first, second, return_exceptions=True) if isinstance(r, Exception)
        ]
        assert len(errors) == 1, errors
        assert isinstance(errors[0], DBAPIError)
        return errors[0]
    finally:
        await one.close()
        await other.close()


async def _serialization_failure(engine: AsyncEngine) -> DBAPIError:
    """A genuine serialization failure: two serializable transactions that read what the other writes."""
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE IF NOT EXISTS race_rows (id int PRIMARY KEY, n int)"))
        await conn.execute(text("TRUNCATE race_rows"))
        await conn.execute(text("INSERT INTO race_rows VALUES (1, 0), (2, 0)"))
    one, other = await engine.connect(), await engine.connect()
    try:
        for conn in (one, other):
            await conn.execute(text("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"))
        await one.execute(text("SELECT sum(n) FROM race_rows"))
        await other.execute(text("SELECT sum(n) FROM race_rows"))
        await one.execute(text("UPDATE race_rows SET n = n + 1 WHERE id = 1"))
        await other.execute(text("UPDATE race_rows SET n = n + 1 WHERE id = 2"))
        await one.commit()
        try:
            await other.commit()
        except DBAPIError as error:
            return error
        pytest.fail("the second serializable transaction committed")
    finally:
        await one.close()
        await other.close()


async def test_a_deadlock_or_a_serialization_failure_is_the_storage_unavailable_now(
    engine: AsyncEngine,
) -> None:
    """Both are PostgreSQL ending a transaction so that another goes on: 503 for the API and exit
    status 1 for the commands (``faults.unavailable``), and worth running again (``rolled_back``)."""
    deadlock = await _deadlock(engine)
    conflict = await _serialization_failure(engine)
    assert [getattr(error.orig, "sqlstate", None) for error in (deadlock, conflict)] == ["40P01", "40001"]
    for error in (deadlock, conflict):
        assert unavailable(error)
        assert rolled_back(error)
        assert audit._status(error) == 503  # what the audit line says the API answered
    async with engine.connect() as conn:
        await conn.execute(text("DROP TABLE race_rows"))
        await conn.commit()
    # Any other refusal stays a bug's 500: a statement the database cannot parse (a table missing
    # is a damaged schema, a storage fault that will not pass: test_command_edges).
    with pytest.raises(DBAPIError) as other:
        async with engine.connect() as conn:
            await conn.execute(text("SELEC 1"))
    assert not unavailable(other.value) and not rolled_back(other.value)


@pytest.mark.parametrize("turn_first", [False, True], ids=["removal-first", "turn-first"])
async def test_a_removal_meeting_a_worker_as_it_settles_goes_through_without_a_deadlock(
    engine: AsyncEngine,
    operations: Operations,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    turn_first: bool,
) -> None:
    """The removal locks the partner's row, then its deliveries; settle.record locks the partners'
    rows before any delivery's, the same order, so one waits for the other. A removal coming just
    as the turn begins to settle goes through at once, and the turn's attempt is logged while the
    delivery stays cancelled; one coming once the turn holds the partner's row waits for the turn,
    which settles the delivery, and cancels nothing. When the turn locked its partners only after
    settling, the removal waited for the delivery the turn had just settled, and the turn's lock
    closed the circle: PostgreSQL ended one of the two (the test below); the first case fails
    so, the second holds whatever the order."""
    partner = await operations.onboard({"name": "Gone", "url": "http://127.0.0.1:9/hook"})
    await operations.publish(room_claimed("meeting"))
    async with engine.begin() as conn:
        [job] = await claim_due(
            conn, now=clock(), limit=10, lease=timedelta(seconds=30), default_cap=8,
            keyring=load_keyring(operations.settings),
        )  # fmt: skip
    met: list[tuple[asyncio.Future[Any], str]] = []
    lock_standing = settle.lock_standing

    async def meet() -> None:
        removal = asyncio.ensure_future(operations.remove(partner["id"]))

        async def removed_or_waiting() -> str | None:
            if removal.done():
                return "removed"
            return "waiting for the turn" if await _lock_waiters(engine, "transactionid") else None

        met.append((removal, await _until(removed_or_waiting, "the removal or its wait")))

    async def removal_meets_the_turn(conn: AsyncConnection, partner_ids: Any) -> Any:
        """The removal begins as the turn locks its partners' rows, or just after; the turn goes on
        once the removal is done, or waits for a lock."""
        if not turn_first:
            await meet()
        standing = await lock_standing(conn, partner_ids)
        if turn_first:
            await meet()
        return standing

    monkeypatch.setattr(settle, "lock_standing", removal_meets_the_turn)
    attempt = Settlement(job, clock(), 5, 200, None, "ok", AttemptOutcome.DELIVERED, clock())
    try:
        async with engine.begin() as turn:
            await settle.record(turn, [attempt], breaker=BreakerPolicy())
    finally:
        for removal, _ in met:
            with contextlib.suppress(Exception):
                await removal
    [(removal, seen)] = met
    assert seen == ("waiting for the turn" if turn_first else "removed")
    assert removal.result() == {"partnerId": partner["id"], "cancelled": 0 if turn_first else 1}
    async with engine.connect() as conn:
        status = DeliveryStatus.DELIVERED if turn_first else DeliveryStatus.CANCELLED
        assert await conn.scalar(select(deliveries.c.status)) == status
        assert await conn.scalar(select(func.count()).select_from(delivery_attempts)) == 1
        assert await conn.scalar(select(partners.c.status)) == PartnerStatus.REMOVED


async def test_turns_lock_their_partners_in_the_order_of_their_ids_whatever_order_they_lie_in(
    engine: AsyncEngine, operations: Operations, clock: ManualClock
) -> None:
    """One turn holds the partner with the smaller id and goes on to the other; a second turn asks
    for both. The second waits for the first partner holding nothing, so the first goes on: no
    deadlock. Locked in the order the rows lie in the table (the larger id first, once the smaller
    one's row was updated), the second would hold the larger id while it waited, and the first's
    next lock would close the circle."""
    urls = [f"http://127.0.0.1:9/{n}" for n in range(2)]
    ids = sorted([(await operations.onboard({"name": url, "url": url}))["id"] for url in urls])
    async with engine.begin() as conn:  # the smaller id's row now lies after the other's
        await conn.execute(update(partners).where(partners.c.id == ids[0]).values(updated_at=clock()))
    first, second = await engine.connect(), await engine.connect()
    both = None
    try:
        await partner_store.lock_standing(first, ids[:1])
        both = asyncio.ensure_future(partner_store.lock_standing(second, ids))
        await _until(lambda: _lock_waiters(engine, "transactionid"), "the second turn's wait")
        await partner_store.lock_standing(first, ids[1:])  # deadlocked, were the order the table's
        await first.commit()
        assert set(await both) == set(ids)
        await second.commit()
    finally:
        if both is not None and not both.done():
            both.cancel()
        await first.close()
        await second.close()


async def test_a_removal_deadlocked_with_a_worker_turn_runs_once_more_and_removes(
    engine: AsyncEngine, operations: Operations
) -> None:
    """A transaction locking a delivery, then its partner's row (the order a worker's turn took
    before it locked its partners first, the test above) meets the removal, which locks the
    partner's row, then its deliveries. Met in between, PostgreSQL ends the removal, which waited
    first; run again, it waits for the other and removes the partner. A turn claiming or handing
    back the partner's deliveries (without its row) may still meet a removal so."""
    partner = await operations.onboard({"name": "Gone", "url": "http://127.0.0.1:9/hook"})
    await operations.publish(room_claimed("deadlock"))
    async with engine.begin() as conn:  # claimed by a worker, whose attempt has just answered
        await conn.execute(
            update(deliveries).values(status=DeliveryStatus.DELIVERING, claim_token="tok", claimed_by="tok")
        )
    turn = await engine.connect()
    try:
        settled = await turn.execute(  # the turn settles its delivery: the row is locked
            update(deliveries)
            .where(deliveries.c.claim_token == "tok")
            .values(status=DeliveryStatus.DELIVERED, claim_token=None, claimed_until=None)
        )
        assert settled.rowcount == 1
        removal = asyncio.ensure_future(operations.remove(partner["id"]))
        await _until(lambda: _lock_waiters(engine, "transactionid"), "the removal's wait for the delivery")
        assert not removal.done()
        # It goes on to the partner's row, which the removal holds: a deadlock, which
        # PostgreSQL breaks by ending the removal (its wait began first).
        standing = await partner_store.lock_standing(turn, [partner["id"]])
        assert standing[partner["id"]].status is PartnerStatus.ACTIVE
        await turn.commit()
    finally:
        await turn.close()
    assert await removal == {"partnerId": partner["id"], "cancelled": 0}  # delivered by the turn
    async with engine.connect() as conn:
        assert await conn.scalar(select(partners.c.status)) == PartnerStatus.REMOVED
        assert await conn.scalar(select(deliveries.c.status)) == DeliveryStatus.DELIVERED


async def test_a_publish_fanning_out_does_not_wait_for_a_turn_holding_its_partners_rows(
    engine: AsyncEngine, operations: Operations
) -> None:
    """A turn holds its partners' rows while it settles (partners.lock_standing); a publish storing
    deliveries for them checks their foreign key meanwhile. Were the two to wait on each other, a
    publish fanning out in one order and a turn locking in the other would deadlock, and PostgreSQL
    would end one of them: a publish answered 503. The publish goes through without waiting; a
    second turn settling the same partners still waits for the first."""
    ids = [
        (await operations.onboard({"name": f"P{n}", "url": f"http://127.0.0.1:9/{n}"}))["id"]
        for n in range(2)
    ]
    turn, publish = await engine.connect(), None
    try:
        standing = await partner_store.lock_standing(turn, ids)
        assert set(standing) == set(ids)
        publish = asyncio.ensure_future(operations.publish(room_claimed("beside-a-turn")))

        async def published_or_waiting() -> str | None:
            if publish.done():
                return "published"
            return "waiting for the turn" if await _lock_waiters(engine, "transactionid") else None

        assert await _until(published_or_waiting, "the publish or its wait") == "published"
        assert (await publish)["deliveries"] == 2
        async with engine.connect() as other:
            second = asyncio.ensure_future(partner_store.lock_standing(other, ids))
            try:
                await _until(lambda: _lock_waiters(engine, "transactionid"), "the second turn's wait")
                assert not second.done()
                await turn.commit()
                assert set(await second) == set(ids)
            finally:
                second.cancel()  # when an assertion failed: nothing waits on it past the test
    finally:
        await turn.close()
        if publish is not None and not publish.done():  # the turn's locks went with it
            await publish


async def test_a_change_of_events_is_checked_against_a_batch_policy_changed_meanwhile(
    engine: AsyncEngine, operations: Operations, clock: ManualClock
) -> None:
    """Two changes of one partner at once, one batching a kind and one no longer receiving it: the
    second waits for the first to commit, then is checked against what it left and refused, as
    onboarding refuses a batch of a kind not received. Read before the wait, both passed their
    checks and the partner was left batching a kind it no longer receives."""
    kinds = ["room.claimed", "room.trending"]
    partner = await operations.onboard({"name": "P", "url": "http://127.0.0.1:9/hook", "events": kinds})
    batching = partner_store.validate_partner_change(
        {"batch": {"events": ["room.trending"], "maxEvents": 10, "maxWaitSeconds": 5}}
    )
    first = await engine.connect()
    change = None
    try:
        assert await partner_store.lock_partner(first, partner["id"])  # the first change, part-way
        change = asyncio.ensure_future(operations.update(partner["id"], {"events": ["room.claimed"]}))
        await _until(lambda: _lock_waiters(engine, "transactionid"), "the second change's wait")
        await partner_store.update_partner(first, partner["id"], batching, now=clock())
        await first.commit()
        with pytest.raises(InvalidInput) as refused:
            await change
    finally:
        await first.close()
        if change is not None and not change.done():
            change.cancel()
    assert [error.code for error in refused.value.field_errors] == ["not_subscribed"]
    stored = await operations.show_partner(partner["id"])
    assert (stored["events"], stored["batch"]["events"]) == (kinds, ["room.trending"])


def _deadlock_error() -> DBAPIError:
    """What the driver raises for a deadlock, as SQLAlchemy wraps it (the first test above holds
    it to a real one)."""
    import asyncpg.exceptions

    return DBAPIError(
        "UPDATE deliveries ...", {}, asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
    )


def test_a_removal_deadlocked_twice_is_503_with_retry_after_and_exit_status_1(
    make_client: Any, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ended by a deadlock on its second run too, the removal answers 503 with Retry-After (never
    500) and the command exits 1 with one line; the partner stays, to be removed again."""
    tries: list[str] = []

    async def deadlocked(conn: AsyncConnection, partner_id: str, *, now: Any) -> int | None:
        tries.append(partner_id)
        raise _deadlock_error()

    with make_client(**settings()) as client:
        partner = client.post(
            "/admin/partners", json={"name": "P", "url": "http://127.0.0.1:9/h"}, headers=AUTH
        ).json
        monkeypatch.setattr(partner_store, "remove_partner", deadlocked)
        answer = client.delete(f"/admin/partners/{partner['id']}", headers=AUTH)
        assert answer.status == 503, answer.json
        assert int(answer.headers["retry-after"]) >= 1
        assert tries == [partner["id"]] * 2  # run once more, then given up
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("SERVICE_SECRETS_KEY", TEST_SECRETS_KEY)
    capsys.readouterr()
    assert main(["partners", "delete", partner["id"]]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# --- B: a publish racing a removal ---------------------------------------------------------------


class _Stored:
    """Rows written directly: two partners, one removed, and deliveries in every state."""

    def __init__(self, clock: ManualClock) -> None:
        self.now = clock()
        self.partners = [
            {
                "id": pid,
                "name": pid,
                "url": "https://p.example/h",
                "status": status,
                "created_at": self.now,
                "updated_at": self.now,
            }
            for pid, status in (("ptn_gone", PartnerStatus.REMOVED), ("ptn_live", PartnerStatus.ACTIVE))
        ]
        self.events: list[dict[str, Any]] = []
        self.deliveries: list[dict[str, Any]] = []

    def delivery(self, delivery_id: str, partner_id: str, status: DeliveryStatus, **columns: Any) -> None:
        columns = {"claim_token": None, "claimed_until": None, "body": None, "batch_id": None, **columns}
        event_id = f"evt_{delivery_id}"
        self.events.append(
            {
                "id": event_id,
                "kind": "room.claimed",
                "dedupe_key": event_id,
                "payload": "{}",
                "occurred_at": self.now,
                "created_at": self.now,
            }
        )
        self.deliveries.append(
            {
                "id": delivery_id,
                "event_id": event_id,
                "partner_id": partner_id,
                "status": status,
                "attempts": 0,
                "next_attempt_at": self.now - timedelta(minutes=1),
                "created_at": self.now - timedelta(minutes=2),
                "updated_at": self.now - timedelta(minutes=2),
                **columns,
            }
        )

    async def store(self, engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            await conn.execute(insert(partners), self.partners)
            await conn.execute(insert(events), self.events)
            await conn.execute(insert(deliveries), self.deliveries)


async def _deliveries(engine: AsyncEngine) -> dict[str, tuple[str, str | None, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(deliveries.c.id, deliveries.c.status, deliveries.c.claim_token, deliveries.c.updated_at)
        )
        return {row.id: (row.status, row.claim_token, row.updated_at) for row in rows}


async def _waiting(engine: AsyncEngine) -> dict[str, Waiting]:
    async with engine.connect() as conn:
        return (await stats.outbox_stats(conn)).by_partner


@pytest.mark.parametrize("batch", [retention.BATCH, 2])
async def test_the_retention_pass_cancels_what_a_removed_partner_was_left_waiting(
    database_url: str, clock: ManualClock, batch: int
) -> None:
    """Pending, delivering past its lease, batching, a batch and its members: every undelivered
    row of a removed partner becomes cancelled as the removal leaves them (no claim, updated now),
    so the queue gauges stop counting them; an active partner's rows and settled rows stay."""
    stored = _Stored(clock)
    stored.delivery("dlv_pending", "ptn_gone", DeliveryStatus.PENDING)
    stored.delivery(
        "dlv_claimed", "ptn_gone", DeliveryStatus.DELIVERING, claim_token="tok", claimed_until=stored.now
    )
    stored.delivery("dlv_batching", "ptn_gone", DeliveryStatus.BATCHING)
    stored.delivery("dlv_batch", "ptn_gone", DeliveryStatus.PENDING, body="{}")
    for member in ("dlv_member_1", "dlv_member_2"):
        stored.delivery(member, "ptn_gone", DeliveryStatus.BATCHED, batch_id="dlv_batch")
    stored.delivery("dlv_delivered", "ptn_gone", DeliveryStatus.DELIVERED)
    stored.delivery("dlv_live", "ptn_live", DeliveryStatus.PENDING)
    stored.delivery("dlv_live_batching", "ptn_live", DeliveryStatus.BATCHING)
    engine = create_engine(database_url)
    try:
        await stored.store(engine)
        assert (await _waiting(engine))["ptn_gone"].deliveries == 4  # counted (batching too), never sent
        clock.advance(3600)
        pruned = await retention.prune(engine, now=clock(), older_than=RETENTION, batch=batch)
        after = await _deliveries(engine)
        waiting = await _waiting(engine)
        again = await retention.prune(engine, now=clock(), older_than=RETENTION, batch=batch)
    finally:
        await engine.dispose()
    gone = {"dlv_pending", "dlv_claimed", "dlv_batching", "dlv_batch", "dlv_member_1", "dlv_member_2"}
    assert pruned.cancelled == len(gone) and again.cancelled == 0
    assert pruned.document()["cancelled"] == len(gone)  # what `prune` prints
    assert {key: after[key] for key in gone} == dict.fromkeys(gone, (DeliveryStatus.CANCELLED, None, clock()))
    assert {key: after[key][0] for key in after.keys() - gone} == {
        "dlv_delivered": DeliveryStatus.DELIVERED,
        "dlv_live": DeliveryStatus.PENDING,
        "dlv_live_batching": DeliveryStatus.BATCHING,
    }
    assert "ptn_gone" not in waiting and waiting["ptn_live"].deliveries == 2  # its series dropped out


class _Interleaved:
    """A connection whose publish reads the partners, then lets ``between`` run (and commit)
    before it goes on: the moment a removal on another connection can slip in."""

    def __init__(self, conn: AsyncConnection, between: Callable[[], Awaitable[None]]) -> None:
        self._conn, self._between = conn, between

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        result = await self._conn.execute(statement, *args, **kwargs)
        if statement is outbox._DELIVERING_PARTNERS:
            result = result.all()  # read before the removal commits
            await self._between()
        return result


async def test_a_delivery_published_past_a_removal_is_cancelled_by_the_next_pass(
    engine: AsyncEngine, operations: Operations, clock: ManualClock
) -> None:
    """PostgreSQL: the publish reads the partner as active, the removal commits (cancelling what
    it finds: nothing yet), the publish stores a pending delivery. The gauges count it until the
    retention pass cancels it."""
    partner = await operations.onboard({"name": "Gone", "url": "http://127.0.0.1:9/hook"})
    removed: list[Any] = []

    async def remove() -> None:
        removed.append(await operations.remove(partner["id"]))

    async with engine.begin() as conn:
        published = await outbox.publish(
            _Interleaved(conn, remove),  # type: ignore[arg-type]
            parse_event(room_claimed("race"), now=clock()),
            now=clock(),
        )
    assert removed == [{"partnerId": partner["id"], "cancelled": 0}] and published.deliveries == 1
    assert [status for status, _, _ in (await _deliveries(engine)).values()] == [DeliveryStatus.PENDING]
    assert (await _waiting(engine))[partner["id"]].deliveries == 1
    pruned = await retention.prune(engine, now=clock(), older_than=RETENTION)
    assert pruned.cancelled == 1
    assert [status for status, _, _ in (await _deliveries(engine)).values()] == [DeliveryStatus.CANCELLED]
    assert partner["id"] not in await _waiting(engine)  # its series dropped out


async def test_the_pass_reads_a_removed_partners_rows_through_the_waiting_rows_indexes(
    database_url: str,
) -> None:
    """Each read is an index probe of one partner's waiting rows, never a walk of the history."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            for statement, index in zip(
                retention._STRANDED,
                ("ix_deliveries_partner_claimable", "ix_deliveries_batching"),
                strict=True,
            ):
                bound = statement.params(b_partner="ptn_x", b_limit=500)
                sql = str(bound.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
                if database_url.startswith("sqlite"):
                    plan = [row[-1] for row in await conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"))]
                else:
                    # An empty table is cheapest read whole: forbid that to see the index path.
                    await conn.execute(text("SET LOCAL enable_seqscan = off"))
                    plan = [row[0] for row in await conn.execute(text(f"EXPLAIN {sql}"))]
                assert any(index in line for line in plan), (sql, plan)
    finally:
        await engine.dispose()


# --- C: processes migrating one database at once -------------------------------------------------


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    """An empty database of this test's own, never migrated."""
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    name = f"service_races_{RUN_ID}_{uuid.uuid4().hex[:6]}"
    asyncio.run(admin_execute(POSTGRES_URL, f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    asyncio.run(admin_execute(POSTGRES_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_processes_migrating_one_new_database_at_once_take_turns(fresh_postgres: str) -> None:
    """Four `python -m service migrate` on a new database, started while the migration lock is
    held, all wait for it; let go, they migrate one after another and every one exits 0 (without
    the lock, three of four died of duplicate keys in pg_type)."""
    env = {**os.environ, "SERVICE_DATABASE_URL": fresh_postgres, "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY}

    async def race() -> list[subprocess.CompletedProcess[bytes]]:
        engine = create_engine(fresh_postgres)
        holder = await engine.connect()
        try:
            assert await holder.scalar(select(func.pg_try_advisory_lock(MIGRATE_LOCK)))
            await holder.commit()
            started = [
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "service",
                    "migrate",
                    cwd=ROOT,
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
                for _ in range(4)
            ]
            try:
                await _until(lambda: _lock_waiters(engine, "advisory", 4), "four migrations waiting", 60)
            except BaseException:
                for process in started:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
                raise
            finally:
                await holder.scalar(select(func.pg_advisory_unlock(MIGRATE_LOCK)))
                await holder.commit()
            done = []
            for process in started:
                out, err = await process.communicate()
                done.append(subprocess.CompletedProcess(["migrate"], process.returncode or 0, out, err))
            return done
        finally:
            await holder.close()
            await engine.dispose()

    finished = asyncio.run(race())
    assert [(run.returncode, run.stderr.count(b"Traceback")) for run in finished] == [(0, 0)] * 4, [
        run.stderr.decode()[-2000:] for run in finished
    ]
    assert all(b"database is at the latest schema" in run.stdout for run in finished)
