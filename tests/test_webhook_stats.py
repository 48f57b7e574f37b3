"""Outbox statistics for the metrics scrape: undelivered rows only, per partner, through the partial index."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import insert, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine
from webhook_helpers import fixed_keyring, room_claimed, trending

from service.clock import ManualClock
from service.db.engine import create_engine
from service.db.tables import deliveries, events, partners
from service.events import parse_event
from service.metrics import Metrics
from service.states import DeliveryStatus
from service.webhooks import batching, outbox, retention
from service.webhooks import partners as partner_ops
from service.webhooks.batching import BatchPolicy
from service.webhooks.partners import NewPartner
from service.webhooks.stats import WAITING, OutboxStats, Waiting, outbox_stats


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


async def _fill(engine: AsyncEngine, clock: ManualClock, rows: list[tuple[str, str, float]]) -> None:
    """Partners a, b and c, one event, and a delivery per (partner, status, minutes after the start)."""
    start = clock()
    async with engine.begin() as conn:
        await conn.execute(
            insert(partners),
            [
                {"id": f"ptn_{name}", "name": name, "url": "https://hooks.example/", "status": "active",
                 "secret": "whsec_x", "created_at": start, "updated_at": start}
                for name in "abc"
            ],
        )  # fmt: skip
        await conn.execute(
            insert(events),
            [{"id": "evt_1", "kind": "room.claimed", "dedupe_key": "k", "payload": "{}", "occurred_at": start, "created_at": start}],
        )
        await conn.execute(
            insert(deliveries),
            [
                {"id": f"dlv_{n}", "event_id": "evt_1", "partner_id": partner, "status": status, "attempts": 0,
                 "next_attempt_at": start + timedelta(minutes=minutes + 30),
                 "created_at": start + timedelta(minutes=minutes), "updated_at": start}
                for n, (partner, status, minutes) in enumerate(rows)
            ],
        )  # fmt: skip


async def test_only_undelivered_rows_count_per_partner(engine: AsyncEngine, clock: ManualClock) -> None:
    """Pending and delivering rows count, by state and by partner, with the oldest one's creation
    and the earliest one's due time (each row here falls due 30 minutes after its creation);
    delivered, failed, cancelled and batched ones (their batch carries them) never; a partner with
    nothing waiting reads zero."""
    await _fill(
        engine,
        clock,
        [("ptn_a", "pending", 5), ("ptn_a", "delivering", 2), ("ptn_a", "pending", 9), ("ptn_a", "delivered", 0),
         ("ptn_a", "batched", 1), ("ptn_b", "failed", 0), ("ptn_b", "delivered", 1), ("ptn_b", "cancelled", 0),
         ("ptn_c", "pending", 7)],
    )  # fmt: skip
    async with engine.connect() as conn:
        found = await outbox_stats(conn)
    start = clock()
    assert found == OutboxStats(
        by_status={DeliveryStatus.PENDING: 3, DeliveryStatus.DELIVERING: 1, DeliveryStatus.BATCHING: 0},
        by_partner={
            "ptn_a": Waiting(3, start + timedelta(minutes=2), start + timedelta(minutes=32)),
            "ptn_b": Waiting(0, None, None),
            "ptn_c": Waiting(1, start + timedelta(minutes=7), start + timedelta(minutes=37)),
        },
    )


async def test_the_scrape_reads_the_partial_index(engine: AsyncEngine, database_url: str) -> None:
    """Both databases answer the statement from the partial indexes of undelivered rows: pending
    and delivering through ix_deliveries_claimable or ix_deliveries_partner_claimable, batching
    through ix_deliveries_batching; never a whole-table scan, nor a partner's whole history."""
    async with engine.connect() as conn:
        statement = str(WAITING.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if database_url.startswith("sqlite"):
            plan = [row[-1] for row in await conn.execute(text(f"EXPLAIN QUERY PLAN {statement}"))]
        else:
            # An empty test table is cheapest to read whole; forbid that to see the index path.
            await conn.execute(text("SET LOCAL enable_seqscan = off"))
            plan = [row[0] for row in await conn.execute(text(f"EXPLAIN {statement}"))]
    assert any("ix_deliveries_claimable" in line or "ix_deliveries_partner_claimable" in line for line in plan), plan
    assert any("ix_deliveries_batching" in line for line in plan), plan
    assert not any("ix_deliveries_partner_created" in line for line in plan), plan
    assert not any(line.strip() == "SCAN deliveries" or "Seq Scan" in line for line in plan), plan


async def _plan(conn: Any, database_url: str, statement: str) -> list[str]:
    if database_url.startswith("sqlite"):
        return [row[-1] for row in await conn.execute(text(f"EXPLAIN QUERY PLAN {statement}"))]
    await conn.execute(text("SET LOCAL enable_seqscan = off"))  # an empty table is cheapest read whole
    return [row[0] for row in await conn.execute(text(f"EXPLAIN {statement}"))]


async def test_a_batchs_members_and_a_partners_rows_are_found_through_the_leaner_indexes(
    engine: AsyncEngine, database_url: str
) -> None:
    """Migration 0012 made ix_deliveries_batch_id partial (members only) and dropped the index of
    partner_id alone: both databases still find a batch's members through the partial index (the
    settle's follow-up, a requeue, the listing's counts) and a partner's rows through
    ix_deliveries_partner_created, never by reading the table."""
    members = {
        "UPDATE deliveries SET status = 'delivered' WHERE batch_id = 'dlv_x' AND status = 'batched'",
        "SELECT id FROM deliveries WHERE batch_id = 'dlv_x'",
        "SELECT batch_id, count(*) FROM deliveries WHERE batch_id IN ('dlv_x', 'dlv_y') GROUP BY batch_id",
    }
    async with engine.connect() as conn:
        for statement in members:
            plan = await _plan(conn, database_url, statement)
            assert any("ix_deliveries_batch_id" in line for line in plan), (statement, plan)
        plan = await _plan(conn, database_url, "SELECT id FROM deliveries WHERE partner_id = 'ptn_a' LIMIT 1")
        assert any("ix_deliveries_partner_created" in line for line in plan), plan
        names = await conn.run_sync(lambda sync: {index["name"] for index in inspect(sync).get_indexes("deliveries")})
    assert "ix_deliveries_partner_id" not in names



async def _onboard(engine: AsyncEngine, clock: ManualClock, name: str, batch: BatchPolicy | None = None) -> str:
    async with engine.begin() as conn:
        new = NewPartner(name, f"https://{name}.example/hook", None, None, batch)
        partner = await partner_ops.create_partner(conn, new, now=clock(), keyring=fixed_keyring())
    return partner.id


async def _publish(engine: AsyncEngine, clock: ManualClock, data: dict[str, Any]) -> None:
    await outbox.publish_event(engine, parse_event(data, now=clock()), now=clock())


async def _scrape(engine: AsyncEngine, metrics: Metrics, clock: ManualClock) -> OutboxStats:
    """What a scrape reads and sets, as of the clock's time."""
    async with engine.connect() as conn:
        found = await outbox_stats(conn)
    metrics.set_outbox(found, clock())
    return found


async def test_deliveries_waiting_for_their_batch_count_until_it_forms(engine: AsyncEngine, clock: ManualClock) -> None:
    """A batched kind waiting for its batch (only a worker forms it) is undelivered: the queue
    depth counts it as batching, its partner's waiting count and oldest age include it, and it is
    overdue only once its batch's longest wait has passed. Formed, its batch's own delivery counts
    and its members (batched) no longer do."""
    start = clock()
    batcher = await _onboard(engine, clock, "batcher", BatchPolicy(("room.trending",), 100, 60.0))
    plain = await _onboard(engine, clock, "plain")
    await _publish(engine, clock, trending(1))
    clock.advance(10)
    await _publish(engine, clock, trending(2))
    clock.advance(20)  # 30 s after the first: the batch may wait 30 s more
    metrics = Metrics()
    found = await _scrape(engine, metrics, clock)
    assert found == OutboxStats(
        by_status={DeliveryStatus.PENDING: 2, DeliveryStatus.DELIVERING: 0, DeliveryStatus.BATCHING: 2},
        by_partner={
            batcher: Waiting(2, start, start + timedelta(seconds=60)),
            plain: Waiting(2, start, start),
        },
    )
    samples = _samples(metrics)
    assert samples[("service_webhook_queue_depth", (("status", "batching"),))] == 2.0
    assert samples[("service_webhook_deliveries_waiting", (("partner", batcher),))] == 2.0
    assert samples[("service_webhook_oldest_waiting_seconds", (("partner", batcher),))] == 30.0
    assert samples[("service_webhook_overdue_seconds", (("partner", batcher),))] == 0.0  # its batch may wait
    assert samples[("service_webhook_overdue_seconds", (("partner", plain),))] == 30.0
    clock.advance(45)  # no worker formed it: 15 s past the first one's longest wait
    await _scrape(engine, metrics, clock)
    assert _samples(metrics)[("service_webhook_overdue_seconds", (("partner", batcher),))] == 15.0
    async with engine.begin() as conn:
        assert await batching.form_batches(conn, now=clock()) == 1
    found = await _scrape(engine, metrics, clock)
    assert found.by_status == {DeliveryStatus.PENDING: 3, DeliveryStatus.DELIVERING: 0, DeliveryStatus.BATCHING: 0}
    assert found.by_partner[batcher] == Waiting(1, clock(), clock())


async def test_a_removed_partners_series_drop_out(engine: AsyncEngine, clock: ManualClock) -> None:
    """Removed, a partner has no waiting, oldest or overdue series any more. What it may still have
    waiting (a publish that slipped past its removal) is counted until the pruning cancels it,
    then its series drop out again."""
    kept = await _onboard(engine, clock, "kept")
    removed = await _onboard(engine, clock, "removed")
    await _publish(engine, clock, room_claimed())
    clock.advance(60)
    metrics = Metrics()
    await _scrape(engine, metrics, clock)
    assert _partners_in(metrics) == {kept, removed}
    async with engine.begin() as conn:
        assert await partner_ops.remove_partner(conn, removed, now=clock()) == 1
    await _scrape(engine, metrics, clock)
    assert _partners_in(metrics) == {kept}
    async with engine.begin() as conn:  # a delivery published as the partner was removed
        await conn.execute(
            insert(deliveries).values(
                id="dlv_stranded", event_id=await conn.scalar(text("SELECT id FROM events")), partner_id=removed,
                status="pending", attempts=0, next_attempt_at=clock(), created_at=clock(), updated_at=clock(),
            )
        )  # fmt: skip
    found = await _scrape(engine, metrics, clock)
    assert found.by_partner[removed] == Waiting(1, clock(), clock())
    assert found.by_status[DeliveryStatus.PENDING] == 2
    assert await retention.cancel_stranded(engine, now=clock()) == 1
    found = await _scrape(engine, metrics, clock)
    assert set(found.by_partner) == {kept} == _partners_in(metrics)
    assert found.by_status[DeliveryStatus.PENDING] == 1


def _partners_in(metrics: Metrics) -> set[str]:
    """The partners with an outbox series (waiting, oldest, overdue: each has all three)."""
    named = [dict(labels).get("partner") for _, labels in _samples(metrics)]
    return {partner for partner in named if partner is not None}


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name.startswith(
            ("service_webhook_queue", "service_webhook_deliveries", "service_webhook_oldest", "service_webhook_overdue")
        )
    }


