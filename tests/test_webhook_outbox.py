"""The outbox: strict publishing, dedupe, leases that outlive killed workers, many workers at once."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
from collections import Counter
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from sqlalchemy import func, select, text
from webhook_helpers import AUTH, Receiver, Reply, deliveries, drain, onboard, publish, room_claimed, settings

from service.db.engine import create_engine
from service.db.tables import deliveries as deliveries_table
from service.db.tables import delivery_attempts, events
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.webhooks import outbox, partners, runtime, settle, wiring
from service.webhooks.claim import Job, claim_due
from service.webhooks.notify import Listener, notify
from service.webhooks.worker import Worker, lease_for

UPGRADED = {
    "event": "room.upgraded",
    "eventId": "evt_upgrade_1",
    "slug": "moonfrog",
    "roomUrl": "https://launchrooms.example/rooms/moonfrog",
    "tier": "verified",
    "tierLabel": "Verified Room",
}


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({**room_claimed(), "event": "room.sold"}, [("event", "unknown_event")]),
        ({k: v for k, v in room_claimed().items() if k != "event"}, [("event", "unknown_event")]),
        ({k: v for k, v in room_claimed().items() if k != "slug"}, [("slug", "missing")]),
        (room_claimed(slug=5), [("slug", "invalid_type")]),
        ({"event": "platform.milestone", "milestone": "m", "value": "12"}, [("value", "invalid_type")]),
        ({"event": "platform.milestone", "milestone": "m", "value": True}, [("value", "invalid_type")]),
        (room_claimed(color="green"), [("color", "unknown_field")]),
        (room_claimed(contractAddress=None), [("contractAddress", "invalid_type")]),
        (room_claimed(roomType="owner_room"), [("roomType", "invalid")]),
        (room_claimed(roomUrl="javascript:alert(1)"), [("roomUrl", "invalid")]),
        (room_claimed(occurredAt="2026-06-29T12:00:00"), [("occurredAt", "invalid")]),
        (
            {"event": "room.claimed", "slug": "x"},
            [("roomUrl", "missing"), ("project", "missing"), ("ticker", "missing"),
             ("chain", "missing"), ("roomType", "missing")],
        ),
    ],
)  # fmt: skip
def test_publish_validation(make_client: Any, body: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    """Unknown kinds, missing, mistyped and unknown members are 400 naming the field; nothing is stored."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        response = client.post("/admin/events", json=body, headers=AUTH)
        assert response.status == 400
        assert response.json["message"] == "The request is not valid."
        assert [(e["field"], e["code"]) for e in response.json["errors"]] == errors
        assert deliveries(client) == []


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [(b"[1]", 400, "invalid_type"), (b"{", 400, "invalid_json"), (b"", 400, "empty")],
)
def test_publish_needs_a_json_object(make_client: Any, raw: bytes, status: int, code: str) -> None:
    """The body must be one JSON object."""
    with make_client(**settings()) as client:
        response = client.post(
            "/admin/events", content=raw, headers={**AUTH, "content-type": "application/json"}
        )
        assert response.status == status
        assert response.json["errors"][0] == {"field": "body", "code": code, "message": response.json["errors"][0]["message"]}


