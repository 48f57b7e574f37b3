"""Where each partner stands now, read for the metrics scrape: status, circuit, stored failures.

The same in every process and across restarts, because it is read from the database when metrics
are scraped (like the outbox gauges of ``service.webhooks.stats``), never counted in memory. The
failed deliveries are counted through ``ix_deliveries_failed``, a partial index holding only the
``failed`` rows (an admin retry or the retention empties it), so the count never walks the
delivered history.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.tables import FAILED as FAILED_ROWS
from service.db.tables import deliveries, partners
from service.states import DeliveryStatus, PartnerStatus


class Standing(NamedTuple):
    """One partner as the gauges show it."""

    partner_id: str
    name: str
    status: PartnerStatus
    circuit_open: bool  # open or half-open: its deliveries are held until a probe succeeds
    failed: int  # deliveries stored `failed` (the schedule spent, waiting for an admin)


_PARTNERS = (
    select(partners.c.id, partners.c.name, partners.c.status, partners.c.circuit_open_until)
    .where(partners.c.status != PartnerStatus.REMOVED)
    .order_by(partners.c.id)
)
# The filter is the partial index's own predicate, word for word, so both planners use it.
FAILED_COUNT = (
    select(deliveries.c.partner_id, func.count()).where(FAILED_ROWS).group_by(deliveries.c.partner_id)
)


async def standings(conn: AsyncConnection) -> list[Standing]:
    """Every partner not removed, by id."""
    counted = await conn.execute(FAILED_COUNT)
    failed: dict[str, int] = {partner_id: int(count) for partner_id, count in counted}
    return [
        Standing(
            row.id,
            row.name,
            PartnerStatus(row.status),
            row.circuit_open_until is not None,
            failed.get(row.id, 0),
        )
        for row in await conn.execute(_PARTNERS)
    ]


# Active partners whose circuit is open or half-open: what they have waiting is held by it.
_HELD = select(partners.c.id).where(
    partners.c.status == PartnerStatus.ACTIVE, partners.c.circuit_open_until.is_not(None)
)
CIRCUIT = "circuit"


async def mark_held(conn: AsyncConnection, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``heldBy: "circuit"`` to the listed deliveries (admin documents) that wait on an open
    circuit: pending, for an active partner whose circuit is open or half-open (only its probe goes
    out until one succeeds). Others are left as they are."""
    if not any(document["status"] == DeliveryStatus.PENDING for document in listed):
        return listed
    held = set(await conn.scalars(_HELD))
    for document in listed:
        if document["status"] == DeliveryStatus.PENDING and document["partnerId"] in held:
            document["heldBy"] = CIRCUIT
    return listed
