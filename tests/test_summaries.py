"""The console's reads (service.summaries_ops over service.db.summaries), on SQLite and PostgreSQL:
pages by key return every row once, newest first, ties included; counts match the rows."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert

from service.db.engine import create_engine
from service.db.summaries import Key
from service.db.tables import deliveries, delivery_attempts, events, partners, registrations
from service.exceptions import InvalidInput
from service.summaries_ops import Summaries

NOW = datetime(2026, 6, 29, 12, 30, tzinfo=UTC)


async def _fill(url: str) -> None:
    engine = create_engine(url)
    # Three registrations share each moment, so pages must break ties by id.
    moments = [NOW - timedelta(hours=hours) for hours in (0, 0, 0, 5, 5, 30, 30, 30, 200, 400)]
    rows = [
        {
            "email": f"r{number}@example.com",
            "email_key": f"r{number}@example.com",
            "intent": ("claim", "member", "arcade")[number % 3],
            "project": "Moon" if number % 2 else "Sun",
            "message": None,
            "created_at": moment,
            "updated_at": moment,
        }
        for number, moment in enumerate(moments)
    ]
    partner = {"name": "P", "url": "http://127.0.0.1:9/", "status": "active", "created_at": NOW, "updated_at": NOW}
    async with engine.begin() as conn:
        await conn.execute(insert(registrations), rows)
        await conn.execute(insert(partners), [{"id": "ptn_a", **partner}, {"id": "ptn_b", **partner}])
        await conn.execute(
            insert(events),
            [
                {"id": f"evt_{n}", "kind": "platform.milestone", "dedupe_key": f"k{n}", "payload": "{}",
                 "occurred_at": NOW, "created_at": NOW}
                for n in range(4)
            ],
        )
        await conn.execute(
            insert(deliveries),
            [
                {"id": f"dlv_{n:02d}", "event_id": f"evt_{n % 4}", "partner_id": ("ptn_a", "ptn_b")[n % 2],
                 "status": ("delivered", "failed", "pending")[n % 3], "attempts": 1,
                 "next_attempt_at": NOW, "created_at": NOW - timedelta(minutes=n // 3),
                 "updated_at": NOW - timedelta(hours=30 if n == 10 else 0)}  # dlv_10 failed a day ago
                for n in range(12)
            ],
        )
        await conn.execute(
            insert(delivery_attempts),
            [
                {"delivery_id": "dlv_00", "event_id": "evt_0", "event": "platform.milestone", "partner_id": "ptn_a",
                 "attempt": n + 1, "started_at": NOW - timedelta(hours=hours), "duration_ms": 5,
                 "status_code": 200 if outcome == "delivered" else 500, "error_class": None,
                 "response_excerpt": None, "outcome": outcome}
                for n, (hours, outcome) in enumerate([(0, "delivered"), (0, "retry"), (2, "failed"), (30, "failed")])
            ],
        )
    await engine.dispose()


@pytest.fixture
async def reads(database_url: str) -> Any:
    await _fill(database_url)
    engine = create_engine(database_url)
    yield Summaries(engine, lambda: NOW)
    await engine.dispose()


async def _all_pages(read: Any, args: dict[str, str], limit: int) -> list[list[dict[str, Any]]]:
    pages = []
    while True:
        page = await read(args, limit=limit)
        pages.append(page.rows)
        if page.next is None:
            return pages
        args = {**args, "after": page.next}


async def test_registration_pages_hold_every_row_once_newest_first(reads: Summaries) -> None:
    """Pages of 3 over ten rows with ties: 4 pages, each row once, in (created_at, id) descending order."""
    pages = await _all_pages(reads.registrations, {}, 3)
    rows = [row for page in pages for row in page]
    assert [len(page) for page in pages] == [3, 3, 3, 1]
    assert rows == sorted(rows, key=lambda row: (row["created_at"], row["id"]), reverse=True)
    assert len({row["id"] for row in rows}) == 10


async def test_registration_pages_filter_by_intent_and_search(reads: Summaries) -> None:
    """``intent`` and ``q`` (the start of an address, any case) narrow the pages."""
    claims = [row for page in await _all_pages(reads.registrations, {"intent": "claim"}, 2) for row in page]
    ones = [row for page in await _all_pages(reads.registrations, {"q": "R1"}, 2) for row in page]
    assert sorted(row["email"] for row in claims) == ["r0@example.com", "r3@example.com", "r6@example.com", "r9@example.com"]
    assert [row["email"] for row in ones] == ["r1@example.com"]
    for text in ("%", "r_", "r%", "o'brien\\"):  # searched as typed, never as a pattern or SQL
        assert (await reads.registrations({"q": text})).rows == []


async def test_delivery_pages_hold_every_row_once_with_filters(reads: Summaries) -> None:
    """Deliveries page by key too, for every filter; the filters are ANDed."""
    everything = [row["id"] for page in await _all_pages(reads.deliveries, {}, 5) for row in page]
    mine = [row["id"] for page in await _all_pages(reads.deliveries, {"partner": "ptn_a"}, 2) for row in page]
    failed = [row["id"] for page in await _all_pages(reads.deliveries, {"status": "failed"}, 1) for row in page]
    # Newer minutes first; within a minute, the larger id first.
    assert everything == [f"dlv_{n:02d}" for group in range(4) for n in (3 * group + 2, 3 * group + 1, 3 * group)]
    assert sorted(mine) == [f"dlv_{n:02d}" for n in range(0, 12, 2)]
    assert sorted(failed) == [f"dlv_{n:02d}" for n in range(1, 12, 3)]


async def test_overview_counts(reads: Summaries) -> None:
    """Per intent: all, last 7 days, last 24 hours; a 14-day daily series; deliveries of the day by status."""
    overview = await reads.overview()
    assert overview["registrations"] == {"claim": (4, 3, 2), "member": (3, 3, 2), "arcade": (3, 2, 1)}
    daily = dict(overview["daily"]["claim"])
    assert len(daily) == 14 and sum(daily.values()) == 3
    assert daily[date(2026, 6, 29)] == 2 and daily[date(2026, 6, 28)] == 1
    assert overview["deliveries"] == {"delivered": 4, "failed": 4, "pending": 4}
    # Deliveries failed now that failed within the day, not attempts: dlv_00's failed attempts
    # are history (it was delivered since), dlv_10 failed 30 hours ago.
    assert overview["failed"] == {"ptn_a": 1, "ptn_b": 2}


async def test_partner_activity_by_hour(reads: Summaries) -> None:
    """The last 24 hours of one partner's attempts, hour by hour, and the share delivered."""
    activity = await reads.partner_activity("ptn_a")
    hours = dict(activity["hours"])
    assert len(hours) == 24
    assert hours[datetime(2026, 6, 29, 12, tzinfo=UTC)] == {"delivered": 1, "retry": 1, "failed": 0, "paused": 0}
    assert hours[datetime(2026, 6, 29, 10, tzinfo=UTC)]["failed"] == 1
    assert (activity["attempts"], activity["successRate"]) == (3, 1 / 3)


