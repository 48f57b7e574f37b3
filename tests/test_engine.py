"""Engines: what a database error may carry into the logs."""

from __future__ import annotations

import logging

import pytest
from webhook_helpers import AUTH, settings

from service.app import create_app
from service.settings import Settings
from tests.conftest import POSTGRES_URL, Client

MARKER = "param-leak-marker"  # only ever a statement parameter: it must not reach a log


def test_a_database_error_logs_the_statement_without_its_parameters(
    database_url: str, clock: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A row the database refuses (a duplicate key) is a 500 whose logged error holds no parameters."""
    app = create_app(
        Settings(database_url=database_url, **settings()),
        clock=clock,  # type: ignore[arg-type]
        ids=lambda prefix: f"{prefix}_always_the_same",
    )
    caplog.set_level(logging.ERROR)
    body = {"name": MARKER, "url": f"http://127.0.0.1:9/{MARKER}"}
    with Client(app) as client:
        first = client.post("/admin/partners", json=body, headers=AUTH)
        second = client.post("/admin/partners", json=body, headers=AUTH)
    assert (first.status_code, second.status_code) == (201, 500)
    logged = caplog.text
    assert [record.getMessage() for record in caplog.records if record.name == "service.errors"] == [
        "unhandled error"
    ]
    assert "INSERT INTO partners" in logged
    assert "[SQL parameters hidden due to hide_parameters=True]" in logged
    assert MARKER not in logged
    assert first.json["secret"] not in logged


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:pw-never-shown@db:5432/service", "postgresql://app:***@db:5432/service"),
        (
            "postgresql://app@db/service?password=pw-never-shown&sslmode=require&sslpassword=pw-never-shown",
            "postgresql://app@db/service?sslmode=require",
        ),
        ("sqlite:///var/service.db", "sqlite:///var/service.db"),
    ],
)
def test_a_database_url_is_shown_without_its_passwords(url: str, shown: str) -> None:
    """The driver takes a password from the query string too; neither kind is ever printed."""
    from service.db.engine import shown_url

    assert shown_url(url) == shown


def test_libpqs_sslmode_reaches_asyncpg_as_ssl() -> None:
    from service.db.engine import async_url

    url = async_url("postgresql://app@db/service?sslmode=verify-full&target_session_attrs=read-write")
    assert url.drivername == "postgresql+asyncpg"
    assert dict(url.query) == {"ssl": "verify-full", "target_session_attrs": "read-write"}


@pytest.mark.skipif(not POSTGRES_URL, reason="SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
async def test_a_url_with_sslmode_connects() -> None:
    """``?sslmode=disable``, as guides write it, connected nowhere: asyncpg refused the keyword."""
    from sqlalchemy import text

    from service.db.engine import create_engine

    assert POSTGRES_URL is not None
    engine = create_engine(POSTGRES_URL + ("&" if "?" in POSTGRES_URL else "?") + "sslmode=disable")
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("select 1"))).scalar() == 1
    finally:
        await engine.dispose()
