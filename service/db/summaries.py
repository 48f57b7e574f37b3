"""What the operator console reads: counts over time ranges and pages of rows, by key.

Every read here is bounded by an index (migration 0010 adds the ones the console needs): listings
page by key, newest first (``created_at`` then ``id``, strictly before the last row shown), never
by OFFSET, so page 1,000 costs what page 1 costs; summaries count a time range of an index
(``ix_registrations_intent_created``, ``ix_deliveries_created``, ``ix_delivery_attempts_partner_started``).
The same statements run on SQLite and PostgreSQL; only the hour and day of a timestamp are spelt
per database (``hour_of``, ``day_of``).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import idna
from sqlalchemy import ColumnElement, Select, String, and_, bindparam, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from service.db.tables import FAILED, deliveries, delivery_attempts, events, partners, registrations, workers
from service.emails import caseless
from service.states import PartnerStatus
from service.text import text_fault, visible

LAST_CHARACTER = "\U0010ffff"  # sorts after every character: text starting with P is below P + this


class hour_of(FunctionElement[Any]):
    """The hour a timestamp falls in (``YYYY-MM-DD HH``), per database."""

    type = String()
    inherit_cache = True


class day_of(FunctionElement[Any]):
    """The day a timestamp falls in (``YYYY-MM-DD``), per database."""

    type = String()
    inherit_cache = True


@compiles(hour_of, "sqlite")
def _hour_sqlite(element: hour_of, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLite stores the time as text, "YYYY-MM-DD HH:MM:SS.ffffff": its prefix is the hour,
    # read several times faster than strftime parses it.
    return f"substr({compiler.process(element.clauses, **kw)}, 1, 13)"


@compiles(hour_of, "postgresql")
def _hour_postgresql(element: hour_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"to_char({compiler.process(element.clauses, **kw)}, 'YYYY-MM-DD HH24')"


@compiles(day_of, "sqlite")
def _day_sqlite(element: day_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"substr({compiler.process(element.clauses, **kw)}, 1, 10)"


@compiles(day_of, "postgresql")
def _day_postgresql(element: day_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"to_char({compiler.process(element.clauses, **kw)}, 'YYYY-MM-DD')"


@dataclass(frozen=True, slots=True)
class Key:
    """Where a newest-first page stops: the last row's creation time and id."""

    created_at: datetime
    id: str

    def token(self) -> str:
        return f"{self.created_at.astimezone(UTC).isoformat()}~{self.id}"

    @classmethod
    def parse(cls, token: str) -> Key | None:
        """From ``token()``'s text; None for anything else (a page link edited by hand), and for
        what no database stores, which PostgreSQL's driver refuses with an error: an id holding
        a NUL or a lone surrogate, a moment outside years 1 to 9999 once in UTC."""
        moment, sep, row_id = token.partition("~")
        if not sep or not row_id or len(token) > 200 or text_fault(row_id) is not None:
            return None
        try:
            created = datetime.fromisoformat(moment)
            if created.utcoffset() is None:
                return None
            return cls(created.astimezone(UTC), row_id)
        except (ValueError, OverflowError):
            return None


def _before(created: Any, row_id: Any, key: Key | None) -> ColumnElement[bool] | None:
    if key is None:
        return None
    return tuple_(created, row_id) < tuple_(key.created_at, key.id)


# --- registrations --------------------------------------------------------------------------------


# How the counts stay ranges of an index on both databases: the grouped column is also held to
# the list of its values (``intent IN (...)``), so the composite index (intent, created_at) serves
# the time range under each value, covering, and yields the groups in order; where no such index
# exists, the group is an expression no index orders, so the time range's index is read. Left to
# group a bare time range, SQLite (which plans without statistics) walked the whole index that
# yields rows in GROUP BY order instead: 0.3 to 0.9 s at 10^6 rows, against 1 to 25 ms.


