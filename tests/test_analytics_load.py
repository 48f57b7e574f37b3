"""Loaders read a real SQLite file built from the service schema, masking addresses on the way."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal
from sqlalchemy import Connection, create_engine, insert, text
from sqlalchemy.ext.asyncio import create_async_engine

from analytics import load, waitlist
from service.db import tables
from service.db.engine import async_url
from service.settings import Settings

UTC_TIME = "datetime64[us, UTC]"
T0 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def utc(*stamps: datetime | None) -> pd.Series:
    return pd.Series(pd.to_datetime(list(stamps), utc=True)).astype(UTC_TIME)


def key_hash(email_key: str) -> str:
    return hashlib.sha256(email_key.encode()).hexdigest()[:16]


def fill(conn: Connection, *, rows: bool = True, dangling: bool = True) -> None:
    tables.metadata.create_all(conn)
    if not rows:
        return
    conn.execute(
        insert(tables.registrations),
        [
            {
                "email": "Ann@Example.com",
                "email_key": "ann@example.com",
                "intent": "claim",
                "project": "Moon DAO",
                "message": "reach me at ann@example.com",
                "created_at": at(0),
                "updated_at": at(5),
            },
            {
                "email": "bob@example.org",
                "email_key": "bob@example.org",
                "intent": "member",
                "project": None,
                "message": None,
                "created_at": at(60),
                "updated_at": at(60),
            },
        ],
    )
    conn.execute(
        insert(tables.partners),
        [
            {
                "id": "p1",
                "name": "Acme",
                "url": "https://acme.test/hook",
                "status": "active",
                "secret": "s1",
                "created_at": T0,
                "updated_at": T0,
            },
            {
                "id": "p2",
                "name": "Beta",
                "url": "https://beta.test/hook",
                "status": "paused",
                "secret": "s2",
                "created_at": T0,
                "updated_at": T0,
            },
        ],
    )
    conn.execute(
        insert(tables.events),
        [
            {
                "id": "ev1",
                "kind": "order.created",
                "dedupe_key": "k1",
                "payload": "{}",
                "occurred_at": at(-10),
                "created_at": at(0),
            },
            {
                "id": "ev2",
                "kind": "waitlist.joined",
                "dedupe_key": "k2",
                "payload": "{}",
                "occurred_at": at(-5),
                "created_at": at(0),
            },
        ],
    )
    deliveries = [
        {
            "id": "dl1",
            "event_id": "ev1",
            "partner_id": "p1",
            "status": "delivered",
            "attempts": 2,
            "next_attempt_at": at(1),
            "created_at": at(1),
            "updated_at": at(6),
            "delivered_at": at(6),
        },
        {
            "id": "dl2",
            "event_id": "ev2",
            "partner_id": "p2",
            "status": "pending",
            "attempts": 1,
            "next_attempt_at": at(30),
            "created_at": at(2),
            "updated_at": at(3),
            "delivered_at": None,
        },
        {
            "id": "dl3",
            "event_id": "ev1",
            "partner_id": "p-gone",
            "status": "failed",
            "attempts": 0,
            "next_attempt_at": at(3),
            "created_at": at(3),
            "updated_at": at(3),
            "delivered_at": None,
        },
    ]
    # dl3 points at a partner that no longer exists; only SQLite, which does not enforce keys, has it.
    conn.execute(insert(tables.deliveries), deliveries if dangling else deliveries[:2])
    conn.execute(
        insert(tables.delivery_attempts),
        [
            {
                "delivery_id": "dl1",
                "event_id": "ev1",
                "event": "order.created",
                "partner_id": "p1",
                "attempt": 1,
                "started_at": at(1),
                "duration_ms": 5000,
                "status_code": None,
                "error_class": "timeout",
                "response_excerpt": None,
                "outcome": "retry",
            },
            {
                "delivery_id": "dl2",
                "event_id": "ev2",
                "event": "waitlist.joined",
                "partner_id": "p2",
                "attempt": 1,
                "started_at": at(2),
                "duration_ms": 40,
                "status_code": 500,
                "error_class": "http_500",
                "response_excerpt": "oops",
                "outcome": "retry",
            },
            {
                "delivery_id": "dl1",
                "event_id": "ev1",
                "event": "order.created",
                "partner_id": "p1",
                "attempt": 2,
                "started_at": at(6),
                "duration_ms": 120,
                "status_code": 200,
                "error_class": None,
                "response_excerpt": '{"echo": "bob@example.org"}',
                "outcome": "delivered",
            },
        ],
    )


def build_database(path: Path, *, rows: bool = True) -> Path:
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        fill(conn, rows=rows)
    engine.dispose()
    return path


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return build_database(tmp_path / "service.db")


def expected_registrations() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "email": ["A***@Example.com", "b***@example.org"],
            "email_hash": [key_hash("ann@example.com"), key_hash("bob@example.org")],
            "intent": ["claim", "member"],
            "project": ["Moon DAO", None],
            "message": ["reach me at a***@example.com", None],
            "message_length": pd.array([27, None], dtype="Int64"),  # as written, not as masked
            "created_at": utc(at(0), at(60)),
            "updated_at": utc(at(5), at(60)),
        }
    ).astype({"project": "str", "message": "str"})


def expected_deliveries() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["dl1", "dl2", "dl3"],
            "event_id": ["ev1", "ev2", "ev1"],
            "event": ["order.created", "waitlist.joined", "order.created"],
            "partner_id": ["p1", "p2", "p-gone"],
            "partner_name": ["Acme", "Beta", None],
            "status": ["delivered", "pending", "failed"],
            "attempts": [2, 1, 0],
            "created_at": utc(at(1), at(2), at(3)),
            "updated_at": utc(at(6), at(3), at(3)),
            "delivered_at": utc(at(6), None, None),
            "occurred_at": utc(at(-10), at(-5), at(-10)),
        }
    ).astype({"partner_name": "str"})


def expected_attempts() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "delivery_id": ["dl1", "dl2", "dl1"],
            "event_id": ["ev1", "ev2", "ev1"],
            "event": ["order.created", "waitlist.joined", "order.created"],
            "partner_id": ["p1", "p2", "p1"],
            "partner_name": ["Acme", "Beta", "Acme"],
            "attempt": [1, 1, 2],
            "started_at": utc(at(1), at(2), at(6)),
            "duration_ms": [5000, 40, 120],
            "status_code": pd.array([None, 500, 200], dtype="Int64"),
            "error_class": ["timeout", "http_500", None],
            "response_excerpt": [None, "oops", '{"echo": "b***@example.org"}'],
            "outcome": ["retry", "retry", "delivered"],
        }
    ).astype({"error_class": "str", "response_excerpt": "str"})


def expected_partners() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["p1", "p2"],
            "name": ["Acme", "Beta"],
            "events": [None, None],
            "status": ["active", "paused"],
            "created_at": utc(T0, T0),
            "updated_at": utc(T0, T0),
        }
    ).astype({"events": "str"})


def test_load_registrations(database: Path) -> None:
    """Registrations come oldest first, addresses masked (in messages too) and hashed."""
    assert_frame_equal(load.load_registrations(database), expected_registrations())


def test_load_deliveries(database: Path) -> None:
    """Deliveries carry their event kind and partner name; a dangling partner stays, unnamed."""
    assert_frame_equal(load.load_deliveries(database), expected_deliveries())


def test_load_attempts(database: Path) -> None:
    """Attempts come earliest first with partner names, NULL codes as NA, excerpts masked."""
    assert_frame_equal(load.load_attempts(database), expected_attempts())


def test_load_partners(database: Path) -> None:
    """Partners come oldest first, without secrets or URLs."""
    assert_frame_equal(load.load_partners(database), expected_partners())


def test_load_partners_lists_subscribed_kinds(tmp_path: Path) -> None:
    """A partner's event filter (a JSON array in the table) reads as comma-separated kinds."""
    path = build_database(tmp_path / "service.db")
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(
            text("""UPDATE partners SET events = '["room.claimed","room.trending"]' WHERE id = 'p2'""")
        )
    engine.dispose()
    assert list(load.load_partners(path)["events"].fillna("")) == ["", "room.claimed,room.trending"]


