"""The registrations store below the route: one row per (address, intent), written in key order,
by the writer that sends each batch straight to the driver."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select, text

from service.db.engine import create_engine
from service.db.registrations import UPSERT, Registration
from service.db.tables import registrations
from service.db.writer import AsyncpgWriter, SQLiteWriter, Upsert, registration_writer, sqlite_utc_text

AT = datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)


def entry(email: str, intent: str = "member", project: str | None = None, minutes: int = 0) -> Registration:
    return Registration(email, email.lower(), intent, project, None, AT + timedelta(minutes=minutes))


async def _written(url: str, batches: list[list[Registration]], query: Any) -> list[tuple[Any, ...]]:
    engine = create_engine(url)
    writer = registration_writer(engine)
    try:
        for batch in batches:
            await writer.write(batch)
        async with engine.connect() as conn:
            return [tuple(row) for row in await conn.execute(query)]
    finally:
        await writer.close()
        await engine.dispose()


def _stored(url: str, batches: list[list[Registration]]) -> list[tuple[Any, ...]]:
    query = select(registrations.c.email_key, registrations.c.intent, registrations.c.project).order_by(
        registrations.c.id
    )
    return asyncio.run(_written(url, batches, query))


def test_the_writer_fits_the_database(database_url: str) -> None:
    """SQLite batches go to a thread of their own; PostgreSQL batches to one held asyncpg connection."""
    engine = create_engine(database_url)
    expected = SQLiteWriter if database_url.startswith("sqlite") else AsyncpgWriter
    assert isinstance(registration_writer(engine), expected)
    asyncio.run(engine.dispose())


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
    """A repeat updates the project where it carries one, and never adds a row."""
    first = [entry("a@x.example", project="one"), entry("A@X.example", minutes=1)]
    later = [entry("a@x.example", project="two", minutes=2)]
    assert _stored(database_url, [first, later]) == [("a@x.example", "member", "two")]


def test_rows_are_stored_exactly_as_a_core_execute_stores_them(database_url: str) -> None:
    """The driver-level path keeps SQLAlchemy's formats: the same stored text, the same values read back."""
    by_core = entry("core@x.example", project="Ünïcode ✓")
    by_writer = entry("writer@x.example", project="Ünïcode ✓")
    raw = text(
        "SELECT email, CAST(created_at AS TEXT), CAST(updated_at AS TEXT), project FROM registrations "
        "ORDER BY email"
    )

    async def run() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    UPSERT[engine.dialect.name],
                    [{"email": by_core.email, "email_key": by_core.email_key, "intent": by_core.intent,
                      "project": by_core.project, "message": None, "created_at": by_core.at,
                      "updated_at": by_core.at}],
                )  # fmt: skip
            writer = registration_writer(engine)
            await writer.write([by_writer])
            await writer.close()
            async with engine.connect() as conn:
                stored = [tuple(row) for row in await conn.execute(raw)]
                read = [tuple(row) for row in await conn.execute(
                    select(registrations.c.created_at, registrations.c.updated_at).order_by(registrations.c.email)
                )]  # fmt: skip
            return stored, read
        finally:
            await engine.dispose()

    stored, read = asyncio.run(run())
    assert [row[1:] for row in stored] == [stored[0][1:], stored[0][1:]]
    assert stored[0][0] == "core@x.example" and stored[1][0] == "writer@x.example"
    assert read == [(AT, AT), (AT, AT)]


def test_a_failed_batch_leaves_nothing_and_the_next_one_is_written(database_url: str) -> None:
    """A batch is one transaction: a row the database refuses takes its batch with it, and no more."""
    broken = Registration(None, "bad@x.example", "member", None, None, AT)  # type: ignore[arg-type]

    async def run() -> list[tuple[Any, ...]]:
        engine = create_engine(database_url)
        writer = registration_writer(engine)
        try:
            with pytest.raises(Exception, match=r"(?i)null"):
                await writer.write([entry("first@x.example"), broken])
            await writer.write([entry("second@x.example")])
            async with engine.connect() as conn:
                return [tuple(row) for row in await conn.execute(select(registrations.c.email_key))]
        finally:
            await writer.close()
            await engine.dispose()

    assert asyncio.run(run()) == [("second@x.example",)]


@pytest.mark.postgres
def test_a_lost_postgresql_connection_is_replaced_without_losing_the_batch(postgres_database: str) -> None:
    """The server ends the writer's session; the next batch reconnects and is written once."""

    async def run() -> list[tuple[Any, ...]]:
        engine = create_engine(postgres_database)
        writer = registration_writer(engine)
        try:
            async with engine.begin() as conn:
                await conn.execute(registrations.delete())
            await writer.write([entry("before@x.example")])
            async with engine.connect() as conn:
                ended = await conn.execute(text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ))  # fmt: skip
                assert ended.scalar_one() >= 1
            await writer.write([entry("after@x.example")])
            async with engine.connect() as conn:
                return [tuple(row) for row in await conn.execute(
                    select(registrations.c.email_key).order_by(registrations.c.email_key)
                )]  # fmt: skip
        finally:
            await writer.close()
            await engine.dispose()

    assert asyncio.run(run()) == [("after@x.example",), ("before@x.example",)]


@settings(max_examples=500, deadline=None)
@given(st.datetimes(timezones=st.timezones()))
def test_sqlite_time_text_is_the_column_types_own(moment: datetime) -> None:
    """The writer's SQLite times are character for character what UTCDateTime's processor makes."""
    dialect = sqlalchemy.create_engine("sqlite://").dialect
    processor = registrations.c.created_at.type.dialect_impl(dialect).bind_processor(dialect)
    assert processor is not None
    try:
        expected = processor(moment)
    except OverflowError:  # a moment whose UTC falls outside datetime's years
        with pytest.raises(OverflowError):
            sqlite_utc_text(moment)
        return
    assert sqlite_utc_text(moment) == expected


def test_sqlite_time_text_refuses_naive_times_as_the_column_type_does() -> None:
    with pytest.raises(ValueError, match="naive"):
        sqlite_utc_text(datetime(2026, 11, 23, 12, 0))


def test_the_sqlite_upsert_uses_the_fast_time_text_and_postgresql_the_column_type() -> None:
    from sqlalchemy.dialects import postgresql, sqlite

    assert Upsert(sqlite.dialect())._time is sqlite_utc_text
    assert Upsert(postgresql.asyncpg.dialect())._time is not sqlite_utc_text