async def registrations_before(
    conn: AsyncConnection, *, until: datetime, intents: Sequence[str]
) -> dict[str, int]:
    """Per intent, the registrations created before ``until`` (each a range of one index)."""
    r = registrations.c
    counts = {}
    for intent in intents:
        stmt = select(func.count()).where(r.intent == intent, r.created_at < until)
        counts[intent] = int(await conn.scalar(stmt) or 0)
    return counts


async def registration_counts(
    conn: AsyncConnection, *, since: datetime, day: datetime, intents: Sequence[str]
) -> dict[str, tuple[int, int]]:
    """Per intent: the registrations created since ``since``, and of those, since ``day``."""
    r = registrations.c
    stmt = (
        select(r.intent, func.count(), func.count().filter(r.created_at >= day))
        .where(r.intent.in_(list(intents)), r.created_at >= since)
        .group_by(r.intent)
    )
    return {intent: (count, daily) for intent, count, daily in await conn.execute(stmt)}


async def registrations_by_day(
    conn: AsyncConnection, *, since: datetime, intents: Sequence[str]
) -> list[tuple[date, str, int]]:
    """(day, intent, registrations) for every day since ``since`` that had any."""
    r = registrations.c
    stmt = (
        select(day_of(r.created_at).label("day"), r.intent, func.count())
        .where(r.intent.in_(list(intents)), r.created_at >= since)
        .group_by(r.intent, "day")
    )
    return [(date.fromisoformat(day), intent, count) for day, intent, count in await conn.execute(stmt)]


def _domain_text(domain: str) -> str:
    """Typed domain text as email-validator reads a domain before encoding it: UTS-46 mapped (lower
    case, NFC, full-width dots as dots); text it refuses, which no valid key holds, NFC lower-cased."""
    if domain.isascii():
        return domain.lower()
    try:
        return idna.uts46_remap(domain, std3_rules=False, transitional=False)
    except idna.IDNAError:
        return unicodedata.normalize("NFC", domain).lower()


def _ascii_label(label: str) -> str:
    """A complete domain label as ``email_key`` holds it: its IDNA ASCII form."""
    if label.isascii():
        return label
    try:
        return idna.alabel(label).decode("ascii")
    except idna.IDNAError:  # no valid address has it: left as typed
        return label


def _key_start(text: str) -> tuple[str, str]:
    """The start of an address as the start of its ``email_key`` (``service.db.registrations``), in
    two parts: the local part (NFC, ``caseless``), "@" and each complete label (one a dot follows) in
    IDNA ASCII; then the label the text ends in, mapped as a domain is but not encoded: it may begin
    a longer label, whose IDNA ASCII form its own does not start. Without an @-sign, all local part."""
    local, at, domain = text.rpartition("@")
    if not at:
        return caseless(unicodedata.normalize("NFC", text)), ""
    *complete, last = _domain_text(domain).split(".")
    labels = "".join(_ascii_label(label) + "." for label in complete)
    return f"{caseless(unicodedata.normalize('NFC', local))}@{labels}", last


def _decoded_label_starts(key: str, base: str, label: str) -> bool:
    """Whether the IDNA ASCII label of ``key`` after ``base``, decoded, starts with ``label``."""
    found = key[len(base) :].split(".", 1)[0]
    try:
        return found.removeprefix("xn--").encode("ascii").decode("punycode").startswith(label)
    except UnicodeError:
        return False


def _starting(stmt: Select[Any], start: str) -> Select[Any]:
    """``stmt`` kept to the rows whose ``email_key`` starts with ``start``: a range of its unique
    index finds them, and LIKE keeps exactly those that start so. The values are written into the
    statement: PostgreSQL's generic plan of a prepared statement, not knowing them, walked every
    registration newest first for a prefix matching none."""
    r = registrations.c
    escaped = start.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return stmt.where(
        r.email_key >= bindparam("prefix_low", start, literal_execute=True),
        r.email_key < bindparam("prefix_high", start + LAST_CHARACTER, literal_execute=True),
        r.email_key.like(bindparam("prefix_like", escaped + "%", literal_execute=True), escape="\\"),
    )


