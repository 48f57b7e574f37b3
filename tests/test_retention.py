"""Retention: `python -m service prune` and the worker's hourly pruning, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine
from webhook_helpers import milestone, publish, room_claimed, settings

from service.cli import main
from service.clock import ManualClock, utc_now
from service.db.engine import create_engine
from service.db.rooms import known_rooms
from service.db.tables import deliveries, delivery_attempts, events, partners, registrations
from service.settings import Settings
from service.states import SETTLED, DeliveryStatus
from service.webhooks import retention, wiring
from service.webhooks.worker import PRUNE_EVERY, PRUNE_FIRST, Worker

DAYS = 30
OLD = timedelta(days=DAYS + 10)
RECENT = timedelta(days=1)


def _with_engine(database_url: str, work: Callable[[AsyncEngine], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        engine = create_engine(database_url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    return asyncio.run(go())


class Rows:
    """Builds rows directly, with the times a test needs."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.partner = {
            "id": "ptn_1",
            "name": "Partner",
            "url": "https://partner.example/hook",
            "status": "active",
            "created_at": now - OLD,
            "updated_at": now - OLD,
        }
        self.events: list[dict[str, Any]] = []
        self.deliveries: list[dict[str, Any]] = []
        self.attempts: list[dict[str, Any]] = []

    def event(self, event_id: str, age: timedelta, *, room: str | None = None) -> str:
        at = self.now - age
        if room is None:
            kind, payload = "platform.milestone", {"eventId": event_id, "milestone": "m", "value": 1}
        else:
            kind, payload = "room.claimed", {"eventId": event_id, "roomUrl": room}
        self.events.append(
            {
                "id": event_id,
                "kind": kind,
                "dedupe_key": event_id,
                "payload": json.dumps(payload),
                "occurred_at": at,
                "created_at": at,
            }
        )
        return event_id

    def delivery(
        self, delivery_id: str, event_id: str, status: DeliveryStatus, *, age: timedelta, attempts: int = 1
    ) -> None:
        changed = self.now - age
        self.deliveries.append(
            {
                "id": delivery_id,
                "event_id": event_id,
                "partner_id": "ptn_1",
                "status": str(status),
                "attempts": attempts,
                "next_attempt_at": changed,
                "created_at": changed - timedelta(minutes=5),
                "updated_at": changed,
            }
        )
        for number in range(1, attempts + 1):
            self.attempts.append(
                {
                    "delivery_id": delivery_id,
                    "event_id": event_id,
                    "event": "room.claimed",
                    "partner_id": "ptn_1",
                    "attempt": number,
                    "started_at": changed,
                    "duration_ms": 12,
                    "outcome": "retry",
                }
            )

    async def store(self, engine: AsyncEngine) -> None:
        async with engine.begin() as conn:
            await conn.execute(insert(partners), [self.partner])
            for table, rows in ((events, self.events), (deliveries, self.deliveries)):
                if rows:
                    await conn.execute(insert(table), rows)
            if self.attempts:
                await conn.execute(insert(delivery_attempts), self.attempts)
            await conn.execute(
                insert(registrations),
                [
                    {
                        "email": "ada@example.com",
                        "email_key": "ada@example.com",
                        "intent": "owner",
                        "created_at": self.now - OLD,
                        "updated_at": self.now - OLD,
                    }
                ],
            )


async def _ids(engine: AsyncEngine, table: Any) -> set[str]:
    async with engine.connect() as conn:
        return {str(row) for row in await conn.scalars(select(table.c.id))}


async def _count(engine: AsyncEngine, table: Any) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(table)) or 0)


def test_the_settled_set_is_what_nothing_will_change() -> None:
    """Delivered, failed and cancelled are settled; what waits (for its time, its worker or its
    batch) never is."""
    assert set(SETTLED) == {DeliveryStatus.DELIVERED, DeliveryStatus.FAILED, DeliveryStatus.CANCELLED}