def test_outbox_gauges_follow_the_latest_scrape(clock: ManualClock) -> None:
    """Waiting deliveries, the oldest one's age and how long the earliest has been due, per
    partner (a delivery not yet due is not late: 0); a partner gone drops out."""
    metrics = Metrics()
    start = clock()
    clock.advance(90)
    metrics.set_outbox(
        OutboxStats(
            {DeliveryStatus.PENDING: 3, DeliveryStatus.DELIVERING: 1},
            {
                "ptn_a": Waiting(3, start, start + timedelta(seconds=60)),
                "ptn_b": Waiting(),
                "ptn_c": Waiting(1, start, start + timedelta(seconds=300)),  # its next retry is to come
            },
        ),
        clock(),
    )
    assert _samples(metrics) == {
        ("service_webhook_queue_depth", (("status", "pending"),)): 3.0,
        ("service_webhook_queue_depth", (("status", "delivering"),)): 1.0,
        ("service_webhook_deliveries_waiting", (("partner", "ptn_a"),)): 3.0,
        ("service_webhook_deliveries_waiting", (("partner", "ptn_b"),)): 0.0,
        ("service_webhook_deliveries_waiting", (("partner", "ptn_c"),)): 1.0,
        ("service_webhook_oldest_waiting_seconds", (("partner", "ptn_a"),)): 90.0,
        ("service_webhook_oldest_waiting_seconds", (("partner", "ptn_b"),)): 0.0,
        ("service_webhook_oldest_waiting_seconds", (("partner", "ptn_c"),)): 90.0,
        ("service_webhook_overdue_seconds", (("partner", "ptn_a"),)): 30.0,
        ("service_webhook_overdue_seconds", (("partner", "ptn_b"),)): 0.0,
        ("service_webhook_overdue_seconds", (("partner", "ptn_c"),)): 0.0,
    }
    metrics.set_outbox(OutboxStats({DeliveryStatus.PENDING: 0, DeliveryStatus.DELIVERING: 0}, {"ptn_b": Waiting()}), clock())
    assert {labels for _, labels in _samples(metrics)} == {
        (("status", "pending"),), (("status", "delivering"),), (("partner", "ptn_b"),)
    }


@pytest.mark.parametrize(
    ("calls", "expected"),
    [
        ([("ptn_a", "delivered"), ("ptn_a", "delivered"), ("ptn_b", "retry")],
         {("ptn_a", "delivered"): 2.0, ("ptn_b", "retry"): 1.0}),
    ],
)  # fmt: skip
def test_attempts_are_counted_by_partner_and_outcome(calls: list[tuple[str, ...]], expected: dict[Any, float]) -> None:
    """inc(counter, partner, outcome) counts each partner's outcomes apart."""
    metrics = Metrics()
    for labels in calls:
        metrics.inc(metrics.delivery_attempts, *labels)
    counted = {
        (sample.labels["partner"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if sample.name == "service_webhook_attempts_total"
    }
    assert counted == expected