def test_a_repeated_dedupe_key_delivers_nothing_new(make_client: Any) -> None:
    """Same dedupe key: 202 with the first eventId and no deliveries; same eventId, other key: 409."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        assert publish(client, UPGRADED) == {"eventId": "evt_upgrade_1", "deliveries": 1}
        assert publish(client, UPGRADED) == {"eventId": "evt_upgrade_1", "deliveries": 0}
        # The dedupe key is eventId + tier: a different payload with the same key is still a repeat.
        assert publish(client, {**UPGRADED, "tierLabel": "Renamed"})["deliveries"] == 0
        clash = client.post("/admin/events", json={**UPGRADED, "tier": "pro"}, headers=AUTH)
        assert clash.status == 409
        assert clash.json["errors"] == [
            {"field": "eventId", "code": "conflict", "message": "Use a new eventId for a different event."}
        ]
        # Without an eventId each publish is a new event (room.claimed dedupes on eventId alone).
        first, second = publish(client, room_claimed()), publish(client, room_claimed())
        assert first["eventId"] != second["eventId"]
        assert first["eventId"].startswith("evt_")
        assert drain(client) == 3
        assert sorted(r.headers["x-service-event"] for r in receiver.requests) == [
            "room.claimed", "room.claimed", "room.upgraded"
        ]


def test_a_killed_workers_claims_expire_and_go_out_again(make_client: Any, clock: Any) -> None:
    """Deliveries claimed by a worker that died are sent by another once the lease runs out."""
    with Receiver() as receiver, make_client(**settings(receiver_timeout=5)) as client:
        onboard(client, receiver.url())
        publish(client, room_claimed())

        async def killed_worker() -> int:
            ctx = client.app.ctx
            async with ctx.engine.begin() as conn:  # claimed, then never sent or settled
                jobs = await claim_due(
                    conn,
                    now=clock(),
                    limit=10,
                    lease=lease_for(ctx.settings),
                    default_cap=8,
                    keyring=ctx.keyring,
                )
            return len(jobs)

        assert client.run(killed_worker()) == 1
        assert deliveries(client)[0]["status"] == "delivering"
        assert drain(client) == 0  # the lease holds
        lease = lease_for(client.app.ctx.settings)
        assert lease == timedelta(seconds=15)  # 2 x timeout + 5 s
        clock.advance(lease.total_seconds())
        assert drain(client) == 1
        [delivery] = deliveries(client)
        assert delivery["status"] == "delivered"
        # Attempt 1 may or may not have reached the partner before the crash; it was never logged,
        # so it is sent again under its own number.
        assert [a["attempt"] for a in delivery["attempts"]] == [1]
        assert len(receiver.requests) == 1


async def _claim_one(app: Any) -> list[Job]:
    """One due delivery claimed as a worker would, under a lease of the app's settings."""
    lease = lease_for(app.ctx.settings)
    async with app.ctx.engine.begin() as conn:
        return await claim_due(
            conn, now=app.ctx.clock(), limit=1, lease=lease, default_cap=8, keyring=app.ctx.keyring
        )


def test_a_late_result_cannot_overwrite_a_newer_claim(make_client: Any, clock: Any) -> None:
    """A worker that outlived its lease logs its attempt but does not change the delivery."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        publish(client, room_claimed())
        app = client.app
        lease = lease_for(app.ctx.settings)
        claim = partial(_claim_one, app)

        async def deliver(worker: Worker, job: Job) -> None:
            record = await worker.attempt(job)
            async with app.ctx.engine.begin() as conn:
                effects = (await settle.record(conn, [record], breaker=worker.breaker)).effects
                await partners.apply(conn, effects, now=worker.clock())

        async def scenario() -> None:
            async with runtime.worker_for(app) as slow, runtime.worker_for(app) as fast:
                [stale] = await claim()
                clock.advance(lease.total_seconds())
                [fresh] = await claim()
                assert fresh.delivery_id == stale.delivery_id and fresh.claim_token != stale.claim_token
                assert fresh.attempt == stale.attempt == 1  # the lost claim logged nothing
                await deliver(fast, fresh)
                receiver.script("/hook", 500)
                await deliver(slow, stale)

        client.run(scenario())
        [delivery] = deliveries(client)
        assert delivery["status"] == "delivered"
        assert sorted((a["attempt"], a["outcome"]) for a in delivery["attempts"]) == [
            (1, "delivered"),
            (1, "retry"),
        ]


def test_a_late_failure_settles_nothing_and_fails_no_delivery_for_good(
    make_client: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that outlived its lease gets a failure with the schedule spent: the attempt is
    logged and counted as made, but the delivery is the newer claim's, so there is no "failed for
    good" warning and no failed delivery counted, only an INFO line marked ``superseded``."""
    with Receiver(Reply(500)) as receiver, make_client(**settings(webhook_retry_schedule=())) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        app = client.app
        lease = lease_for(app.ctx.settings)
        claim = partial(_claim_one, app)

        async def scenario() -> tuple[frozenset[str], str, str]:
            async with runtime.worker_for(app) as slow:
                [stale] = await claim()
                clock.advance(lease.total_seconds())
                [fresh] = await claim()
                record = await slow.attempt(stale)
                async with app.ctx.engine.begin() as conn:
                    recorded = await settle.record(conn, [record], breaker=slow.breaker)
                    await partners.apply(conn, recorded.effects, now=slow.clock())
                slow.recorder.committed([record], settle.changes(recorded.effects), recorded.superseded)
                return recorded.superseded, fresh.delivery_id, record.outcome

        with caplog.at_level(logging.INFO, logger="service.webhooks.worker"):
            superseded, delivery_id, outcome = client.run(scenario())
        assert outcome == "failed" and superseded == {delivery_id}
        lines = [
            (line.levelname, line.getMessage(), getattr(line, "superseded", False))
            for line in caplog.records
            if line.name == "service.webhooks.worker"
        ]
        assert ("INFO", "webhook attempt", True) in lines
        assert not [line for line in lines if line[1] == "webhook delivery failed for good"], lines
        [delivery] = deliveries(client)
        assert delivery["status"] == "delivering"  # the newer claim's to settle
        assert [(a["attempt"], a["outcome"]) for a in delivery["attempts"]] == [(1, "failed")]
        text = client.get("/admin/metrics", headers=AUTH).text
        assert f'service_webhook_attempts_total{{outcome="failed",partner="{partner["id"]}"}} 1.0' in text
        assert f'service_webhook_deliveries_failed_total{{partner="{partner["id"]}"}} 0.0' in text