@pytest.mark.parametrize(
    ("loader", "columns"),
    [
        (load.load_partners, load.PARTNER_COLUMNS),
        (load.load_registrations, load.REGISTRATION_COLUMNS),
        (load.load_deliveries, load.DELIVERY_COLUMNS),
        (load.load_attempts, load.ATTEMPT_COLUMNS),
    ],
)
def test_empty_tables_keep_their_dtypes(
    tmp_path: Path, loader: Callable[[load.Source], pd.DataFrame], columns: dict[str, str]
) -> None:
    """An empty database gives empty frames typed exactly like full ones."""
    path = build_database(tmp_path / "empty.db", rows=False)
    frame = loader(path)
    assert frame.empty
    assert {name: str(dtype) for name, dtype in frame.dtypes.items()} == columns


def test_sources_agree(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path, a str path, a sqlite URL and the environment variable read the same rows."""
    monkeypatch.setenv(load.ENV_VAR, f"sqlite:///{database}")
    for source in (database, str(database), f"sqlite:///{database}", None):
        assert_frame_equal(load.load_registrations(source), expected_registrations())


@pytest.mark.parametrize("setting", [None, "sqlite:///var/service.db"])
def test_the_services_relative_path_is_read_from_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str | None
) -> None:
    """Without a source, the default or a relative $SERVICE_DATABASE_URL (what `make lab` exports)
    names var/service.db under the project root, where `make serve` runs the service and writes
    it, even from notebooks/, where a notebook's kernel runs: it looked for notebooks/var/."""
    (tmp_path / "var").mkdir()
    (tmp_path / "notebooks").mkdir()
    build_database(tmp_path / "var" / "service.db")
    monkeypatch.setattr(load, "PROJECT_ROOT", tmp_path)
    monkeypatch.chdir(tmp_path / "notebooks")
    if setting is None:
        monkeypatch.delenv(load.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(load.ENV_VAR, setting)
    assert_frame_equal(load.load_registrations(), expected_registrations())
    # A relative path given by the caller is the caller's own, read from the working directory.
    assert_frame_equal(load.load_registrations("../var/service.db"), expected_registrations())


def test_a_missing_service_database_names_the_file_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No database where the service's setting points: the error names the full path under the
    project root, the setting, and what to do, before any connection is made; it named only the
    relative path, looked for from wherever the caller was."""
    (tmp_path / "notebooks").mkdir()
    monkeypatch.setattr(load, "PROJECT_ROOT", tmp_path)
    monkeypatch.chdir(tmp_path / "notebooks")
    with pytest.raises(FileNotFoundError) as raised:
        load.database_url(None, {load.ENV_VAR: "sqlite:///var/service.db"})
    assert str(raised.value) == (
        f"no SQLite database at {tmp_path}/var/service.db ($SERVICE_DATABASE_URL, or its default, is "
        f"sqlite:///var/service.db: a relative path there is read from {tmp_path}, where `make serve` "
        "runs the service); start the service once to create it, or name the database to read"
    )


async def test_loads_inside_a_running_event_loop(database: Path) -> None:
    """A notebook kernel runs an event loop; loading from inside one still works."""
    assert_frame_equal(load.load_registrations(database), expected_registrations())


@pytest.mark.parametrize(
    ("source", "environ", "url"),
    [
        ("postgresql://app@db:5432/service", {}, "postgresql+asyncpg://app@db:5432/service"),
        ("postgresql+psycopg://app@db/service", {}, "postgresql+asyncpg://app@db/service"),
        (None, {"SERVICE_DATABASE_URL": "postgresql://app@db/x"}, "postgresql+asyncpg://app@db/x"),
    ],
)
def test_database_url(source: str | None, environ: dict[str, str], url: str) -> None:
    """PostgreSQL URLs, given or from the environment, are read through asyncpg."""
    assert load.database_url(source, environ).render_as_string() == url


@pytest.mark.parametrize(
    ("source", "url"),
    [
        ("postgres://app@db/service", "postgresql+asyncpg://app@db/service"),
        ("postgresql://app@db/service?sslmode=require", "postgresql+asyncpg://app@db/service?ssl=require"),
    ],
)
def test_database_url_takes_every_url_the_service_takes(source: str, url: str) -> None:
    """``postgres://`` and libpq's ``sslmode`` (every hosted database's URL) are read as the service
    reads them (``service.db.engine.async_url``): one was refused, the other reached asyncpg as a
    keyword it does not know."""
    Settings(database_url=source)  # the service takes it
    assert load.database_url(source, {}).render_as_string() == url
    assert load.database_url(source, {}) == async_url(source)


def test_a_url_with_sslmode_reaches_the_database() -> None:
    """Loading from a URL with ``sslmode`` goes as far as connecting (refused: nothing listens on
    port 1), where it stopped with a TypeError, asyncpg's unexpected keyword ``sslmode``."""
    with pytest.raises(OSError):
        load.load_registrations("postgresql://reader@127.0.0.1:1/service?sslmode=disable")


def test_database_url_for_a_sqlite_path(database: Path) -> None:
    """A file path becomes a sqlite URL read through aiosqlite."""
    assert load.database_url(database, {}).render_as_string() == f"sqlite+aiosqlite:///{database}"


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("mysql://app@db/service", ValueError),
        ("sqlite:///nowhere/service.db", FileNotFoundError),
        ("nowhere/service.db", FileNotFoundError),
    ],
)
def test_database_url_refuses(source: str, error: type[Exception]) -> None:
    """Unsupported databases and missing SQLite files fail before any connection is made."""
    with pytest.raises(error):
        load.database_url(source, {})


