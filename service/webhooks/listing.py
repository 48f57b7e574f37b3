"""What the admin reads of the outbox: the deliveries a listing shows, their attempts, and the size of
each batch among them.

Every answer is plain typed rows; their JSON is ``service.webhooks.presenter``'s. A listing is
three reads on one connection (``deliveries``, then ``attempts`` and ``batch_sizes`` of what it
found), composed by ``operations.Operations.list_deliveries``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db import tables
from service.states import AttemptOutcome, DeliveryStatus


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """One delivery as a listing shows it, with its event's kind."""

    id: str
    event_id: str
    event: str  # the event's kind
    partner_id: str
    status: DeliveryStatus
    next_attempt_at: datetime
    created_at: datetime
    delivered_at: datetime | None
    batch_id: str | None  # a member of a batch: the batch's own delivery
    batch: bool  # a batch's own delivery (it carries the batch's body)


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One logged attempt of a delivery."""

    delivery_id: str
    attempt: int  # 1 for the first try
    started_at: datetime
    duration_ms: int
    status_code: int | None  # None when no HTTP answer came
    error_class: str | None
    response_excerpt: str | None
    outcome: AttemptOutcome


async def deliveries(
    conn: AsyncConnection,
    *,
    partner_id: str | None = None,
    status: DeliveryStatus | None = None,
    event_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[DeliveryRow]:
    """One page of deliveries, newest first (ties by id, descending), filtered as asked."""
    d = tables.deliveries
    stmt = (
        select(
            d.c.id,
            d.c.event_id,
            tables.events.c.kind,
            d.c.partner_id,
            d.c.status,
            d.c.next_attempt_at,
            d.c.created_at,
            d.c.delivered_at,
            d.c.batch_id,
            d.c.body.is_not(None).label("batch"),
        )
        .join(tables.events, tables.events.c.id == d.c.event_id)
        .order_by(d.c.created_at.desc(), d.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    if partner_id is not None:
        stmt = stmt.where(d.c.partner_id == partner_id)
    if status is not None:
        stmt = stmt.where(d.c.status == status)
    if event_id is not None:
        stmt = stmt.where(d.c.event_id == event_id)
    return [
        DeliveryRow(
            id=row.id,
            event_id=row.event_id,
            event=row.kind,
            partner_id=row.partner_id,
            status=DeliveryStatus(row.status),
            next_attempt_at=row.next_attempt_at,
            created_at=row.created_at,
            delivered_at=row.delivered_at,
            batch_id=row.batch_id,
            batch=bool(row.batch),
        )
        for row in await conn.execute(stmt)
    ]


async def attempts(conn: AsyncConnection, delivery_ids: Sequence[str]) -> dict[str, list[AttemptRow]]:
    """The attempts of each of these deliveries, in order; every id present ([] when none)."""
    found: dict[str, list[AttemptRow]] = {delivery_id: [] for delivery_id in delivery_ids}
    if not found:
        return found
    a = tables.delivery_attempts
    logged = await conn.execute(
        select(
            a.c.delivery_id,
            a.c.attempt,
            a.c.started_at,
            a.c.duration_ms,
            a.c.status_code,
            a.c.error_class,
            a.c.response_excerpt,
            a.c.outcome,
        )
        .where(a.c.delivery_id.in_(list(found)))
        .order_by(a.c.delivery_id, a.c.attempt, a.c.id)
    )
    for row in logged:
        found[row.delivery_id].append(
            AttemptRow(
                delivery_id=row.delivery_id,
                attempt=row.attempt,
                started_at=row.started_at,
                duration_ms=row.duration_ms,
                status_code=row.status_code,
                error_class=row.error_class,
                response_excerpt=row.response_excerpt,
                outcome=AttemptOutcome(row.outcome),
            )
        )
    return found


async def batch_sizes(conn: AsyncConnection, batch_ids: Sequence[str]) -> dict[str, int]:
    """How many events each of these batches' own deliveries carries (its members); a batch with
    no member left is absent."""
    if not batch_ids:
        return {}
    d = tables.deliveries
    counted = await conn.execute(
        select(d.c.batch_id, func.count()).where(d.c.batch_id.in_(list(batch_ids))).group_by(d.c.batch_id)
    )
    return {batch_id: int(count) for batch_id, count in counted}
