"""Notebooks 03 and 04 on a tiny database: the figures hold for a day of data, one batch and a recovered partner.

The database is migrated by the service, as a SQLite file and on PostgreSQL: three registrations on one day;
a partner that received one batch of three events; a partner whose endpoint failed every attempt
last week and has answered every one in the past day.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient
from sqlalchemy import Connection, insert

from analytics import charts, deliveries, load, waitlist
from service.db import tables
from service.db.engine import create_engine as create_async_engine

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)
BATCHER, RECOVERED = "ptn_batcher", "ptn_recovered"
FAILED_LAST_WEEK = 6  # attempts, six days ago, all refused with 503
HEALTHY_TODAY = 4  # attempts in the past day, all answered 2xx


def _registrations() -> list[dict[str, Any]]:
    rows = [
        ("ann@example.com", "claim", "MoonFrog"),
        ("bob@example.com", "claim", "moonfrog "),
        ("cat@example.com", "member", "MoonFrog"),
    ]
    return [
        {
            "email": email,
            "email_key": email,
            "intent": intent,
            "project": project,
            "message": None,
            "created_at": NOW - timedelta(hours=3 - hour),
            "updated_at": NOW - timedelta(hours=3 - hour),
        }
        for hour, (email, intent, project) in enumerate(rows)
    ]


def _partner(partner_id: str, name: str) -> dict[str, Any]:
    return {
        "id": partner_id,
        "name": name,
        "url": f"https://{partner_id}.test/hook",
        "status": "active",
        "secret": "whsec_c2VjcmV0",
        "created_at": NOW - timedelta(days=10),
        "updated_at": NOW - timedelta(days=10),
    }


def _event(number: int, kind: str, at: datetime) -> dict[str, Any]:
    return {
        "id": f"evt_{number}",
        "kind": kind,
        "dedupe_key": f"k{number}",
        "payload": "{}",
        "occurred_at": at,
        "created_at": at,
    }


def _delivery(delivery_id: str, event: str, partner: str, at: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "id": delivery_id,
        "event_id": event,
        "partner_id": partner,
        "status": "delivered",
        "attempts": 0,
        "next_attempt_at": at,
        "created_at": at,
        "updated_at": at,
        "delivered_at": at,
        "batch_id": None,
        "body": None,
        **extra,
    }


def _attempt(
    delivery_id: str, event: str, partner: str, number: int, at: datetime, ok: bool
) -> dict[str, Any]:
    return {
        "delivery_id": delivery_id,
        "event_id": event,
        "event": "room.trending" if partner == BATCHER else "room.claimed",
        "partner_id": partner,
        "attempt": number,
        "started_at": at,
        "duration_ms": 12,
        "status_code": 200 if ok else 503,
        "error_class": None if ok else "http_503",
        "response_excerpt": None,
        "outcome": "delivered" if ok else "retry",
    }


def fill_tiny(conn: Connection, events: list[Any], log: list[Any], attempts: list[Any]) -> None:
    conn.execute(insert(tables.registrations), _registrations())
    conn.execute(insert(tables.partners), [_partner(BATCHER, "Batcher"), _partner(RECOVERED, "Recovered")])
    conn.execute(insert(tables.events), events)
    conn.execute(insert(tables.deliveries), log)
    conn.execute(insert(tables.delivery_attempts), attempts)


def tiny_rows() -> tuple[list[Any], list[Any], list[Any]]:
    """Events, deliveries and attempts of the tiny database."""
    batch_at = NOW - timedelta(hours=2)
    events = [_event(n, "room.trending", batch_at) for n in range(3)]
    log = [_delivery(f"dlv_m{n}", f"evt_{n}", BATCHER, batch_at, batch_id="dlv_batch") for n in range(3)]
    log.append(_delivery("dlv_batch", "evt_0", BATCHER, batch_at, attempts=1, body='{"batch": true}'))
    attempts = [_attempt("dlv_batch", "evt_0", BATCHER, 1, batch_at, True)]
    for n in range(FAILED_LAST_WEEK + HEALTHY_TODAY):
        old = n < FAILED_LAST_WEEK
        at = NOW - (timedelta(days=6, minutes=n) if old else timedelta(hours=20, minutes=-n))
        events.append(_event(10 + n, "room.claimed", at))
        log.append(_delivery(f"dlv_r{n}", f"evt_{10 + n}", RECOVERED, at, attempts=2 if old else 1))
        if old:  # refused last week, delivered by a retry on the same day
            attempts.append(_attempt(f"dlv_r{n}", f"evt_{10 + n}", RECOVERED, 1, at, False))
        attempts.append(
            _attempt(
                f"dlv_r{n}",
                f"evt_{10 + n}",
                RECOVERED,
                2 if old else 1,
                at + timedelta(seconds=30) if old else at,
                True,
            )
        )
    return events, log, attempts


@pytest.fixture
def tiny(database_url: str) -> str:
    """The tiny database, on a migrated SQLite file and on this run's PostgreSQL database."""

    async def fill() -> None:
        engine = create_async_engine(database_url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(lambda sync: fill_tiny(sync, *tiny_rows()))
        finally:
            await engine.dispose()

    asyncio.new_event_loop().run_until_complete(fill())
    return database_url


def test_a_day_of_registrations_is_a_day_wide_from_zero(tiny: str) -> None:
    """Three registrations on one day: one daily row of three, an axis one day wide, counts from zero."""
    registrations = load.load_registrations(tiny)
    over_time = waitlist.registrations_over_time(registrations)
    assert over_time.to_dict("list") == {
        "period": [pd.Timestamp("2026-06-29", tz="UTC")],
        "arcade": [0],
        "claim": [2],
        "member": [1],
    }
    ax = charts.registrations_over_time_chart(over_time).axes[0]
    left, right = (mdates.num2date(limit) for limit in ax.get_xlim())
    assert right - left == timedelta(days=1)
    assert ax.get_ylim()[0] == 0
    assert waitlist.top_projects(registrations).to_dict("list") == {"project": ["MoonFrog"], "count": [3]}


def test_a_batch_counts_three_events_in_one_request(tiny: str) -> None:
    """The batch partner: 3 events, delivered, in 1 request that is a batch; states count events."""
    log = deliveries.with_batches(load.load_deliveries(tiny), load.load_delivery_batches(tiny))
    table = deliveries.events_and_requests(log).set_index("partner_name")
    assert table.loc["Batcher"].to_dict() == {
        "events": 3,
        "events_delivered": 3,
        "requests": 1,
        "batch_requests": 1,
        "requests_delivered": 1,
    }
    assert table.loc["Recovered"].to_dict() == {
        "events": 10,
        "events_delivered": 10,
        "requests": 10,
        "batch_requests": 0,
        "requests_delivered": 10,
    }
    states = deliveries.states(deliveries.events_only(log)).set_index("partner_name")
    assert (states.loc["Batcher", "delivered"], states.loc["Batcher", "total"]) == (3, 3)


def test_a_recovered_partner_is_judged_by_the_recent_window(tiny: str) -> None:
    """Failing last week, healthy the past day: 100% over 24 h, 62.5% over 7 days and history; not on the action list."""
    partners, attempts = load.load_partners(tiny), load.load_attempts(tiny)
    log = deliveries.with_batches(load.load_deliveries(tiny), load.load_delivery_batches(tiny))
    now = deliveries.data_now(log, attempts)
    assert now == pd.Timestamp(NOW - timedelta(hours=2))  # the batch, the newest record
    windows = deliveries.success_over_windows(attempts, now).set_index("partner_name")
    assert windows.loc["Recovered"].to_dict() == {
        "last 24 h attempts": HEALTHY_TODAY,
        "last 24 h rate": 1.0,
        "last 7 days attempts": FAILED_LAST_WEEK * 2 + HEALTHY_TODAY,
        "last 7 days rate": round(
            (FAILED_LAST_WEEK + HEALTHY_TODAY) / (FAILED_LAST_WEEK * 2 + HEALTHY_TODAY), 4
        ),
        "all history attempts": FAILED_LAST_WEEK * 2 + HEALTHY_TODAY,
        "all history rate": round(
            (FAILED_LAST_WEEK + HEALTHY_TODAY) / (FAILED_LAST_WEEK * 2 + HEALTHY_TODAY), 4
        ),
    }
    recent = deliveries.action_items(partners, log, attempts, now=now)
    assert recent.empty
    history = deliveries.action_items(partners, log, attempts)
    assert history[["partner_name", "issue", "count"]].to_dict("list") == {
        "partner_name": ["Recovered"],
        "issue": ["unreliable"],
        "count": [FAILED_LAST_WEEK],
    }


def run_notebook(name: str, source: str) -> str:
    """Run the team's notebook on ``source`` to the end (an error in any cell raises); its text output."""
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)  # type: ignore[no-untyped-call]
    [parameters] = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", ())]
    parameters.source += f"\nSOURCE = {source!r}"
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    )
    client.execute()
    return "\n".join(
        str(output.get("text", "")) + str(output.get("data", {}).get("text/plain", ""))
        for cell in notebook.cells
        for output in cell.get("outputs", ())
    )


