"""Rooms the service has heard of: the ``roomUrl`` of published events, for sitemap.xml."""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.tables import events
from service.events import EVENT_MODELS

# Kinds whose payload names a room; derived from the models, so a new kind is picked up unasked.
ROOM_KINDS = tuple(kind for kind, model in EVENT_MODELS.items() if "roomUrl" in model.model_fields)


async def known_rooms(conn: AsyncConnection, *, since: datetime | None = None) -> list[tuple[str, datetime]]:
    """Each distinct ``roomUrl`` with the latest ``occurred_at`` of its events, newest first.

    ``since`` limits the scan to events stored at or after that time (``created_at``), for
    callers that merge increments into what they already know.
    """
    query = select(events.c.payload, events.c.occurred_at).where(events.c.kind.in_(ROOM_KINDS))
    if since is not None:
        query = query.where(events.c.created_at >= since)
    latest: dict[str, datetime] = {}
    result = await conn.stream(query)
    async for payload, occurred_at in result:
        room_url = room_of(payload)
        if room_url is not None and (room_url not in latest or occurred_at > latest[room_url]):
            latest[room_url] = occurred_at
    return sorted(latest.items(), key=lambda room: (-room[1].timestamp(), room[0]))


def room_of(payload: str) -> str | None:
    """The ``roomUrl`` an event's payload names, or None.

    The payload is JSON text (the exact body deliveries send); it is read here rather than with
    each database's own JSON functions, so SQLite and PostgreSQL share one query.
    """
    try:
        room_url = json.loads(payload).get("roomUrl")
    except (ValueError, AttributeError):
        return None
    return room_url if isinstance(room_url, str) and room_url else None


async def latest_event_time(conn: AsyncConnection) -> datetime | None:
    """When the newest stored event was stored (``created_at``), or None with no events."""
    value: datetime | None = await conn.scalar(select(func.max(events.c.created_at)))
    return value