@pytest.mark.postgres
async def test_loaders_read_postgresql() -> None:
    """The same loaders read PostgreSQL through asyncpg, in a throwaway database."""
    base = os.environ.get("SERVICE_TEST_POSTGRES_URL")
    if not base:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set")
    admin_url = load.database_url(base, {})
    name = f"analytics_test_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin_url.set(database=name)
    try:
        engine = create_async_engine(url)
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: fill(sync, dangling=False))
        await engine.dispose()
        source = url.render_as_string(hide_password=False)
        assert_frame_equal(load.load_registrations(source), expected_registrations())
        assert_frame_equal(load.load_deliveries(source), expected_deliveries().iloc[:2])
        assert_frame_equal(load.load_attempts(source), expected_attempts())
        assert_frame_equal(load.load_partners(source), expected_partners())
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


def test_registrations_load_when_no_one_named_a_project(tmp_path: Path) -> None:
    """A table (or one read slice of it) whose every project is NULL loads, the column all NA:
    sharing the repeated strings found none to share and failed."""
    path = build_database(tmp_path / "unnamed.db", rows=False)
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(
            insert(tables.registrations),
            [
                {"email": f"u{n}@example.com", "email_key": f"u{n}@example.com", "intent": "member",
                 "project": None, "message": None, "created_at": at(n), "updated_at": at(n)}
                for n in range(3)
            ],
        )  # fmt: skip
    engine.dispose()
    frame = load.load_registrations(path)
    assert len(frame) == 3
    assert frame["project"].isna().all()
    assert str(frame["project"].dtype) == load.REGISTRATION_COLUMNS["project"]


