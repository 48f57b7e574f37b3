"""Alembic environment: runs migrations through the same async engine the service uses."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from service.db.engine import create_engine
from service.db.tables import declared_on, metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=lambda item, *_: declared_on(connection.dialect.name, item),
    )
    with context.begin_transaction():
        context.run_migrations()


async def _main() -> None:
    engine = create_engine(config.attributes["database_url"])
    try:
        async with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                # Batch migrations rebuild a table by copying it and dropping the old one; with
                # foreign keys on, that drop would delete (or refuse for) every row referring to
                # it. Alembic's documented remedy: foreign keys off while migrating (a PRAGMA
                # that only takes effect outside a transaction, so before anything else).
                await connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `python -m service migrate`")
asyncio.run(_main())