@pytest.mark.parametrize("name", ["03-waitlist-intents.ipynb", "04-delivery-logs.ipynb"])
def test_the_notebook_runs_on_the_tiny_database(tiny: Path, name: str) -> None:
    """The team's notebook, pointed at the tiny database, runs to the end without an error."""
    text = run_notebook(name, str(tiny))
    if name.startswith("04"):
        assert "13 events for them, sent in 11 requests (1 of them batches)" in text
        assert "Nothing to act on" in text
    else:
        assert "3 registrations from 3 addresses" in text
        assert "MoonFrog" in text


@pytest.mark.parametrize("name", ["03-waitlist-intents.ipynb", "04-delivery-logs.ipynb"])
def test_the_notebook_runs_on_a_new_database(sqlite_url: str, name: str) -> None:
    """A database just migrated, with nothing in it yet: the notebook runs to the end and says so,
    where it stopped at its first cell (an empty log has no newest record)."""
    text = run_notebook(name, sqlite_url)
    if name.startswith("04"):
        assert "0 partners; 0 events for them, sent in 0 requests" in text
        assert "newest record none yet" in text
        assert "Nothing to act on" in text
    else:
        assert "0 registrations" in text


def test_the_delivery_notebook_sets_aside_what_retention_may_have_thinned(sqlite_url: str) -> None:
    """A delivery to Recovered still waiting since 40 days ago, its two failed attempts kept by
    retention while the deliveries settled beside them were pruned: the notebook says what span the
    log covers and reads its rates without those two, where it counted them in "all history"."""
    events, log, attempts = tiny_rows()
    long_ago = NOW - timedelta(days=40)
    events.append(_event(99, "room.claimed", long_ago))
    log.append(
        _delivery("dlv_waits", "evt_99", RECOVERED, long_ago, status="pending", attempts=2, delivered_at=None)
    )
    attempts += [
        _attempt("dlv_waits", "evt_99", RECOVERED, number, long_ago + timedelta(minutes=number), False)
        for number in (1, 2)
    ]

    async def fill() -> None:
        engine = create_async_engine(sqlite_url)
        try:
            async with engine.begin() as conn:
                await conn.run_sync(lambda sync: fill_tiny(sync, events, log, attempts))
        finally:
            await engine.dispose()

    asyncio.new_event_loop().run_until_complete(fill())
    text = run_notebook("04-delivery-logs.ipynb", sqlite_url)
    assert "19 attempts logged from 2026-05-20 12:01 to 2026-06-29 10:00 UTC." in text
    assert "set aside the 2 made earlier, which may be only the failures retention keeps." in text
    assert "1    Recovered        16         10         0.625" in text  # not 18 attempts, 55.6%
