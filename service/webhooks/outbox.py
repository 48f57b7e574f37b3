"""The durable outbox: published events and one delivery per partner.

``publish`` stores an event and its deliveries in the caller's transaction, so an event is either
fully fanned out or not stored at all. Workers take due deliveries with ``claim.claim_due`` and
log their attempts with ``settle.record``; replays and retries are ``requeue``'s. What the admin
reads of it is ``listing``'s, shown as JSON by ``presenter``.

Delivery states: ``pending`` (waiting, or its partner is paused) -> ``delivering`` (claimed) ->
``delivered`` | ``pending`` (retry scheduled) | ``failed`` (schedule spent; an admin retry makes it
``pending`` again). Batched kinds wait as ``batching`` until ``service.webhooks.batching`` forms
their batch, a delivery row of its own with a fixed ``body``; its members follow it when it settles.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from service.db.tables import deliveries, events, partners
from service.events import EventPayload, dedupe_key, dump_payload
from service.exceptions import FieldError, StateConflict
from service.ids import new_id
from service.states import DeliveryStatus, PartnerStatus
from service.webhooks.batching import BatchPolicy, waits_until
from service.webhooks.notify import notify

log = logging.getLogger(__name__)


def new_delivery_id() -> str:
    return new_id("dlv")


def encode_payload(payload: EventPayload) -> str:
    """The exact JSON text every delivery of the event sends (compact, UTF-8)."""
    return json.dumps(dump_payload(payload), ensure_ascii=False, separators=(",", ":"))


# --- publishing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    event_id: str
    deliveries: int  # deliveries created by this publish; 0 for a repeat
    duplicate: bool


# Built once: a statement built per publish paid for its construction and its cache key each time.
_STORE_EVENT = {
    name: dialect.insert(events).on_conflict_do_nothing().returning(events.c.id)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_NEW_DELIVERIES = deliveries.insert()
_DELIVERING_PARTNERS = select(partners.c.id, partners.c.events, partners.c.batch).where(
    partners.c.status.in_((PartnerStatus.ACTIVE, PartnerStatus.PAUSED, PartnerStatus.DISABLED))
)


async def publish(conn: AsyncConnection, payload: EventPayload, *, now: datetime) -> Published:
    """Store the event and one delivery per interested partner, in the caller's transaction.

    A dedupe key seen before answers with the first event's id and creates nothing. An eventId
    already used by an event with another dedupe key is a ``StateConflict``: consumers dedupe on
    eventId, so two different events must never share one.
    """
    key = dedupe_key(payload)
    inserted = await conn.execute(
        _STORE_EVENT[conn.dialect.name],
        {
            "id": payload.eventId,
            "kind": payload.KIND,
            "dedupe_key": key,
            "payload": encode_payload(payload),
            "occurred_at": datetime.fromisoformat(payload.occurredAt),
            "created_at": now,
        },
    )
    if inserted.first() is None:
        first = await conn.scalar(select(events.c.id).where(events.c.dedupe_key == key))
        if first is None:
            raise StateConflict(
                "This eventId already belongs to another event.",
                errors=[FieldError("eventId", "conflict", "Use a new eventId for a different event.")],
            )
        return Published(event_id=first, deliveries=0, duplicate=True)

    rows = await conn.execute(_DELIVERING_PARTNERS)
    targets: list[tuple[str, DeliveryStatus, datetime]] = []
    for partner_id, kinds, batch in rows:
        if kinds is not None and payload.KIND not in json.loads(kinds):
            continue
        policy = BatchPolicy.loads(batch)
        if policy is not None and payload.KIND in policy.events:
            # Waits for its batch; due (forces the batch out) once it has waited maxWaitSeconds.
            targets.append((partner_id, DeliveryStatus.BATCHING, waits_until(policy, now)))
        else:
            targets.append((partner_id, DeliveryStatus.PENDING, now))
    if targets:
        await conn.execute(
            _NEW_DELIVERIES,
            [
                {
                    "id": new_delivery_id(),
                    "event_id": payload.eventId,
                    "partner_id": partner_id,
                    "status": status,
                    "attempts": 0,
                    "next_attempt_at": due,
                    "created_at": now,
                    "updated_at": now,
                }
                for partner_id, status, due in targets
            ],
        )
        await notify(conn)
    return Published(event_id=payload.eventId, deliveries=len(targets), duplicate=False)


async def publish_event(engine: AsyncEngine, payload: EventPayload, *, now: datetime) -> Published:
    """Store an event already parsed (``events.parse_event``) and its deliveries, in one transaction."""
    async with engine.begin() as conn:
        return await publish(conn, payload, now=now)
