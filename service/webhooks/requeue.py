"""Sending deliveries again: at an admin's request a window of them (replay), one (resend) or a
partner's failed ones (retry_failed); and a claim handed back unsent (``claim.release``).

Each makes deliveries ``pending`` and due now (``requeued``), with their delivery id, body and
attempt count kept:
the next attempt is numbered after the last one logged, and the partner sees the same
``x-service-delivery`` id (``webhook-id``) as before, so a receiver that deduplicates by it can.
A partner that was removed is never sent to again: its cancelled deliveries stay cancelled. A
batch is sent again as a whole (its own delivery, the same bytes); the events in it wait in it
again (``batched``) and are never requeued one by one.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from sqlalchemy import and_, select, update
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
    that are not removed; how many."""
    conditions = [
        deliveries.c.created_at >= since,
        deliveries.c.created_at < until,
        deliveries.c.status == status,
        deliveries.c.partner_id.in_(_LIVE_PARTNERS),
    ]
    if partner_id is not None:
        conditions.append(deliveries.c.partner_id == partner_id)
    batches = select(deliveries.c.id).where(*conditions, deliveries.c.body.is_not(None))
    await conn.execute(
        update(deliveries)
        .where(deliveries.c.batch_id.in_(batches.scalar_subquery()))
        .values(status=DeliveryStatus.BATCHED, updated_at=now)
    )
    result = await conn.execute(
        update(deliveries).where(*conditions, deliveries.c.batch_id.is_(None)).values(**requeued(now))
    )
    if result.rowcount:
        await notify(conn)
    return int(result.rowcount)


class Resent(Enum):
    REQUEUED = "requeued"
    UNKNOWN = "unknown"  # no such delivery
    IN_FLIGHT = "in flight"  # being attempted right now: it settles within its lease
    CANCELLED = "cancelled"  # its partner was removed
    IN_BATCH = "in a batch"  # it went out in a batch: resend the batch


async def resend(conn: AsyncConnection, delivery_id: str, *, now: datetime) -> Resent:
    """Requeue one delivery whatever its state, but one in flight (sending it again now would put
    two attempts in flight at once), one whose partner was removed, or one that went out inside a
    batch (the batch's own delivery is what is resent)."""
    row = (
        await conn.execute(
            select(deliveries.c.status, deliveries.c.claimed_until, deliveries.c.batch_id).where(
                deliveries.c.id == delivery_id
            )
        )
    ).first()
    if row is None:
        return Resent.UNKNOWN
    status, claimed_until, batch_id = row
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
    (its schedule was already spent), until the next admin retry. A failed batch is requeued as
    one delivery (the same bytes); its members wait in it again, ``batched``.
    """
    failed = and_(deliveries.c.partner_id == partner_id, deliveries.c.status == DeliveryStatus.FAILED)
    await conn.execute(
        update(deliveries)
        .where(failed, deliveries.c.batch_id.is_not(None))
        .values(status=DeliveryStatus.BATCHED, updated_at=now)
    )
    result = await conn.execute(update(deliveries).where(failed).values(**requeued(now)))
    if result.rowcount:
        await notify(conn)
    return int(result.rowcount)