@pytest.mark.parametrize(
    "args",
    [
        {"after": "garbage"},
        {"status": "lost"},
        {"sort": "id"},
        {"after": "2026-06-29T12:00:00~"},
        # What no database stores: an id with a NUL or a lone surrogate, a moment that is year 0 or
        # year 10000 once in UTC. PostgreSQL's driver refused each with an error (a 500).
        {"after": "2026-06-29T12:00:00+00:00~dlv\x0001"},
        {"after": "2026-06-29T12:00:00+00:00~dlv\ud80001"},
        {"after": "0001-01-01T00:00:00+05:00~dlv_01"},
        {"after": "9999-12-31T23:59:59-05:00~dlv_01"},
    ],
)
async def test_a_hand_edited_listing_link_is_refused(reads: Summaries, args: dict[str, str]) -> None:
    """An unknown parameter, status or page key is InvalidInput naming it, never a guess."""
    with pytest.raises(InvalidInput) as raised:
        await reads.deliveries(args)
    assert [error.field for error in raised.value.field_errors] == [next(iter(args))]


@pytest.mark.parametrize(
    "row_id", ["99999999999999999999", "-99999999999999999999", "9" * 45, str(2**63), "0", "-1", "x1", "\uff11"]
)
async def test_a_registrations_page_key_holds_a_row_id_the_table_can(reads: Summaries, row_id: str) -> None:
    """A registration's id is a positive 64-bit integer: a page key with any other is a hand-edited
    link, refused as one, not an overflow in the driver (500)."""
    with pytest.raises(InvalidInput) as raised:
        await reads.registrations({"after": f"2026-06-29T12:00:00+00:00~{row_id}"})
    assert [error.field for error in raised.value.field_errors] == ["after"]


async def test_a_registrations_page_key_at_the_largest_row_id_reads(reads: Summaries) -> None:
    page = await reads.registrations({"after": f"2999-01-01T00:00:00+00:00~{2**63 - 1}"})
    assert page.rows  # every registration is before it


def test_a_page_key_reads_back_what_it_wrote() -> None:
    """``Key.token`` and ``Key.parse`` agree; a time without an offset is no key."""
    key = Key(NOW, "dlv_01")
    assert Key.parse(key.token()) == key
    assert Key.parse("2026-06-29T12:00:00~dlv_01") is None
