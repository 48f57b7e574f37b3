"""Scratch backends for tests, drills and benchmarks: databases and Redis keys made for one run
and removed after it (the servers outlive every run and keep what is left on them)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url


async def admin_execute(url: str, sql: str) -> None:
    """Run one statement (CREATE/DROP DATABASE) outside a transaction on a PostgreSQL server."""
    import asyncpg

    parsed = make_url(url)
    conn = await asyncpg.connect(
        host=parsed.host,
        port=parsed.port or 5432,
        user=parsed.username,
        password=parsed.password,
        database=parsed.database,
        timeout=10,
    )
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def redis_keys(url: str, prefix: str, *, delete: bool) -> int:
    """How many keys start with ``prefix``; deleted too when ``delete``."""
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys and delete:
            await client.delete(*keys)
        return len(keys)
    finally:
        await client.aclose()


@contextmanager
def migrated_database(server_url: str, name: str) -> Iterator[str]:
    """The URL of a database ``name`` made on ``server_url``'s PostgreSQL server and migrated to
    this release's schema; dropped afterwards, whatever a test did to it."""
    from service.db.engine import migrate

    asyncio.run(admin_execute(server_url, f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        migrate(url)
        yield url
    finally:
        asyncio.run(admin_execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