def test_many_workers_send_every_delivery_exactly_once(database_url: str, clock: Any) -> None:
    """N workers, each with its own engine, drain M events x 2 partners: one attempt per delivery.
    Answers wait until more requests have arrived than one worker can have in flight, so the work
    is shared whichever worker wins the database first."""
    workers, event_count, concurrency = 4, 60, 5
    # Caps high enough for every worker to find work at once: this test is about sharing it.
    config = Settings(database_url=database_url, webhook_max_in_flight=100, **settings())
    release = threading.Event()

    async def scenario(receiver: Receiver) -> None:
        setup = create_engine(database_url)
        try:
            async with setup.begin() as conn:
                for path in ("/a", "/b"):
                    new = partners.NewPartner(name=path, url=receiver.url(path), events=None)
                    await partners.create_partner(conn, new, now=clock(), keyring=load_keyring(config))
            for index in range(event_count):
                await outbox.publish_event(
                    setup, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
                )
            engines = [create_engine(database_url) for _ in range(workers)]
            crew = [
                wiring.worker(engine, config, clock=clock, rng=random.Random(n), concurrency=concurrency)
                for n, engine in enumerate(engines)
            ]
            for worker in crew:
                await worker.open()
            drains = asyncio.gather(*(worker.drain() for worker in crew))
            more_than_one = await asyncio.to_thread(
                receiver.wait_for, lambda requests: len(requests) > concurrency, 20
            )
            release.set()
            counts = await drains
            assert more_than_one, "no worker but one sent anything"
            for worker in crew:
                await worker.close()
            for engine in engines:
                await engine.dispose()
            assert sum(counts) == 2 * event_count
            assert sum(1 for count in counts if count) > 1  # the work really was shared
            async with setup.connect() as conn:
                attempts = (await conn.execute(
                    select(delivery_attempts.c.delivery_id, delivery_attempts.c.attempt)
                )).all()  # fmt: skip
                statuses = Counter(
                    (await conn.execute(select(deliveries_table.c.status))).scalars().all()
                )
                stored = await conn.scalar(select(func.count()).select_from(events))
        finally:
            await setup.dispose()
        assert stored == event_count
        assert statuses == {"delivered": 2 * event_count}
        assert len(attempts) == 2 * event_count
        assert {attempt for _, attempt in attempts} == {1}
        assert len({delivery_id for delivery_id, _ in attempts}) == 2 * event_count

    with Receiver(default=Reply(hold=release)) as receiver:
        asyncio.run(scenario(receiver))
        sent = Counter(request.headers["x-service-delivery"] for request in receiver.requests)
        assert len(sent) == 2 * event_count
        assert set(sent.values()) == {1}  # no attempt was sent twice
        assert len(receiver.to("/a")) == len(receiver.to("/b")) == event_count


