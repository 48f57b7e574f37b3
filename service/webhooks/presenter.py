"""The admin's JSON of deliveries and their attempts, shaped from ``service.webhooks.listing``'s rows.

Pure functions: no database, no clock. ``GET /admin/deliveries`` and the ``deliveries list``
command answer with these documents: camelCase members in a fixed order, timestamps as
``service.clock.format_timestamp`` writes them, ``null`` for what a delivery does not have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from service.clock import format_timestamp
from service.states import DeliveryStatus
from service.webhooks.listing import AttemptRow, DeliveryRow

Document = dict[str, Any]
# The states whose next_attempt_at means something to an operator: when a pending delivery is
# next tried, and when a batching one's batch forms at the latest.
SCHEDULED = (DeliveryStatus.PENDING, DeliveryStatus.BATCHING)


def timestamp(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


def attempt(row: AttemptRow) -> Document:
    """One logged attempt."""
    return {
        "attempt": row.attempt,
        "startedAt": timestamp(row.started_at),
        "durationMs": row.duration_ms,
        "statusCode": row.status_code,
        "errorClass": row.error_class,
        "responseExcerpt": row.response_excerpt,
        "outcome": row.outcome,
    }


def delivery(row: DeliveryRow, attempts: Sequence[AttemptRow], batch_size: int | None) -> Document:
    """One delivery with its attempts in order. ``batch_size`` is shown only on a batch's own
    delivery (how many events it carries; its eventId is its oldest's). A member of a batch shows
    the batch's delivery id as ``batchId``: the batch's attempts are its attempts."""
    return {
        "id": row.id,
        "eventId": row.event_id,
        "event": row.event,
        "partnerId": row.partner_id,
        "status": row.status,
        "createdAt": timestamp(row.created_at),
        "nextAttemptAt": timestamp(row.next_attempt_at) if row.status in SCHEDULED else None,
        "deliveredAt": timestamp(row.delivered_at),
        "batchSize": batch_size if row.batch else None,
        "batchId": row.batch_id,
        "attempts": [attempt(logged) for logged in attempts],
    }


def deliveries(
    rows: Sequence[DeliveryRow],
    attempts: Mapping[str, Sequence[AttemptRow]],
    batch_sizes: Mapping[str, int],
) -> list[Document]:
    """A listing's page, in the rows' order: ``listing.deliveries`` with ``listing.attempts`` and
    ``listing.batch_sizes`` of those rows."""
    return [delivery(row, attempts.get(row.id, ()), batch_sizes.get(row.id)) for row in rows]