def test_prune_keeps_events_waiting_for_their_batch_and_prunes_cancelled_ones(
    database_url: str, clock: ManualClock
) -> None:
    """An old event still waiting for its batch (batching), or in a batch not yet delivered
    (batched), is kept with its event; an old cancelled delivery goes."""
    rows = Rows(clock())
    waiting = rows.event("evt_waiting", OLD)
    rows.delivery("dlv_batching", waiting, DeliveryStatus.BATCHING, age=OLD, attempts=0)
    inside = rows.event("evt_inside", OLD)
    rows.delivery("dlv_batched", inside, DeliveryStatus.BATCHED, age=OLD, attempts=0)
    gone = rows.event("evt_gone", OLD)
    rows.delivery("dlv_cancelled", gone, DeliveryStatus.CANCELLED, age=OLD, attempts=0)

    async def go(engine: AsyncEngine) -> tuple[set[str], set[str]]:
        await rows.store(engine)
        await retention.prune(engine, now=clock(), older_than=timedelta(days=DAYS))
        return await _ids(engine, deliveries), await _ids(engine, events)

    kept_deliveries, kept_events = _with_engine(database_url, go)
    assert kept_deliveries == {"dlv_batching", "dlv_batched"}
    assert kept_events == {"evt_waiting", "evt_inside"}


def test_prune_deletes_what_is_settled_and_old_and_keeps_the_rest(
    database_url: str, clock: ManualClock
) -> None:
    """Old settled deliveries go with their attempts, and events with no delivery left; waiting
    deliveries, their events, recent rows, partners and registrations stay."""
    rows = Rows(clock())
    done = rows.event("evt_done", OLD)
    rows.delivery("dlv_delivered", done, DeliveryStatus.DELIVERED, age=OLD, attempts=2)
    rows.delivery("dlv_failed", done, DeliveryStatus.FAILED, age=OLD, attempts=3)
    mixed = rows.event("evt_mixed", OLD)
    rows.delivery("dlv_mixed_delivered", mixed, DeliveryStatus.DELIVERED, age=OLD)
    rows.delivery("dlv_mixed_pending", mixed, DeliveryStatus.PENDING, age=OLD)  # waiting for its retry
    live = rows.event("evt_live", OLD)
    rows.delivery("dlv_delivering", live, DeliveryStatus.DELIVERING, age=OLD)
    late = rows.event("evt_late", OLD)
    rows.delivery("dlv_settled_yesterday", late, DeliveryStatus.FAILED, age=RECENT)
    rows.event("evt_bare_old", OLD)  # no partner wanted it
    rows.event("evt_bare_new", RECENT)
    rows.event("evt_edge", timedelta(days=DAYS) - timedelta(seconds=1))  # just inside the retention

    async def go(engine: AsyncEngine) -> Any:
        await rows.store(engine)
        first = await retention.prune(engine, now=clock(), older_than=timedelta(days=DAYS))
        again = await retention.prune(engine, now=clock(), older_than=timedelta(days=DAYS))
        async with engine.connect() as conn:
            attempts_left = set(await conn.scalars(select(delivery_attempts.c.delivery_id)))
        return (
            first,
            again,
            await _ids(engine, deliveries),
            await _ids(engine, events),
            attempts_left,
            await _count(engine, partners),
            await _count(engine, registrations),
        )

    first, again, deliveries_left, events_left, attempts_left, partner_count, registration_count = (
        _with_engine(database_url, go)
    )
    assert first.document() == {"deliveries": 3, "attempts": 6, "events": 2, "cancelled": 0}
    assert again.document() == {"deliveries": 0, "attempts": 0, "events": 0, "cancelled": 0}
    assert deliveries_left == {"dlv_mixed_pending", "dlv_delivering", "dlv_settled_yesterday"}
    assert attempts_left == deliveries_left
    assert events_left == {"evt_mixed", "evt_live", "evt_late", "evt_bare_new", "evt_edge"}
    assert (partner_count, registration_count) == (1, 1)


