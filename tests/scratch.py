"""Scratch backends for tests, drills and benchmarks: databases and Redis keys made for one run
and removed after it (the servers outlive every run and keep what is left on them)."""

from __future__ import annotations

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
