"""Sending deliveries again: at an admin's request a window of them (replay), one (resend) or a
partner's failed ones (retry_failed); and a claim handed back unsent (``claim.release``).

Each makes deliveries ``pending`` and due now (``requeued``), with their delivery id, body and
attempt count kept:
the next attempt is numbered after the last one logged, and the partner sees the same
``x-service-delivery`` id (``webhook-id``) as before, so a receiver that deduplicates by it can.
A partner that was removed is never sent to again: its cancelled deliveries stay cancelled. A
batch is resent or retried as a whole (its own delivery, the same bytes); the events in it wait in
it again (``batched``). A replay's window holds events by their own delivery's ``created_at`` (when
they were published, as the listing shows), not the batch's (when it formed): a batch goes again
whole only when every event it carries is in the window; the window's events of any other batch
leave it and wait for a batch again (``batching``, due now: ``batching.form_batches`` makes a new
one, under a new id, each event keeping its ``eventId``), so the partner is sent the window's events
and no others.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import JSON, Select, and_, cast, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.tables import deliveries, partners
from service.states import DeliveryStatus, PartnerStatus
from service.webhooks.notify import notify


def requeued(now: datetime) -> dict[str, object]:
    """The columns of a delivery made ``pending`` and due ``now``, unclaimed and undelivered."""
    return {
        "status": DeliveryStatus.PENDING,
        "next_attempt_at": now,
        "delivered_at": None,
        "claim_token": None,
        "claimed_until": None,
        "updated_at": now,
    }


_LIVE_PARTNERS = select(partners.c.id).where(partners.c.status != PartnerStatus.REMOVED)


def _in_window(
    table: Any, *, since: datetime, until: datetime, status: DeliveryStatus, partner_id: str | None
) -> list[Any]:
    """An event's own delivery (a batch's carries a body) in ``status``, created in ``[since,
    until)``, for one partner or any that is not removed."""
    conditions = [
        table.c.created_at >= since,
        table.c.created_at < until,
        table.c.status == status,
        table.c.body.is_(None),
        table.c.partner_id.in_(_LIVE_PARTNERS),
    ]
    if partner_id is not None:
        conditions.append(table.c.partner_id == partner_id)
    return conditions


def _carried(body: Any, dialect: str) -> Any:
    """How many events a batch's stored body carries: its members as formed, whether or not an
    earlier replay took some out (or retention pruned them) since."""
    if dialect == "postgresql":
        return func.json_array_length(func.json_extract_path(cast(body, JSON), "events"))
    return func.json_array_length(body, "$.events")


def _whole_batches(members: Callable[[Any], list[Any]], status: DeliveryStatus, dialect: str) -> Select[Any]:
    """The batches in ``status`` that still hold every event their stored body carries, each event
    meeting ``members`` (conditions on a deliveries table): these may go again whole, as the same
    bytes send no event that is not to go again."""
    member, batch = deliveries.alias("member"), deliveries.alias("batch")
    counted = (
        select(member.c.batch_id, func.count().label("events"))
        .where(*members(member), member.c.batch_id.is_not(None))
        .group_by(member.c.batch_id)
        .subquery("counted")
    )
    return (
        select(batch.c.id)
        .join(counted, counted.c.batch_id == batch.c.id)
        .where(batch.c.status == status, counted.c.events == _carried(batch.c.body, dialect))
    )


async def replay(
    conn: AsyncConnection,
    *,
    since: datetime,
    until: datetime,
    status: DeliveryStatus,
    partner_id: str | None,
    now: datetime,
) -> int:
    """Requeue the deliveries in ``status`` created in ``[since, until)``, for one partner or all
    that are not removed; how many: each delivery sent alone, each batch resent whole (once), each
    event taken out of its batch to go in a new one."""
    window = _in_window(deliveries, since=since, until=until, status=status, partner_id=partner_id)
    # The batches whose every event is in the window: these go again whole, the same bytes.
    whole = _whole_batches(
        lambda member: _in_window(member, since=since, until=until, status=status, partner_id=partner_id),
        status,
        conn.dialect.name,
    )
    batch = deliveries.alias("batch")
    alone = await conn.execute(
        update(deliveries).where(*window, deliveries.c.batch_id.is_(None)).values(**requeued(now))
    )
    # The rest of the window's events leave their batch (it also carried events outside the window,
    # which must not go again) and wait for a new one, formed at the next claim.
    parted = await _leave_batches(conn, window, whole, now=now)
    resent = await conn.execute(
        update(deliveries)
        .where(deliveries.c.id.in_(whole), deliveries.c.status == status)
        .values(**requeued(now))
    )
    # The whole batches' events wait in them again: only where the batch was requeued above (on
    # PostgreSQL a batch a worker settled meanwhile keeps its events' status with its own).
    requeued_batch = select(batch.c.id).where(
        batch.c.id == deliveries.c.batch_id, batch.c.status == DeliveryStatus.PENDING
    )
    await conn.execute(
        update(deliveries)
        .where(*window, deliveries.c.batch_id.is_not(None), requeued_batch.exists())
        .values(status=DeliveryStatus.BATCHED, updated_at=now)
    )
    count = int(alone.rowcount) + parted + int(resent.rowcount)
    if count:
        await notify(conn)
    return count


async def _leave_batches(conn: AsyncConnection, events: list[Any], whole: Any, *, now: datetime) -> int:
    """The ``events`` (conditions on deliveries) in a batch but the ``whole`` ones leave it, to wait
    for a new batch of their own, due now; how many. A batch left holding none of its events is
    ``cancelled``: never sent again, as its bytes would send every one of them a second time."""
    parting = and_(*events, deliveries.c.batch_id.is_not(None), deliveries.c.batch_id.not_in(whole))
    left = list((await conn.execute(select(deliveries.c.batch_id).where(parting).distinct())).scalars())
    if not left:
        return 0
    parted = await conn.execute(
        update(deliveries)
        .where(parting)
        .values({**requeued(now), "status": DeliveryStatus.BATCHING, "batch_id": None})
    )
    member = deliveries.alias("member")
    emptied = ~select(member.c.id).where(member.c.batch_id == deliveries.c.id).exists()
    await conn.execute(
        update(deliveries)
        .where(deliveries.c.id.in_(left), emptied)
        .values(status=DeliveryStatus.CANCELLED, claim_token=None, claimed_until=None, updated_at=now)
    )
    return int(parted.rowcount)


class Resent(Enum):
    REQUEUED = "requeued"
    UNKNOWN = "unknown"  # no such delivery
    IN_FLIGHT = "in flight"  # being attempted right now: it settles within its lease
    CANCELLED = "cancelled"  # its partner was removed
    SPLIT = "split"  # a batch some of whose events a replay or retry sent again in another batch
    IN_BATCH = "in a batch"  # it went out in a batch: resend the batch


async def resend(conn: AsyncConnection, delivery_id: str, *, now: datetime) -> Resent:
    """Requeue one delivery whatever its state, but one in flight (sending it again now would put
    two attempts in flight at once), one whose partner was removed, one that went out inside a
    batch (the batch's own delivery is what is resent), or a batch that no longer holds every
    event it carried (a replay or retry sent some again apart: its bytes would send them twice)."""
    row = (
        await conn.execute(
            select(
                deliveries.c.status,
                deliveries.c.claimed_until,
                deliveries.c.batch_id,
                _carried(deliveries.c.body, conn.dialect.name).label("carried"),
            ).where(deliveries.c.id == delivery_id)
        )
    ).first()
    if row is None:
        return Resent.UNKNOWN
    status, claimed_until, batch_id, carried = row
    if carried is not None:  # a batch: its bytes send every event it carried
        held = await conn.scalar(select(func.count()).where(deliveries.c.batch_id == delivery_id))
        if held != carried:
            return Resent.SPLIT
    if status == DeliveryStatus.CANCELLED:
        return Resent.CANCELLED
    if batch_id is not None:
        return Resent.IN_BATCH
    if status == DeliveryStatus.DELIVERING and claimed_until is not None and claimed_until > now:
        return Resent.IN_FLIGHT
    # Guarded by the state read above: a worker that claimed or settled it since wins.
    changed = await conn.execute(
        update(deliveries)
        .where(deliveries.c.id == delivery_id, deliveries.c.status == status)
        .values(**requeued(now))
    )
    if not changed.rowcount:
        return Resent.IN_FLIGHT
    await conn.execute(  # a batch's events wait in it again
        update(deliveries)
        .where(deliveries.c.batch_id == delivery_id)
        .values(status=DeliveryStatus.BATCHED, updated_at=now)
    )
    await notify(conn)
    return Resent.REQUEUED


async def retry_failed(conn: AsyncConnection, partner_id: str, *, now: datetime) -> int:
    """Make the partner's failed deliveries pending again, due now; how many were requeued.

    Each requeued delivery gets one more attempt; if that one fails too it is failed again
    (its schedule was already spent), until the next admin retry. A failed batch that still holds
    every event it was sent with is requeued as one delivery (the same bytes), its members waiting
    in it again, ``batched``. The failed events of a batch a replay has taken some out of leave it
    and wait for a new batch of their own, each counted: its bytes would send the others again.
    """
    failed = and_(deliveries.c.partner_id == partner_id, deliveries.c.status == DeliveryStatus.FAILED)

    def members(table: Any) -> list[Any]:
        failing = [table.c.partner_id == partner_id, table.c.status == DeliveryStatus.FAILED]
        return [*failing, table.c.body.is_(None)]

    whole = (await conn.execute(_whole_batches(members, DeliveryStatus.FAILED, conn.dialect.name))).scalars()
    whole_ids = list(whole)  # read before their members move, which changes what the query finds
    await conn.execute(
        update(deliveries)
        .where(failed, deliveries.c.batch_id.in_(whole_ids))
        .values(status=DeliveryStatus.BATCHED, updated_at=now)
    )
    parted = await _leave_batches(conn, [failed, deliveries.c.body.is_(None)], whole_ids, now=now)
    # Deliveries sent alone, and the whole batches (one a replay split stays failed, or is
    # cancelled once none of its events is left in it).
    result = await conn.execute(
        update(deliveries)
        .where(failed, or_(deliveries.c.body.is_(None), deliveries.c.id.in_(whole_ids)))
        .values(**requeued(now))
    )
    count = int(result.rowcount) + parted
    if count:
        await notify(conn)
    return count