def test_prune_goes_in_batches_of_short_transactions(database_url: str, clock: ManualClock) -> None:
    """1,203 old settled deliveries and their events go 100 rows per transaction: 13 + 13 commits."""
    rows = Rows(clock())
    for number in range(1203):
        event_id = rows.event(f"evt_{number:05}", OLD)
        rows.delivery(f"dlv_{number:05}", event_id, DeliveryStatus.DELIVERED, age=OLD)

    async def go(engine: AsyncEngine) -> Any:
        await rows.store(engine)
        commits: list[int] = []
        sa_event.listen(engine.sync_engine, "commit", lambda conn: commits.append(1))
        pruned = await retention.prune(
            engine, now=clock(), older_than=timedelta(days=DAYS), batch=100, duty=1.0
        )
        left = [await _count(engine, table) for table in (deliveries, delivery_attempts, events)]
        return pruned, len(commits), left

    pruned, commits, left = _with_engine(database_url, go)
    assert pruned.document() == {"deliveries": 1203, "attempts": 1203, "events": 1203, "cancelled": 0}
    assert commits == 26
    assert left == [0, 0, 0]


def test_pruning_keeps_every_room_the_sitemap_knows(database_url: str, clock: ManualClock) -> None:
    """Of the old events naming a room the newest stays, so the rooms (and their last-modified
    times) read from the events are the same after pruning; other old events go."""
    rows = Rows(clock())
    moonfrog, sunfish, comet = (
        f"https://launchrooms.example/rooms/{slug}" for slug in ("moonfrog", "sunfish", "comet")
    )
    rows.event("evt_moonfrog_first", OLD + timedelta(days=3), room=moonfrog)
    rows.event("evt_moonfrog_second", OLD, room=moonfrog)
    rows.event("evt_sunfish", OLD, room=sunfish)
    rows.delivery("dlv_sunfish", "evt_sunfish", DeliveryStatus.DELIVERED, age=OLD)
    rows.event("evt_comet_old", OLD, room=comet)
    rows.event("evt_comet_new", RECENT, room=comet)
    rows.event("evt_milestone", OLD)

    async def go(engine: AsyncEngine) -> Any:
        await rows.store(engine)
        async with engine.connect() as conn:
            before = await known_rooms(conn)
        pruned = await retention.prune(engine, now=clock(), older_than=timedelta(days=DAYS))
        async with engine.connect() as conn:
            after = await known_rooms(conn)
        return before, pruned, after, await _ids(engine, events)

    before, pruned, after, events_left = _with_engine(database_url, go)
    assert {room for room, _ in before} == {moonfrog, sunfish, comet}
    assert after == before
    assert pruned.document() == {"deliveries": 1, "attempts": 1, "events": 2, "cancelled": 0}
    assert events_left == {"evt_moonfrog_second", "evt_sunfish", "evt_comet_old", "evt_comet_new"}


def test_a_room_stays_in_the_sitemap_after_its_events_are_pruned(
    make_client: Any, clock: ManualClock
) -> None:
    """A server started after the pruning still lists the room published 31 days before."""
    with make_client(**settings()) as client:
        publish(client, room_claimed(slug="moonfrog"))
        publish(client, milestone())
        clock.advance(timedelta(days=DAYS + 1).total_seconds())
        pruned = client.run(client.app.ctx.operations.prune())
        assert pruned == {"deliveries": 0, "attempts": 0, "events": 1, "cancelled": 0}  # the milestone
    with make_client(**settings()) as client:
        sitemap = client.get("/sitemap.xml")
        assert sitemap.status == 200
        assert "https://launchrooms.example/rooms/moonfrog" in sitemap.text


