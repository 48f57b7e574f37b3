"""What the outbox holds now, per partner, read for the metrics scrape.

Only undelivered rows count: pending and delivering (the rows of the partial index
``ix_deliveries_claimable``), and batching, a batched kind waiting for its batch (the rows of
``ix_deliveries_batching``). Only a worker forms batches, at each claim, so batching rows wait for a
worker as much as pending ones do. Batched rows do not count: their batch's own delivery carries
them. Each part of the statement filters on its index's own predicate, word for word, so both
databases read the queue through those indexes and never the delivered history, which grows to
millions of rows (the scrape's cost is measured in the README's admin guide).

Every partner not removed has a series. A removed one has none, but for what it may still have
waiting (a publish that slipped past its removal): counted until the worker's next pruning cancels
it (``retention.cancel_stranded``), then its series drop out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

from sqlalchemy import Select, TextClause, func, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.tables import BATCHING, CLAIMABLE_WHERE, deliveries, partners
from service.states import CLAIMABLE, DeliveryStatus, PartnerStatus


class Waiting(NamedTuple):
    """One partner's undelivered deliveries: how many, when the oldest of them was created, and
    when the earliest of them fell due (``next_attempt_at``: a retry's time, a claim's lease end,
    the moment a batching one has waited its batch's ``maxWaitSeconds``)."""

    deliveries: int = 0
    oldest: datetime | None = None
    due: datetime | None = None


class OutboxStats(NamedTuple):
    by_status: dict[DeliveryStatus, int]  # each of WAITING_STATES present
    by_partner: dict[str, Waiting]  # every partner not removed (Waiting() when nothing waits), any with rows


# The undelivered states, as the queue depth gauge labels them.
WAITING_STATES = (*CLAIMABLE, DeliveryStatus.BATCHING)
# Every row has a next_attempt_at after this, so the range below changes no answer; it gives
# SQLite's planner a range on the partial index's column, and SQLite then reads that index instead
# of walking a partner_id index over the whole table for the GROUP BY (on 2,000,000 delivered
# rows and 2,000 waiting: 4 to 6 s a scrape without it, 4 ms with it). PostgreSQL reads the partial
# index either way (1.2 ms there). A test holds both plans to the indexes.
_EVER = datetime(1, 1, 1, tzinfo=UTC)


def _waiting(where: TextClause) -> Select[str, str, int, datetime, datetime]:
    """One row per (partner, state) with anything waiting among the rows of one partial index."""
    return (
        select(
            deliveries.c.partner_id,
            deliveries.c.status,
            func.count(),
            func.min(deliveries.c.created_at),
            func.min(deliveries.c.next_attempt_at),
        )
        .where(where, deliveries.c.next_attempt_at >= _EVER)
        .group_by(deliveries.c.partner_id, deliveries.c.status)
    )


# Pending and delivering, then batching: one round trip, each part through its own index.
WAITING = union_all(_waiting(CLAIMABLE_WHERE), _waiting(BATCHING))
# The partners with a series even when nothing of theirs waits: not a removed one (its gauges drop
# out, as service.webhooks.standing's do).
_PARTNERS = select(partners.c.id).where(partners.c.status != PartnerStatus.REMOVED)


async def outbox_stats(conn: AsyncConnection) -> OutboxStats:
    by_status = dict.fromkeys(WAITING_STATES, 0)
    by_partner = {partner_id: Waiting() for partner_id in (await conn.scalars(_PARTNERS))}
    for partner_id, status, count, oldest, due in await conn.execute(WAITING):
        by_status[DeliveryStatus(status)] += count
        earlier = by_partner.get(partner_id, Waiting())
        by_partner[partner_id] = Waiting(
            earlier.deliveries + count, _earliest(oldest, earlier.oldest), _earliest(due, earlier.due)
        )
    return OutboxStats(by_status, by_partner)


def _earliest(one: datetime, other: datetime | None) -> datetime:
    return one if other is None else min(one, other)
