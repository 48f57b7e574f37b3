"""Read the service database into pandas frames, masking addresses on the way out.

A source is a database URL as the service takes one (``sqlite:///var/service.db``,
``postgresql://user@host:5432/db?sslmode=require``), a path to a SQLite file, or ``None`` for
``$SERVICE_DATABASE_URL`` (default ``sqlite:///var/service.db``). Every read goes through one async
path (aiosqlite or asyncpg, the drivers the service itself uses), so the SQLite tests exercise the
code that reads PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from sqlalchemy import DateTime, Select, func, select, type_coerce
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.sql.elements import ColumnElement

from analytics.privacy import email_hash, mask_email, redact_emails
from service.db import tables
from service.db.engine import async_url, shown_url, sqlite_path

ENV_VAR = "SERVICE_DATABASE_URL"
DEFAULT_URL = "sqlite:///var/service.db"  # the service's own default for SERVICE_DATABASE_URL
BACKENDS = ("sqlite", "postgresql")  # the databases the service runs on
# Where ``make serve`` runs the service, so where a relative SQLite path in its setting points.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

Source = str | os.PathLike[str] | None
T = TypeVar("T")
Convert = Callable[[pd.DataFrame], pd.DataFrame]

# Rows are read and converted a slice at a time, so a million registrations never exist as a
# million SQLAlchemy rows and a million-row object frame at once (benchmarks/analytics.py).
CHUNK_ROWS = 50_000

# Column -> dtype of each frame, stated once so empty and all-NULL columns type like full ones.
# Times keep the databases' own precision, microseconds: nanoseconds reach only 1677 to 2262, and
# an event's occurredAt may be any year from 1 to 9999.
UTC_TIME = "datetime64[us, UTC]"
REGISTRATION_COLUMNS: dict[str, str] = {
    "email": "str",
    "email_hash": "str",
    "intent": "str",
    "project": "str",
    "message": "str",
    # Characters in the message as written, trimmed (NA without one): measured before addresses in
    # it are masked, which changes their length.
    "message_length": "Int64",
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
    "updated_at": UTC_TIME,  # its last change: when a settled one settled, what retention goes by
    "delivered_at": UTC_TIME,
    "occurred_at": UTC_TIME,
}
# Which deliveries are batches: a batch is one request carrying several events, each of which has
# its own delivery row pointing to it (``batch_id``).
BATCH_COLUMNS: dict[str, str] = {"id": "str", "batch_id": "str", "is_batch": "bool"}
PARTNER_COLUMNS: dict[str, str] = {
    "id": "str",
    "name": "str",
    "events": "str",  # comma-separated kinds; NA for every kind
    "status": "str",
    "created_at": UTC_TIME,
    "updated_at": UTC_TIME,
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
    """The async URL to read ``source`` from, made as the service makes its own
    (``service.db.engine.async_url``: ``postgres://``, libpq's ``sslmode``), so every URL the service
    takes is read here too; a missing SQLite file is an error, never created.

    A relative SQLite path in ``$SERVICE_DATABASE_URL`` (or the default) is the service's, and is read
    from ``PROJECT_ROOT``, where ``make serve`` runs it, whatever folder the caller is in (a
    notebook's kernel runs in ``notebooks/``). A relative path given as ``source`` is the caller's
    own, read from the working directory as any path is.
    """
    configured = source is None
    if source is None:
        env = os.environ if environ is None else environ
        source = env.get(ENV_VAR) or DEFAULT_URL
    text = os.fspath(source)
    if "://" in text:
        url, path = async_url(text), sqlite_path(text)
    else:
        # A file path: the service's SQLite driver, on that file.
        url, path = async_url("sqlite://").set(database=text), (Path(text) if text else None)
    backend = url.get_backend_name()
    if backend not in BACKENDS:
        raise ValueError(f"unsupported database {backend!r}; expected sqlite or postgresql")
    if backend != "sqlite" or path is None or path.name == ":memory:":
        return url
    if configured and not path.is_absolute():
        path = PROJECT_ROOT / path
        url = url.set(database=str(path))
    if not path.is_file():
        # aiosqlite would quietly create an empty file and fail later with "no such table".
        raise FileNotFoundError(_no_database(path, shown_url(text) if configured else None))
    return url


def _no_database(path: Path, setting: str | None) -> str:
    """Why a SQLite source cannot be read: the file it names, in full, and where the name came from."""
    missing = f"no SQLite database at {path.absolute()}"
    if setting is None:
        return missing
    return (
        f"{missing} (${ENV_VAR}, or its default, is {setting}: a relative path there is read from "
        f"{PROJECT_ROOT}, where `make serve` runs the service); start the service once to create "
        "it, or name the database to read"
    )


def load_registrations(source: Source = None) -> pd.DataFrame:
    """One row per registration, oldest first; ``email`` masked, ``email_hash`` for identity."""
    r = tables.registrations
    stmt = select(
        r.c.email,
        r.c.email_key,
        r.c.intent,
        r.c.project,
        r.c.message,
        _naive_utc(r.c.created_at),
        _naive_utc(r.c.updated_at),
    ).order_by(r.c.id)

    def convert(frame: pd.DataFrame) -> pd.DataFrame:
        frame["email"] = _shared(frame["email"].map(mask_email))
        # email_key is the service's identity of an address (lower-cased), so hash it, not the display.
        frame["email_hash"] = frame["email_key"].map(email_hash)
        frame["intent"] = _shared(frame["intent"])
        frame["project"] = _shared(_redact(frame["project"]))
        frame["message_length"] = frame["message"].str.strip().str.len()  # before masking
        frame["message"] = _redact(frame["message"])
        return _typed(frame, REGISTRATION_COLUMNS)

    # Oldest first, ties in insertion order: a stable sort of rows read in id order gives exactly
    # ORDER BY created_at, id, without SQLite walking the created_at index row by row (2x slower).
    frame = _fetch(database_url(source), stmt, convert)
    return frame.sort_values("created_at", kind="stable", ignore_index=True)


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
            _naive_utc(d.c.created_at),
            _naive_utc(d.c.updated_at),
            _naive_utc(d.c.delivered_at),
            _naive_utc(e.c.occurred_at),
        )
        # Outer joins: SQLite does not enforce foreign keys; a dangling row should show, not vanish.
        .select_from(d.outerjoin(e, d.c.event_id == e.c.id).outerjoin(p, d.c.partner_id == p.c.id))
        .order_by(d.c.created_at, d.c.id)
    )

    def convert(frame: pd.DataFrame) -> pd.DataFrame:
        return _typed(frame, DELIVERY_COLUMNS)

    return _distinct_names(_fetch(database_url(source), stmt, convert), source, "partner_name", "partner_id")


def load_delivery_batches(source: Source = None) -> pd.DataFrame:
    """One row per delivery: ``batch_id`` (the batch an event went in, else NA) and ``is_batch``
    (the row is a batch request itself, whose members are events). ``deliveries.with_batches``
    joins it to ``load_deliveries``."""
    d = tables.deliveries
    stmt = select(d.c.id, d.c.batch_id, d.c.body.is_not(None).label("is_batch")).order_by(
        d.c.created_at, d.c.id
    )

    def convert(frame: pd.DataFrame) -> pd.DataFrame:
        frame["is_batch"] = frame["is_batch"].map(bool)
        return _typed(frame, BATCH_COLUMNS)

    return _fetch(database_url(source), stmt, convert)


def load_partners(source: Source = None) -> pd.DataFrame:
    """One row per partner, oldest first; no secrets, and no URL (partners often put a token in it)."""
    p = tables.partners
    stmt = select(
        p.c.id, p.c.name, p.c.events, p.c.status, _naive_utc(p.c.created_at), _naive_utc(p.c.updated_at)
    ).order_by(p.c.created_at, p.c.id)

    def convert(frame: pd.DataFrame) -> pd.DataFrame:
        frame["events"] = frame["events"].map(lambda kinds: ",".join(json.loads(kinds)), na_action="ignore")
        return _typed(frame, PARTNER_COLUMNS)

    return _distinct_names(_fetch(database_url(source), stmt, convert), source, "name", "id")


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
            _naive_utc(a.c.started_at),
            a.c.duration_ms,
            a.c.status_code,
            a.c.error_class,
            a.c.response_excerpt,
            a.c.outcome,
        )
        .select_from(a.outerjoin(p, a.c.partner_id == p.c.id))
        .order_by(a.c.started_at, a.c.id)
    )

    def convert(frame: pd.DataFrame) -> pd.DataFrame:
        # A partner's answer may echo the payload, addresses included.
        frame["response_excerpt"] = _redact(frame["response_excerpt"])
        return _typed(frame, ATTEMPT_COLUMNS)

    return _distinct_names(_fetch(database_url(source), stmt, convert), source, "partner_name", "partner_id")


def _naive_utc(column: ColumnElement[Any]) -> ColumnElement[Any]:
    """``column`` read as the naive UTC the schema stores (``tables.UTCDateTime``).

    ``_typed`` localises the whole column to UTC at once; letting ``UTCDateTime`` attach the zone
    to each row instead costs a Python call per value, a third of the load time at a million rows.
    """
    return type_coerce(column, DateTime()).label(column.key)


def _distinct_names(frame: pd.DataFrame, source: Source, name: str, partner_id: str) -> pd.DataFrame:
    """``frame`` with a partner's name followed by its id where another partner has the same name
    (``Acme (ptn_01J...)``): the tables group by name, and two partners named alike (one removed,
    one added again under its name) would otherwise read as one."""
    p = tables.partners
    shared = select(p.c.name).group_by(p.c.name).having(func.count() > 1)
    names = set(_fetch(database_url(source), shared, lambda rows: rows)["name"])
    if not names:
        return frame
    twins = frame[name].isin(names)
    frame.loc[twins, name] = frame.loc[twins, name] + " (" + frame.loc[twins, partner_id] + ")"
    return frame


def _fetch(url: URL, stmt: Select[Any], convert: Convert) -> pd.DataFrame:
    return _run(_fetch_async(url, stmt, convert))


async def _fetch_async(url: URL, stmt: Select[Any], convert: Convert) -> pd.DataFrame:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            result = await conn.stream(stmt.execution_options(yield_per=CHUNK_ROWS))
            columns = list(result.keys())
            chunks = [convert(_frame(rows, columns)) async for rows in result.partitions()]
    finally:
        await engine.dispose()
    if not chunks:
        return convert(pd.DataFrame({name: pd.Series(dtype="object") for name in columns}))
    return pd.concat(chunks, ignore_index=True)


def _frame(rows: Sequence[Sequence[Any]], columns: list[str]) -> pd.DataFrame:
    # Column by column from plain tuples: handing pandas SQLAlchemy rows makes it probe each one
    # for attributes, and a Row answers every probe by raising and catching an error.
    values = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    return pd.DataFrame(
        {name: pd.Series(column, dtype="object") for name, column in zip(columns, values, strict=True)}
    )


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # A notebook kernel already runs a loop and asyncio.run refuses to nest; a thread has none.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _redact(column: pd.Series) -> pd.Series:
    # Only text with an "@" can hold an address; skipping the rest saves a regex call per row.
    candidates = column.notna() & column.astype("str").str.contains("@", regex=False)
    if not candidates.any():
        return column
    out = column.copy()
    out[candidates] = column[candidates].map(redact_emails)
    return out


def _shared(column: pd.Series) -> pd.Series:
    """The same values, with every repeat pointing at one string object.

    Masked addresses, intents and project names repeat a lot; a million rows of them otherwise
    hold a million separate strings.
    """
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    if not len(uniques):  # every value missing (no one named a project in this slice)
        return pd.Series([None] * len(column), index=column.index, dtype="object", name=column.name)
    values = uniques.to_numpy(dtype="object").take(codes, mode="clip")
    values[codes < 0] = None
    return pd.Series(values, index=column.index, dtype="object", name=column.name)


def _typed(frame: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    out = pd.DataFrame(index=frame.index)
    for name, dtype in columns.items():
        if dtype == UTC_TIME:
            # Naive UTC as stored (``_naive_utc``); utc=True states that zone, it guesses nothing.
            out[name] = pd.to_datetime(frame[name], utc=True).astype(UTC_TIME)
        else:
            out[name] = frame[name].astype(dtype)
    return out.reset_index(drop=True)
