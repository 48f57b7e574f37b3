"""The registrations store below the route: one row per (address, intent), written in key order."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from service.db.engine import create_engine
from service.db.registrations import Registration, upsert_registrations
from service.db.tables import registrations

AT = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def entry(email: str, intent: str = "member", project: str | None = None, minutes: int = 0) -> Registration:
    return Registration(email, email.lower(), intent, project, None, AT + timedelta(minutes=minutes))


def _stored(url: str, batches: list[list[Registration]]) -> list[tuple[str, str, str | None]]:
    async def run() -> list[tuple[str, str, str | None]]:
        engine = create_engine(url)
        try:
            for batch in batches:
                async with engine.begin() as conn:
                    await upsert_registrations(conn, batch)
            async with engine.connect() as conn:
                rows = await conn.execute(
                    select(registrations.c.email_key, registrations.c.intent, registrations.c.project)
                    .order_by(registrations.c.id)
                )
                return [tuple(row) for row in rows]  # type: ignore[misc]
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_a_batch_is_written_in_key_order_whatever_order_it_came_in(database_url: str) -> None:
    """Two processes' overlapping batches then lock rows in one order: no deadlock between them."""
    batch = [entry("c@x.example"), entry("A@x.example", "claim"), entry("b@x.example"), entry("a@x.example")]
    assert _stored(database_url, [batch]) == [
        ("a@x.example", "claim", None),
        ("a@x.example", "member", None),
        ("b@x.example", "member", None),
        ("c@x.example", "member", None),
    ]


def test_repeats_in_one_batch_and_across_batches_leave_one_row(database_url: str) -> None:
    first = [entry("a@x.example", project="one"), entry("A@X.example", minutes=1)]
    later = [entry("a@x.example", project="two", minutes=2)]
    assert _stored(database_url, [first, later]) == [("a@x.example", "member", "two")]
