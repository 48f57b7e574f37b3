"""Waitlist rows: the SQL for registrations, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, get_args

from email_validator import EmailNotValidError
from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from service.clock import format_timestamp
from service.db.tables import registrations
from service.emails import caseless, identity

COLUMNS = ("email", "intent", "project", "message", "createdAt", "updatedAt")
Intent = Literal["claim", "member", "arcade"]  # claim a room, follow rooms, add arcade
INTENTS: tuple[Intent, ...] = get_args(Intent)


def email_key(address: str) -> str:
    """The identity of an address: two registrations are the same person's when their keys match.

    email-validator's normalised form (Unicode NFC, the domain in IDNA ASCII), lower-cased
    (``service.emails.identity``): ``José@Bücher.example`` in NFC or NFD, with its domain in
    Unicode or as ``xn--bcher-kva.example``, is one key. The waitlist stores each (key, intent)
    once, and erasure removes every row of a key, so both compute it here and nowhere else. An
    address email-validator refuses (only rows stored under older rules can hold one) keys as its
    NFC form lower-cased (its local part ``caseless``).
    """
    address = address.strip()
    try:
        return identity(address)
    except EmailNotValidError:
        local, at, domain = unicodedata.normalize("NFC", address).rpartition("@")
        return f"{caseless(local)}{at}{domain.lower()}" if at else caseless(domain)


class Registration(NamedTuple):
    """One registration as the route accepted it (a tuple: built on every request, 0.3 µs)."""

    email: str  # trimmed, as submitted
    email_key: str  # the identity of the address (``email_key``)
    intent: str
    project: str | None
    message: str | None
    at: datetime


def _merge(entries: Sequence[Registration]) -> list[Registration]:
    """One row per (email_key, intent): a batch may hold repeats, and an upsert may touch a row once."""
    merged: dict[tuple[str, str], Registration] = {}
    for entry in entries:
        key = (entry.email_key, entry.intent)
        earlier = merged.get(key)
        if earlier is None:
            merged[key] = entry
        else:
            merged[key] = Registration(
                email=earlier.email,
                email_key=entry.email_key,
                intent=entry.intent,
                project=entry.project if entry.project is not None else earlier.project,
                message=entry.message if entry.message is not None else earlier.message,
                at=entry.at,
            )
    return list(merged.values())


def batch_order(entries: Sequence[Registration]) -> list[Registration]:
    """A batch as it is written: repeats merged, then in key order.

    In key order, two processes upserting overlapping batches take the rows' locks in the same
    order, and one waits for the other instead of both deadlocking (PostgreSQL found such deadlocks
    under two server processes registering the same addresses).
    """
    return sorted(_merge(entries), key=lambda entry: (entry.email_key, entry.intent))


def _upsert(insert: Any) -> Any:
    statement = insert(registrations)
    return statement.on_conflict_do_update(
        index_elements=[registrations.c.email_key, registrations.c.intent],
        set_={
            "project": func.coalesce(statement.excluded.project, registrations.c.project),
            "message": func.coalesce(statement.excluded.message, registrations.c.message),
            "updated_at": statement.excluded.updated_at,
        },
    )


# Store each (email, intent) once; a repeat updates project and message only where it has them.
# Executed by ``service.db.writer``, one batch per driver call.
UPSERT = {"postgresql": _upsert(postgresql.insert), "sqlite": _upsert(sqlite.insert)}


def _entry(row: Any) -> dict[str, Any]:
    return {
        "email": row.email,
        "intent": row.intent,
        "project": row.project,
        "message": row.message,
        "createdAt": format_timestamp(row.created_at),
        "updatedAt": format_timestamp(row.updated_at),
    }


async def list_registrations(
    conn: AsyncConnection, *, limit: int | None = None, offset: int = 0
) -> list[dict[str, Any]]:
    query = select(registrations).order_by(registrations.c.id).offset(offset)
    if limit is not None:
        query = query.limit(limit)
    result = await conn.execute(query)
    return [_entry(row) for row in result]


async def iter_registrations(conn: AsyncConnection) -> AsyncIterator[dict[str, Any]]:
    """Every registration in insertion order, streamed so an export of millions stays small."""
    result = await conn.stream(select(registrations).order_by(registrations.c.id))
    async for row in result:
        yield _entry(row)


async def count_registrations(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.count()).select_from(registrations))).scalar_one())


async def erase_registrations(conn: AsyncConnection, key: str) -> int:
    """Delete every registration of one address, whatever its intent; how many rows went."""
    result = await conn.execute(delete(registrations).where(registrations.c.email_key == key))
    return int(result.rowcount)
