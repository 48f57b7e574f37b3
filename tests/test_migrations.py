"""The migrations build exactly the schema `service.db.tables` declares, and undo themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import make_url

from service.db.engine import alembic_config, create_engine, migrate
from service.db.tables import metadata
from tests.conftest import POSTGRES_URL, RUN_ID
from tests.scratch import admin_execute


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with nothing in it; on PostgreSQL one of this test's own, dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrations.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    name = f"service_test_{RUN_ID}_migrations"
    asyncio.run(admin_execute(POSTGRES_URL, f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    asyncio.run(admin_execute(POSTGRES_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _differences(url: str) -> list[Any]:
    async def compare() -> list[Any]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: compare_metadata(MigrationContext.configure(sync), metadata)
                )
        finally:
            await engine.dispose()

    return asyncio.run(compare())


def _tables(url: str) -> set[str]:
    async def names() -> set[str]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return set(await conn.run_sync(lambda sync: sync.dialect.get_table_names(sync)))
        finally:
            await engine.dispose()

    return asyncio.run(names())


def test_the_migrated_schema_is_the_declared_one(empty_database: str) -> None:
    migrate(empty_database)
    assert _differences(empty_database) == []


def test_every_migration_downgrades_and_upgrades_again(empty_database: str) -> None:
    migrate(empty_database)
    command.downgrade(alembic_config(empty_database), "base")
    assert _tables(empty_database) <= {"alembic_version"}
    migrate(empty_database)
    assert _tables(empty_database) >= {table.name for table in metadata.sorted_tables}
    assert _differences(empty_database) == []
