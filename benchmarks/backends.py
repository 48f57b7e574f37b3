"""Where the service under benchmark keeps its rows and its rate-limit counters, made and removed per run.

- SQLite: a file in a temporary directory; the limiter in process memory.
- PostgreSQL (with Redis limits where Redis is there too): a fresh database on the server named by
  ``SERVICE_BENCH_POSTGRES_URL`` (else ``SERVICE_TEST_POSTGRES_URL``), dropped afterwards, and a key
  prefix of this run's own on ``SERVICE_BENCH_REDIS_URL`` (else ``SERVICE_TEST_REDIS_URL``), whose
  keys are deleted afterwards. The delivery benchmark empties every table it touches, so it gets a
  second database of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.scratch import admin_execute, redis_keys


@dataclass(frozen=True, slots=True)
class Backend:
    name: str  # as the table prints it
    key: str  # as ``--storage`` takes it
    database_url: str
    delivery_database_url: str
    env: Mapping[str, str] = field(default_factory=dict)  # SERVICE_* settings for the server


def postgres_admin_url(environ: Mapping[str, str] = os.environ) -> str | None:
    return environ.get("SERVICE_BENCH_POSTGRES_URL") or environ.get("SERVICE_TEST_POSTGRES_URL") or None


def redis_url(environ: Mapping[str, str] = os.environ) -> str | None:
    return environ.get("SERVICE_BENCH_REDIS_URL") or environ.get("SERVICE_TEST_REDIS_URL") or None


@contextlib.contextmanager
def sqlite() -> Iterator[Backend]:
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        yield Backend(
            name="SQLite",
            key="sqlite",
            database_url=f"sqlite:///{Path(scratch) / 'service.db'}",
            delivery_database_url=f"sqlite:///{Path(scratch) / 'delivery.db'}",
            env={"SERVICE_RATE_LIMIT_STORAGE": "memory://"},
        )


async def _admin(url: str, statement: str) -> None:
    await admin_execute(url, statement)


async def _drop_keys(url: str, prefix: str) -> int:
    return await redis_keys(url, prefix, delete=True)


async def _ping(url: str) -> bool:
    from redis.asyncio import Redis

    client = Redis.from_url(url)
    try:
        return bool(await asyncio.wait_for(client.ping(), timeout=5))
    finally:
        await client.aclose()


@contextlib.contextmanager
def postgres(admin_url: str, redis: str | None) -> Iterator[Backend]:
    run = uuid.uuid4().hex[:12]
    names = [f"bench_{run}", f"bench_{run}_delivery"]
    urls = [make_url(admin_url).set(database=name).render_as_string(hide_password=False) for name in names]
    prefix = f"bench-{run}"
    env = {"SERVICE_RATE_LIMIT_STORAGE": "memory://"}
    if redis is not None and asyncio.run(_ping(redis)):
        env = {"SERVICE_RATE_LIMIT_STORAGE": redis, "SERVICE_RATE_LIMIT_KEY_PREFIX": prefix}
    created: list[str] = []
    try:
        for name in names:
            asyncio.run(_admin(admin_url, f'CREATE DATABASE "{name}"'))
            created.append(name)
        yield Backend(
            name="PostgreSQL + Redis" if "SERVICE_RATE_LIMIT_KEY_PREFIX" in env else "PostgreSQL",
            key="postgres",
            database_url=urls[0],
            delivery_database_url=urls[1],
            env=env,
        )
    finally:
        for name in created:
            asyncio.run(_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        if "SERVICE_RATE_LIMIT_KEY_PREFIX" in env and redis is not None:
            asyncio.run(_drop_keys(redis, prefix))
