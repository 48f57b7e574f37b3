"""The admin's delivery documents, shaped from rows without a database: members in a fixed order,
timestamps in the one format, nextAttemptAt only while a delivery waits, batchSize on a batch."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from service.states import AttemptOutcome, DeliveryStatus
from service.webhooks import presenter
from service.webhooks.listing import AttemptRow, DeliveryRow

T = datetime(2026, 6, 29, 12, 0, 0, 250000, tzinfo=UTC)
STAMP = "2026-06-29T12:00:00.250000Z"
LATER = "2026-06-29T12:05:00.250000Z"


def row(status: DeliveryStatus, **members: Any) -> DeliveryRow:
    fields: dict[str, Any] = {
        "id": "dlv_1",
        "event_id": "evt_1",
        "event": "room.claimed",
        "partner_id": "ptn_a",
        "status": status,
        "next_attempt_at": T + timedelta(minutes=5),
        "created_at": T,
        "delivered_at": None,
        "batch_id": None,
        "batch": False,
    }
    return DeliveryRow(**(fields | members))


def document(status: str, **members: Any) -> dict[str, Any]:
    return {
        "id": "dlv_1",
        "eventId": "evt_1",
        "event": "room.claimed",
        "partnerId": "ptn_a",
        "status": status,
        "createdAt": STAMP,
        "nextAttemptAt": None,
        "deliveredAt": None,
        "batchSize": None,
        "batchId": None,
        "attempts": [],
    } | members


SERVER_ERROR = AttemptRow(
    delivery_id="dlv_1",
    attempt=1,
    started_at=T,
    duration_ms=120,
    status_code=503,
    error_class="http_503",
    response_excerpt="busy",
    outcome=AttemptOutcome.RETRY,
)
ACCEPTED = AttemptRow(
    delivery_id="dlv_1",
    attempt=2,
    started_at=T + timedelta(minutes=5),
    duration_ms=40,
    status_code=200,
    error_class=None,
    response_excerpt="ok",
    outcome=AttemptOutcome.DELIVERED,
)
SERVER_ERROR_VIEW = {
    "attempt": 1,
    "startedAt": STAMP,
    "durationMs": 120,
    "statusCode": 503,
    "errorClass": "http_503",
    "responseExcerpt": "busy",
    "outcome": "retry",
}
ACCEPTED_VIEW = {
    "attempt": 2,
    "startedAt": LATER,
    "durationMs": 40,
    "statusCode": 200,
    "errorClass": None,
    "responseExcerpt": "ok",
    "outcome": "delivered",
}

# (delivery row, its attempts, its batch's size as counted) -> the document the admin sees.
CASES = {
    "pending, never tried: when it is next tried": (
        row(DeliveryStatus.PENDING),
        [],
        None,
        document("pending", nextAttemptAt=LATER),
    ),
    "pending after a failed attempt": (
        row(DeliveryStatus.PENDING),
        [SERVER_ERROR],
        None,
        document("pending", nextAttemptAt=LATER, attempts=[SERVER_ERROR_VIEW]),
    ),
    "delivered: no next attempt, when it was delivered, attempts in order": (
        row(DeliveryStatus.DELIVERED, delivered_at=T + timedelta(minutes=5)),
        [SERVER_ERROR, ACCEPTED],
        None,
        document("delivered", deliveredAt=LATER, attempts=[SERVER_ERROR_VIEW, ACCEPTED_VIEW]),
    ),
    "failed: the schedule spent, no next attempt": (
        row(DeliveryStatus.FAILED),
        [SERVER_ERROR],
        None,
        document("failed", attempts=[SERVER_ERROR_VIEW]),
    ),
    "delivering: claimed, no next attempt shown": (
        row(DeliveryStatus.DELIVERING),
        [],
        None,
        document("delivering"),
    ),
    "batching: when its batch forms at the latest": (
        row(DeliveryStatus.BATCHING),
        [],
        None,
        document("batching", nextAttemptAt=LATER),
    ),
    "a batch's own delivery: how many events it carries": (
        row(DeliveryStatus.PENDING, id="dlv_batch", batch=True),
        [SERVER_ERROR],
        3,
        document("pending", id="dlv_batch", nextAttemptAt=LATER, batchSize=3, attempts=[SERVER_ERROR_VIEW]),
    ),
    "a delivered batch whose members were pruned: no size": (
        row(DeliveryStatus.DELIVERED, id="dlv_batch", batch=True, delivered_at=T),
        [ACCEPTED],
        None,
        document("delivered", id="dlv_batch", deliveredAt=STAMP, attempts=[ACCEPTED_VIEW]),
    ),
    "a member of a batch: the batch's delivery id, no attempts of its own": (
        row(DeliveryStatus.BATCHED, id="dlv_member", batch_id="dlv_batch"),
        [],
        None,
        document("batched", id="dlv_member", batchId="dlv_batch"),
    ),
    "cancelled: its partner was removed": (
        row(DeliveryStatus.CANCELLED),
        [],
        None,
        document("cancelled"),
    ),
}


@pytest.mark.parametrize(("given", "attempts", "size", "expected"), CASES.values(), ids=list(CASES))
def test_a_delivery_row_becomes_its_document(
    given: DeliveryRow, attempts: list[AttemptRow], size: int | None, expected: dict[str, Any]
) -> None:
    shown = presenter.delivery(given, attempts, size)
    assert shown == expected
    assert list(shown) == list(expected)  # the members in their order, as clients read them
    assert json.dumps(shown) == json.dumps(expected)


def test_a_size_is_shown_only_on_a_batch() -> None:
    """A count given for a delivery that carries no body is not its size."""
    assert presenter.delivery(row(DeliveryStatus.PENDING), [], 4)["batchSize"] is None


def test_an_attempt_becomes_its_document() -> None:
    assert presenter.attempt(SERVER_ERROR) == SERVER_ERROR_VIEW
    assert list(presenter.attempt(ACCEPTED)) == list(ACCEPTED_VIEW)


def test_times_are_written_in_utc_whatever_their_offset() -> None:
    east = T.astimezone(timezone(timedelta(hours=2)))
    shown = presenter.delivery(row(DeliveryStatus.DELIVERED, created_at=east, delivered_at=east), [], None)
    assert (shown["createdAt"], shown["deliveredAt"]) == (STAMP, STAMP)
    assert presenter.timestamp(None) is None


def test_a_page_keeps_the_rows_order_with_each_ones_attempts_and_size() -> None:
    """``presenter.deliveries`` over the three reads of a listing: a delivery with no attempts
    listed shows none, a batch absent from the sizes shows no size."""
    batch = row(DeliveryStatus.PENDING, id="dlv_batch", batch=True)
    member = row(DeliveryStatus.BATCHED, id="dlv_member", batch_id="dlv_batch")
    delivered = row(DeliveryStatus.DELIVERED, id="dlv_1", delivered_at=T)
    alone = replace(batch, id="dlv_empty")
    shown = presenter.deliveries(
        [batch, member, delivered, alone],
        {"dlv_batch": [SERVER_ERROR], "dlv_member": [], "dlv_1": [ACCEPTED]},
        {"dlv_batch": 2},
    )
    assert [(d["id"], d["batchSize"], d["batchId"], len(d["attempts"])) for d in shown] == [
        ("dlv_batch", 2, None, 1),
        ("dlv_member", None, "dlv_batch", 0),
        ("dlv_1", None, None, 1),
        ("dlv_empty", None, None, 0),
    ]
    assert presenter.deliveries([], {}, {}) == []
