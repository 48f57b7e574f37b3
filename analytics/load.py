"""Read the service database into pandas frames, masking addresses on the way out.

A source is a SQLAlchemy URL (``sqlite:///var/service.db``, ``postgresql://user@host:5432/db``),
a path to a SQLite file, or ``None`` for ``$SERVICE_DATABASE_URL`` (default
``sqlite:///var/service.db``). Every read goes through one async path (aiosqlite or asyncpg, the
drivers the service itself uses), so the SQLite tests exercise the code that reads PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from sqlalchemy import Select, select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine

from analytics.privacy import email_hash, mask_email, redact_emails
from service.db import tables

ENV_VAR = "SERVICE_DATABASE_URL"
DEFAULT_URL = "sqlite:///var/service.db"  # the service's own default for SERVICE_DATABASE_URL
# The async driver for each backend; a URL naming another driver is read with this one instead.
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}

Source = str | os.PathLike[str] | None
T = TypeVar("T")

# Column -> dtype of each frame, stated once so empty and all-NULL columns type like full ones.
UTC_TIME = "datetime64[ns, UTC]"
REGISTRATION_COLUMNS: dict[str, str] = {
    "email": "str",
    "email_hash": "str",
    "intent": "str",
    "project": "str",
    "message": "str",
    "created_at": UTC_TIME,
    "updated_at": UTC_TIME,
}
DELIVERY_COLUMNS: dict[str, str] = {
    "id": "str",
    "event_id": "str",
    "event": "str",
    "partner_id": "str",
    "partner_name": "str",
    "status": "str",
    "attempts": "int64",
    "created_at": UTC_TIME,
    "delivered_at": UTC_TIME,
    "occurred_at": UTC_TIME,
}
ATTEMPT_COLUMNS: dict[str, str] = {
    "delivery_id": "str",
    "event_id": "str",
    "event": "str",
    "partner_id": "str",
    "partner_name": "str",
    "attempt": "int64",
    "started_at": UTC_TIME,
    "duration_ms": "int64",
    "status_code": "Int64",  # NULL when no HTTP answer came
    "error_class": "str",
    "response_excerpt": "str",
    "outcome": "str",
}


def database_url(source: Source = None, environ: Mapping[str, str] | None = None) -> URL:
    """The async URL to read ``source`` from; a missing SQLite file is an error, never created."""
    if source is None:
        env = os.environ if environ is None else environ
        source = env.get(ENV_VAR) or DEFAULT_URL
    text = os.fspath(source)
    url = make_url(text) if "://" in text else URL.create("sqlite", database=text)
    backend = url.get_backend_name()
    if backend not in ASYNC_DRIVERS:
        raise ValueError(f"unsupported database {backend!r}; expected sqlite or postgresql")
    if backend == "sqlite" and url.database and not Path(url.database).is_file():
        # aiosqlite would quietly create an empty file and fail later with "no such table".
        raise FileNotFoundError(url.database)
    return url.set(drivername=ASYNC_DRIVERS[backend])


def load_registrations(source: Source = None) -> pd.DataFrame:
    """One row per registration, oldest first; ``email`` masked, ``email_hash`` for identity."""
    r = tables.registrations
    stmt = select(
        r.c.email,
        r.c.email_key,
        r.c.intent,
        r.c.project,
        r.c.message,
        r.c.created_at,
        r.c.updated_at,
    ).order_by(r.c.created_at, r.c.id)
    frame = _fetch(database_url(source), stmt)
    frame["email"] = frame["email"].map(mask_email)
    # email_key is the service's identity of an address (lower-cased), so hash it, not the display.
    frame["email_hash"] = frame["email_key"].map(email_hash)
    for column in ("project", "message"):
        frame[column] = _redact(frame[column])
    return _typed(frame, REGISTRATION_COLUMNS)


def load_deliveries(source: Source = None) -> pd.DataFrame:
    """One row per delivery, oldest first, with its event kind and partner name joined in."""
    d, e, p = tables.deliveries, tables.events, tables.partners
    stmt = (
        select(
            d.c.id,
            d.c.event_id,
            e.c.kind.label("event"),
            d.c.partner_id,
            p.c.name.label("partner_name"),
            d.c.status,
            d.c.attempts,
            d.c.created_at,
            d.c.delivered_at,
            e.c.occurred_at,
        )
        # Outer joins: SQLite does not enforce foreign keys; a dangling row should show, not vanish.
        .select_from(d.outerjoin(e, d.c.event_id == e.c.id).outerjoin(p, d.c.partner_id == p.c.id))
        .order_by(d.c.created_at, d.c.id)
    )
    return _typed(_fetch(database_url(source), stmt), DELIVERY_COLUMNS)


def load_attempts(source: Source = None) -> pd.DataFrame:
    """One row per HTTP attempt, earliest first, with the partner name joined in."""
    a, p = tables.delivery_attempts, tables.partners
    stmt = (
        select(
            a.c.delivery_id,
            a.c.event_id,
            a.c.event,
            a.c.partner_id,
            p.c.name.label("partner_name"),
            a.c.attempt,
            a.c.started_at,
            a.c.duration_ms,
            a.c.status_code,
            a.c.error_class,
            a.c.response_excerpt,
            a.c.outcome,
        )
        .select_from(a.outerjoin(p, a.c.partner_id == p.c.id))
        .order_by(a.c.started_at, a.c.id)
    )
    frame = _fetch(database_url(source), stmt)
    # A partner's answer may echo the payload, addresses included.
    frame["response_excerpt"] = _redact(frame["response_excerpt"])
    return _typed(frame, ATTEMPT_COLUMNS)


def _fetch(url: URL, stmt: Select[Any]) -> pd.DataFrame:
    return _run(_fetch_async(url, stmt))


async def _fetch_async(url: URL, stmt: Select[Any]) -> pd.DataFrame:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(stmt)
            rows = [tuple(row) for row in result.all()]
            return pd.DataFrame(rows, columns=list(result.keys()))
    finally:
        await engine.dispose()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # A notebook kernel already runs a loop and asyncio.run refuses to nest; a thread has none.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _redact(column: pd.Series) -> pd.Series:
    return column.map(redact_emails, na_action="ignore")


def _typed(frame: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    out = pd.DataFrame(index=frame.index)
    for name, dtype in columns.items():
        if dtype == UTC_TIME:
            # Values are already aware UTC (UTCDateTime); utc=True only types empty/NULL columns.
            out[name] = pd.to_datetime(frame[name], utc=True).astype(UTC_TIME)
        else:
            out[name] = frame[name].astype(dtype)
    return out.reset_index(drop=True)
