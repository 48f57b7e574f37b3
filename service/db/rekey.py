"""Registrations keyed again after ``email_key`` changed (migrations 0005 and 0018).

Rows whose keys now coincide for one intent are one registration: the earliest row stays, with the
latest project and message any of them carried (what a repeat does) and the latest update time;
the others are deleted. Different intents stay different registrations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from service.db.registrations import email_key
from service.db.tables import UTCDateTime

REGISTRATIONS = sa.table(
    "registrations",
    sa.column("id", sa.Integer()),
    sa.column("email", sa.String()),
    sa.column("email_key", sa.String()),
    sa.column("intent", sa.String()),
    sa.column("project", sa.String()),
    sa.column("message", sa.Text()),
    sa.column("created_at", UTCDateTime()),
    sa.column("updated_at", UTCDateTime()),
)


def rekey_registrations(bind: Connection, rows: Sequence[Any] | None = None) -> None:
    """Key again ``rows`` of the registrations (every one if None), and merge each with the rows its
    new key meets: they must hold, with each row, every row of its new key."""
    table = REGISTRATIONS
    if rows is None:
        rows = bind.execute(sa.select(table)).all()
    groups: dict[tuple[str, str], list[Any]] = {}
    for row in sorted(rows, key=lambda row: (row.created_at, row.id)):
        groups.setdefault((email_key(row.email), row.intent), []).append(row)
    pending: list[tuple[int, dict[str, Any]]] = []
    for (key, _intent), rows in groups.items():
        keep, *merged = rows
        values: dict[str, Any] = {}
        if merged:
            latest = sorted(rows, key=lambda row: (row.updated_at, row.id))
            projects = [row.project for row in latest if row.project is not None]
            messages = [row.message for row in latest if row.message is not None]
            values = {
                "project": projects[-1] if projects else None,
                "message": messages[-1] if messages else None,
                "updated_at": latest[-1].updated_at,
            }
            bind.execute(table.delete().where(table.c.id.in_([row.id for row in merged])))
        if key != keep.email_key or values:
            values["email_key"] = key
            # Another row may still hold this key as its old one: each row first takes a key no
            # address has (no @), unique to it, then its new one once every row has moved.
            bind.execute(table.update().where(table.c.id == keep.id).values(email_key=f"rekey:{keep.id}"))
            pending.append((keep.id, values))
    for row_id, values in pending:
        bind.execute(table.update().where(table.c.id == row_id).values(**values))