def test_a_stopping_worker_hands_back_what_it_had_not_started(make_client: Any) -> None:
    """Claimed deliveries still waiting for a slot are released on stop, their attempt uncounted."""
    with Receiver(default=Reply(delay=0.3)) as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        for index in range(5):
            publish(client, room_claimed(f"room-{index}"))

        async def scenario() -> None:
            worker = runtime.worker_for(client.app, concurrency=1)
            await worker.start()
            for _ in range(500):  # until the first attempt is on the wire (bounded: 5 s)
                if receiver.requests:
                    break
                await asyncio.sleep(0.01)
            await worker.stop()
            assert worker.logged == 1

        client.run(scenario())
        found = deliveries(client)
        assert sorted(d["status"] for d in found) == ["delivered"] + ["pending"] * 4
        assert all(d["attempts"] == [] for d in found if d["status"] == "pending")
        assert drain(client) == 4
        assert all(d["attempts"][-1]["attempt"] == 1 for d in deliveries(client))


def test_a_publish_in_another_process_wakes_a_postgresql_worker_at_once(
    database_url: str, clock: Any
) -> None:
    """With polling all but off, only the publisher's NOTIFY can bring the worker to its delivery."""
    if not database_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; on SQLite the worker polls")
    config = Settings(database_url=database_url, **settings())

    async def scenario(receiver: Receiver) -> None:
        publisher, engine = create_engine(database_url), create_engine(database_url)
        worker = wiring.worker(engine, config, clock=clock, poll_interval=3600)
        try:
            async with publisher.begin() as conn:
                new = partners.NewPartner(name="elsewhere", url=receiver.url(), events=None)
                partner = await partners.create_partner(conn, new, now=clock(), keyring=load_keyring(config))
            await worker.start()
            await asyncio.wait_for(worker.listener.listening.wait(), timeout=10)
            for index in range(3):  # no wake= here: this engine stands for another process
                await outbox.publish_event(
                    publisher, parse_event(room_claimed(f"far-{index}"), now=clock()), now=clock()
                )
                arrived = partial(lambda count, requests: len(requests) > count, index)
                assert await asyncio.to_thread(receiver.wait_for, arrived, 10)
            async with publisher.begin() as conn:  # a resume, too, reaches the other process
                await partners.set_status(conn, partner.id, "paused", now=clock())
            await outbox.publish_event(publisher, parse_event(room_claimed("held"), now=clock()), now=clock())
            async with publisher.begin() as conn:
                await partners.set_status(conn, partner.id, "active", now=clock())
            assert await asyncio.to_thread(receiver.wait_for, lambda r: len(r) == 4, 10)
        finally:
            await worker.stop()
            await engine.dispose()
            await publisher.dispose()

    with Receiver() as receiver:
        asyncio.run(scenario(receiver))
        slugs = [json.loads(request.body)["slug"] for request in receiver.requests]
        assert slugs == ["far-0", "far-1", "far-2", "held"]


def test_a_lost_listening_connection_is_replaced(database_url: str, clock: Any) -> None:
    """PostgreSQL ends the listener's session (a restart, an idle-session killer): it listens again."""
    if not database_url.startswith("postgresql"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; on SQLite the worker polls")

    async def scenario() -> None:
        engine = create_engine(database_url)
        wake = asyncio.Event()
        listener = Listener(engine, wake, retry_seconds=0.05)
        try:
            await listener.start()
            await asyncio.wait_for(listener.listening.wait(), timeout=10)
            async with engine.begin() as conn:
                ended = await conn.scalar(text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                ))  # fmt: skip
            assert ended == 1
            for _ in range(1000):  # until the loss is seen (bounded: 10 s)
                if not listener.listening.is_set():
                    break
                await asyncio.sleep(0.01)
            await asyncio.wait_for(listener.listening.wait(), timeout=10)
            wake.clear()
            async with engine.begin() as conn:
                await notify(conn)
            await asyncio.wait_for(wake.wait(), timeout=10)
        finally:
            await listener.stop()
            await engine.dispose()

    asyncio.run(scenario())
