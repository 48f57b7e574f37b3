"""Where the drills keep state: a fresh database per drill, Redis key prefixes, and what they read back.

PostgreSQL and Redis come from ``SERVICE_DRILL_POSTGRES_URL`` / ``SERVICE_DRILL_REDIS_URL``, else
from the test suite's ``SERVICE_TEST_POSTGRES_URL`` / ``SERVICE_TEST_REDIS_URL``; without them the
parts that need them are skipped with that reason. Each drill makes its own database (a SQLite file
in its work directory, or ``service_drill_<hex>`` on the PostgreSQL server, dropped afterwards) and
its own Redis key prefix (deleted afterwards), so drills never see each other's data.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from service.db.engine import create_engine, migrate
from service.db.tables import deliveries, delivery_attempts, registrations
from tests.scratch import migrated_database, redis_keys

# Partner secrets' key for drill servers and workers (32 bytes of 0x04): every process of a drill shares it.
SECRETS_KEY = "BAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ="
NO_POSTGRES = "no PostgreSQL: set SERVICE_DRILL_POSTGRES_URL or SERVICE_TEST_POSTGRES_URL"
NO_REDIS = "no Redis: set SERVICE_DRILL_REDIS_URL or SERVICE_TEST_REDIS_URL"


def postgres_url() -> str | None:
    return os.environ.get("SERVICE_DRILL_POSTGRES_URL") or os.environ.get("SERVICE_TEST_POSTGRES_URL") or None


def redis_url() -> str | None:
    return os.environ.get("SERVICE_DRILL_REDIS_URL") or os.environ.get("SERVICE_TEST_REDIS_URL") or None


@contextmanager
def database(kind: str, workdir: Path, server: str | None = None) -> Iterator[str]:
    """A migrated, empty database of its own: a SQLite file, or a new database on ``server``."""
    tag = uuid.uuid4().hex[:12]
    if kind == "sqlite":
        url = f"sqlite:///{workdir / f'drill-{tag}.db'}"
        migrate(url)
        yield url
        return
    if server is None:
        raise ValueError(NO_POSTGRES)
    with migrated_database(server, f"service_drill_{tag}") as url:
        yield url


def redis_prefix() -> str:
    return f"service-drill-{uuid.uuid4().hex[:12]}"


def count_redis_keys(url: str, prefix: str) -> int:
    return asyncio.run(redis_keys(url, prefix, delete=False))


def drop_redis_keys(url: str, prefix: str) -> int:
    """Delete every key under ``prefix``; how many there were."""
    return asyncio.run(redis_keys(url, prefix, delete=True))


# --- reading back what the service stored -------------------------------------------------------


async def _rows(url: str, statement: Any) -> list[Any]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return list(await conn.execute(statement))
    finally:
        await engine.dispose()


def registered(url: str) -> Counter[tuple[str, str]]:
    """Stored rows per (lower-cased email, intent): each should be exactly 1."""
    rows = asyncio.run(_rows(url, select(registrations.c.email_key, registrations.c.intent)))
    return Counter((email, intent) for email, intent in rows)


def registration_count(url: str) -> int:
    return int(asyncio.run(_rows(url, select(func.count()).select_from(registrations)))[0][0])


def delivery_states(url: str) -> Counter[str]:
    statement = select(deliveries.c.status, func.count()).group_by(deliveries.c.status)
    return Counter({status: count for status, count in asyncio.run(_rows(url, statement))})


def logged_attempts(url: str) -> dict[str, list[int]]:
    """Each delivery's logged attempt numbers, in order."""
    statement = select(delivery_attempts.c.delivery_id, delivery_attempts.c.attempt).order_by(
        delivery_attempts.c.delivery_id, delivery_attempts.c.attempt
    )
    numbers: dict[str, list[int]] = {}
    for delivery_id, attempt in asyncio.run(_rows(url, statement)):
        numbers.setdefault(delivery_id, []).append(attempt)
    return numbers


def attempt_outcomes(url: str) -> Counter[str]:
    statement = select(delivery_attempts.c.outcome, func.count()).group_by(delivery_attempts.c.outcome)
    return Counter({outcome: count for outcome, count in asyncio.run(_rows(url, statement))})