@pytest.mark.parametrize("year", [1, 1500, 2300, 9999])
def test_event_times_load_in_any_year_the_service_accepts(tmp_path: Path, year: int) -> None:
    """Publishing accepts an occurredAt in any year from 1 to 9999; the delivery log loads it as
    stored (nanosecond times reach only 1677 to 2262, and the load failed outside them)."""
    path = build_database(tmp_path / "years.db")
    moment = datetime(year, 6, 1, 12, 30, 15, 123456, tzinfo=UTC)
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(tables.events.update().where(tables.events.c.id == "ev1").values(occurred_at=moment))
    engine.dispose()
    frame = load.load_deliveries(path)
    occurred = frame.loc[frame["event_id"].eq("ev1"), "occurred_at"]
    assert list(occurred) == [pd.Timestamp(moment)] * len(occurred)
    assert len(occurred) >= 1
    assert str(frame["occurred_at"].dtype) == UTC_TIME


def test_partners_of_one_name_are_told_apart_by_their_ids(tmp_path: Path) -> None:
    """A partner removed and another added under its name: the frames name each with its id after
    the name, so tables grouped by name show two partners, not one with both histories; a name
    no other partner has stays as it is."""
    path = build_database(tmp_path / "twins.db")
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(tables.partners.update().where(tables.partners.c.id == "p2").values(name="Acme"))
    engine.dispose()
    partners = load.load_partners(path)
    assert sorted(partners["name"]) == ["Acme (p1)", "Acme (p2)"]
    deliveries = load.load_deliveries(path)
    attempts = load.load_attempts(path)
    for frame in (deliveries, attempts):
        named = frame.dropna(subset=["partner_name"])
        assert set(zip(named["partner_id"], named["partner_name"], strict=True)) <= {
            ("p1", "Acme (p1)"),
            ("p2", "Acme (p2)"),
        }
        assert named["partner_name"].nunique() == named["partner_id"].nunique()
    alone = load.load_partners(build_database(tmp_path / "apart.db"))
    assert sorted(alone["name"]) == ["Acme", "Beta"]


def test_message_lengths_count_the_message_as_written(database: Path) -> None:
    """An address in a message is masked for display (``a***@example.com``, a character longer
    here) but its length is the message's as written: 27 characters, where 28 were counted."""
    registrations = load.load_registrations(database)
    assert registrations["message"].iloc[0] == "reach me at a***@example.com"
    summary = waitlist.message_lengths(registrations).summary
    assert summary[["messages", "mean", "max"]].iloc[0].tolist() == [1, 27.0, 27.0]