async def registrations_page(
    conn: AsyncConnection, *, intent: str | None, prefix: str | None, after: Key | None, limit: int
) -> list[dict[str, Any]]:
    """Registrations newest first, ``limit`` of them after ``after``; ``prefix`` is the start of an
    address as registered or listed, in any case or Unicode form: a range of the unique index on
    ``email_key`` (``_key_start``), sorted newest first (a prefix that matches most of the list
    sorts most of it).

    The label a prefix ends in may also begin an internationalised label, which the key holds in
    IDNA ASCII: ``xn--``, the label's ASCII characters in order, then the others encoded. So a second
    range (``xn--`` and the typed label's ASCII characters: one local part's internationalised
    domains, few) is read newest first, keeping the rows whose label decodes to one starting as
    typed until ``limit`` are kept; the page is the newest ``limit`` of both."""
    r = registrations.c
    stmt = select(r.id, r.email, r.intent, r.project, r.message, r.created_at).order_by(
        r.created_at.desc(), r.id.desc()
    )
    if after is not None:
        try:
            last_id = int(after.id)
        except ValueError:
            return []
        stmt = stmt.where(tuple_(r.created_at, r.id) < tuple_(after.created_at, last_id))
    if intent is not None:
        stmt = stmt.where(r.intent == intent)
    if not prefix:
        return [dict(row._mapping) for row in await conn.execute(stmt.limit(limit))]
    base, label = _key_start(prefix)
    found = [dict(row._mapping) for row in await conn.execute(_starting(stmt, base + label).limit(limit))]
    if not label:
        return found
    encoded = base + "xn--" + "".join(character for character in label if character.isascii())
    async with conn.stream(_starting(stmt.add_columns(r.email_key), encoded)) as rows:
        kept = 0
        async for row in rows:
            if _decoded_label_starts(row.email_key, base, label):
                found.append({name: value for name, value in row._mapping.items() if name != "email_key"})
                kept += 1
                if kept == limit:  # the newest ``limit`` of this range: all the page can take from it
                    break
    unique = {entry["id"]: entry for entry in found}  # a label like "xn" starts both ranges
    return sorted(unique.values(), key=lambda entry: (entry["created_at"], entry["id"]), reverse=True)[:limit]


# --- deliveries -----------------------------------------------------------------------------------


async def deliveries_by_status(conn: AsyncConnection, *, since: datetime) -> dict[str, int]:
    """Deliveries created since ``since``, counted by their status now."""
    d = deliveries.c
    # Grouped by an expression no index orders, so both databases read the time range of
    # ix_deliveries_created rather than walk another index in status order.
    status = func.coalesce(d.status, "").label("status")
    stmt = select(status, func.count()).where(d.created_at >= since).group_by(status)
    return {found: count for found, count in await conn.execute(stmt)}


async def failed_since(conn: AsyncConnection, *, since: datetime) -> dict[str, int]:
    """Per partner: its deliveries failed now that ended so since ``since`` (their last change),
    counted as ``service_webhook_failed_deliveries`` counts them: through ix_deliveries_failed,
    which holds the failed rows only. A delivery failed again after a retry is one; one retried and
    delivered since, or cancelled with its removed partner, is none."""
    d = deliveries.c
    stmt = select(d.partner_id, func.count()).where(FAILED, d.updated_at >= since).group_by(d.partner_id)
    return {partner_id: count for partner_id, count in await conn.execute(stmt)}