def test_the_prune_command_prints_counts(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], caplog: Any
) -> None:
    """`prune --older-than DAYS` prints the JSON counts and leaves an audit line; a retention of
    less than a day is refused naming the member."""
    rows = Rows(utc_now())
    event_id = rows.event("evt_old", timedelta(days=12))
    rows.delivery("dlv_old", event_id, DeliveryStatus.DELIVERED, age=timedelta(days=12), attempts=2)
    rows.event("evt_newer", timedelta(days=8))
    _with_engine(database_url, rows.store)
    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)

    assert main(["prune"]) == 0  # the default retention (30 days) keeps everything here
    assert json.loads(capsys.readouterr().out) == {"deliveries": 0, "attempts": 0, "events": 0, "cancelled": 0}
    with caplog.at_level(logging.INFO, logger="service.audit"):
        assert main(["prune", "--older-than", "10"]) == 0
    assert json.loads(capsys.readouterr().out) == {"deliveries": 1, "attempts": 2, "events": 1, "cancelled": 0}
    audit = [record for record in caplog.records if record.name == "service.audit"]
    assert [(record.operation, record.outcome) for record in audit] == [("prune", "ok")]  # type: ignore[attr-defined]

    assert main(["prune", "--older-than", "0"]) == 1
    error = json.loads(capsys.readouterr().err)
    assert [(e["field"], e["code"]) for e in error["errors"]] == [("olderThan", "too_small")]
    assert _with_engine(database_url, lambda engine: _ids(engine, events)) == {"evt_newer"}


async def _until(condition: Callable[[], bool]) -> None:
    """Let the loop turn until ``condition`` holds (no time passes on the test's clock)."""
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0)


async def _turns(worker: Worker, count: int) -> None:
    """Wait for the delivery loop to turn ``count`` times (each a poll interval of real time)."""
    for _ in range(count):
        turned = worker.last_turn
        await _until(lambda turned=turned: worker.last_turn > turned)


def test_the_worker_prunes_soon_after_start_then_hourly(database_url: str, clock: ManualClock) -> None:
    """Driven by the clock: nothing before the first minute, a pruning after it, the next an hour on."""
    config = Settings(database_url=database_url, retention_days=DAYS)

    async def go(engine: AsyncEngine) -> None:
        rows = Rows(clock())
        rows.event("evt_1", OLD)
        rows.delivery("dlv_1", "evt_1", DeliveryStatus.FAILED, age=OLD)
        await rows.store(engine)
        worker = wiring.worker(engine, config, clock=clock, poll_interval=0.001)
        await worker.start()
        try:
            await _until(lambda: worker.next_prune is not None)
            assert worker.next_prune == clock() + PRUNE_FIRST
            assert not worker.pruned.is_set()
            clock.advance(PRUNE_FIRST.total_seconds())
            await asyncio.wait_for(worker.pruned.wait(), 10)
            worker.pruned.clear()
            assert await _ids(engine, deliveries) == set()
            assert await _ids(engine, events) == set()
            assert worker.next_prune == clock() + PRUNE_EVERY

            async with engine.begin() as conn:
                await conn.execute(insert(events), [{**rows.events[0], "id": "evt_2", "dedupe_key": "evt_2"}])
            clock.advance(PRUNE_EVERY.total_seconds() - 1)
            await _turns(worker, 3)
            assert not worker.pruned.is_set() and await _ids(engine, events) == {"evt_2"}
            clock.advance(1)
            await asyncio.wait_for(worker.pruned.wait(), 10)
            assert await _ids(engine, events) == set()
        finally:
            await worker.stop()

    _with_engine(database_url, go)


def test_a_failed_pruning_is_logged_and_delivery_goes_on(
    sqlite_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """An error while pruning is an error line; the loop keeps turning and tries again in an hour."""
    config = Settings(database_url=sqlite_url)

    async def broken(*args: Any, **kwargs: Any) -> retention.Pruned:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(retention, "prune", broken)

    async def go(engine: AsyncEngine) -> None:
        worker = wiring.worker(engine, config, clock=clock, poll_interval=0.001)
        await worker.start()
        try:
            await _until(lambda: worker.next_prune is not None)
            clock.advance(PRUNE_FIRST.total_seconds())
            await asyncio.wait_for(worker.pruned.wait(), 10)
            await _until(lambda: worker.next_prune == clock() + PRUNE_EVERY)
            await _turns(worker, 3)  # the delivery loop still turns
        finally:
            await worker.stop()

    with caplog.at_level(logging.ERROR, logger="service.webhooks.worker"):
        _with_engine(sqlite_url, go)
    assert any("pruning past the retention failed" in record.getMessage() for record in caplog.records)