async def deliveries_page(
    conn: AsyncConnection,
    *,
    partner_id: str | None,
    status: str | None,
    event_id: str | None,
    after: Key | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Deliveries newest first, ``limit`` of them after ``after``, with their event kind."""
    query = deliveries_query(
        partner_id=partner_id, status=status, event_id=event_id, after=after, limit=limit
    )
    return [dict(row._mapping) for row in await conn.execute(query)]


def deliveries_query(
    *, partner_id: str | None, status: str | None, event_id: str | None, after: Key | None, limit: int
) -> Select[Any]:
    """``deliveries_page``'s statement."""
    d = deliveries.c
    stmt = (
        select(
            d.id,
            d.event_id,
            events.c.kind,
            d.partner_id,
            d.status,
            d.attempts,
            d.next_attempt_at,
            d.created_at,
            d.delivered_at,
            d.batch_id,
        )
        .join(events, events.c.id == d.event_id)
        .order_by(d.created_at.desc(), d.id.desc())
        .limit(limit)
    )
    conditions = [
        condition
        for condition in (
            _before(d.created_at, d.id, after),
            d.partner_id == partner_id if partner_id is not None else None,
            # Written into the statement, so each planner sees which status it is and reads a
            # partial index for the few (failed, cancelled; migration 0015).
            d.status == bindparam("status", status, literal_execute=True) if status is not None else None,
            d.event_id == event_id if event_id is not None else None,
        )
        if condition is not None
    ]
    if conditions:
        stmt = stmt.where(and_(*conditions))
    return stmt


async def delivery(conn: AsyncConnection, delivery_id: str) -> dict[str, Any] | None:
    """One delivery with its event's payload (or its batch's body) and every attempt, in order."""
    d = deliveries.c
    row = (
        await conn.execute(
            select(
                d.id,
                d.event_id,
                events.c.kind,
                d.partner_id,
                d.status,
                d.attempts,
                d.next_attempt_at,
                d.created_at,
                d.updated_at,
                d.delivered_at,
                d.batch_id,
                d.body,
                events.c.payload,
                # The worker holding its claim, as the roster last saw it (none once it left).
                workers.c.host.label("claimed_by_host"),
                workers.c.pid.label("claimed_by_pid"),
                workers.c.seen_at.label("claimed_by_seen_at"),
            )
            .join(events, events.c.id == d.event_id)
            .outerjoin(workers, workers.c.id == d.claimed_by)
            .where(d.id == delivery_id)
        )
    ).first()
    if row is None:
        return None
    found = dict(row._mapping)
    a = delivery_attempts.c
    attempts = await conn.execute(
        select(
            a.attempt,
            a.started_at,
            a.duration_ms,
            a.status_code,
            a.error_class,
            a.response_excerpt,
            a.outcome,
        )
        .where(a.delivery_id == delivery_id)
        .order_by(a.attempt, a.id)
    )
    found["attempt_log"] = [dict(attempt._mapping) for attempt in attempts]
    return found


def pretty(payload: str) -> str:
    """A stored JSON body, indented for reading, each character that hides or reorders text on
    screen written as its ``\\uXXXX`` escape (``service.text.visible``): the same JSON, meaning the
    same thing, but a right-to-left override can no longer make "00.001$" read as "$100.00". As
    stored, those characters escaped alike, when it is not JSON. Partners are sent the stored body,
    unchanged."""
    try:
        text = json.dumps(json.loads(payload), indent=2, ensure_ascii=False)
    except ValueError:
        text = payload
    return visible(text)


# --- partners -------------------------------------------------------------------------------------


async def attempts_by_hour(
    conn: AsyncConnection, *, partner_id: str, since: datetime
) -> list[tuple[datetime, str, int]]:
    """(hour, outcome, attempts) of one partner since ``since``."""
    a = delivery_attempts.c
    stmt = (
        select(hour_of(a.started_at).label("hour"), a.outcome, func.count())
        .where(a.partner_id == partner_id, a.started_at >= since)
        .group_by("hour", a.outcome)
    )
    return [
        (datetime.strptime(hour, "%Y-%m-%d %H").replace(tzinfo=UTC), outcome, count)
        for hour, outcome, count in await conn.execute(stmt)
    ]


async def partner_names(
    conn: AsyncConnection, ids: Sequence[str] | None = None, *, removed: bool = True
) -> dict[str, str]:
    """Partner id to name, for every partner (or the ones named); removed ones too unless not
    ``removed`` (what may be chosen: their history still names them, nothing else does)."""
    stmt = select(partners.c.id, partners.c.name)
    if ids is not None:
        stmt = stmt.where(partners.c.id.in_(list(ids)))
    if not removed:
        stmt = stmt.where(partners.c.status != PartnerStatus.REMOVED)
    return {partner_id: name for partner_id, name in await conn.execute(stmt)}
