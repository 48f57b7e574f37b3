"""The operator's read-only use cases for the console: summaries over time and pages by key.

Each method opens one connection, calls the reads of ``service.db.summaries`` and answers with
plain data the console's templates show. Nothing here writes: the console's actions call
``service.webhooks.operations.Operations`` and ``service.registrations_ops.RegistrationOperations``.
Query parameters are checked here, so a hand-edited page link is a clear ``InvalidInput``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, get_args

from sqlalchemy.ext.asyncio import AsyncEngine

from service.clock import Clock
from service.db import summaries
from service.db.registrations import Intent
from service.db.summaries import Key
from service.exceptions import invalid
from service.params import ascii_whole, refuse_unknown, text
from service.states import DeliveryStatus

PAGE = 50  # rows per console page
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
CHART_DAYS = 14  # the overview's daily registrations chart
CHART_HOURS = 24  # a partner's hourly attempts chart
INTENTS: tuple[str, ...] = get_args(Intent)
OUTCOMES = ("delivered", "retry", "failed", "paused")  # what an attempt ends as (delivery_attempts)
MAX_QUERY = 320  # a search is a piece of an address at most


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[dict[str, Any]]
    next: str | None  # the ``after`` token of the following page; None on the last


# Row ids the registrations table holds: a signed 64-bit integer (SQLite's INTEGER, PostgreSQL's
# BIGINT), positive; a page link with any other id was edited by hand.
ROW_ID_MAX = 2**63 - 1


def _key(args: Mapping[str, str], *, numbered: bool = False) -> Key | None:
    """The page's ``after`` token, if given; ``numbered`` for a listing whose rows have whole
    numbers for ids."""
    token = args.get("after")
    if token is None:
        return None
    key = Key.parse(token)
    if key is not None and numbered:
        row_id = ascii_whole(key.id)
        key = key if row_id is not None and 0 < row_id <= ROW_ID_MAX else None
    if key is None:
        raise invalid("after", "invalid", "Not a page of this listing; start again from the first page.")
    return key


def _page(rows: list[dict[str, Any]], limit: int) -> Page:
    if len(rows) <= limit:
        return Page(rows, None)
    last = rows[limit - 1]
    return Page(rows[:limit], Key(last["created_at"], str(last["id"])).token())


def _status(args: Mapping[str, str]) -> str | None:
    status = text(args, "status")
    if status is not None and status not in DeliveryStatus.__members__.values():
        raise invalid("status", "invalid", f"Must be one of: {', '.join(DeliveryStatus)}.")
    return status


@dataclass
class Totals:
    """Registrations per intent created before the start of an hour, counted once for that hour.

    Counting every registration reads a whole index (10^6 rows: about 0.2 s on SQLite); rows
    created before an hour began only change by erasure, so a process counts them once an hour
    and adds the current hour's, a short range, at every read. An erasure through this process
    forgets the count; one through another process shows within the hour.
    """

    hour: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def forget(self) -> None:
        self.hour = None


@dataclass
class Summaries:
    engine: AsyncEngine
    clock: Clock
    totals: Totals = field(default_factory=Totals)

    async def overview(self) -> dict[str, Any]:
        """Registrations per intent (all, 7 days, 24 hours, and per day over two weeks), the
        deliveries of the last 24 hours by status, and failures per partner over 24 hours."""
        now = self.clock()
        hour = now.replace(minute=0, second=0, microsecond=0)
        first_day = now.date() - timedelta(days=CHART_DAYS - 1)
        since = datetime.combine(first_day, datetime.min.time(), tzinfo=now.tzinfo)
        async with self.engine.connect() as conn:
            if self.totals.hour != hour:
                self.totals.counts = await summaries.registrations_before(conn, until=hour, intents=INTENTS)
                self.totals.hour = hour
            this_hour = await summaries.registration_counts(conn, since=hour, day=hour, intents=INTENTS)
            recent = await summaries.registration_counts(
                conn, since=now - WEEK, day=now - DAY, intents=INTENTS
            )
            daily = await summaries.registrations_by_day(conn, since=since, intents=INTENTS)
            delivered = await summaries.deliveries_by_status(conn, since=now - DAY)
            failed = await summaries.failed_since(conn, since=now - DAY)
        days = [first_day + timedelta(days=offset) for offset in range(CHART_DAYS)]
        per_day: dict[str, dict[date, int]] = {intent: dict.fromkeys(days, 0) for intent in INTENTS}
        for day, intent, count in daily:
            per_day.setdefault(intent, dict.fromkeys(days, 0))[day] = count
        by_intent = {
            intent: (
                self.totals.counts.get(intent, 0) + this_hour.get(intent, (0, 0))[0],
                *recent.get(intent, (0, 0)),
            )
            for intent in INTENTS
        }
        return {
            "registrations": by_intent,
            "daily": {intent: list(values.items()) for intent, values in per_day.items()},
            "deliveries": delivered,
            "failed": failed,
        }

    async def partner_activity(self, partner_id: str) -> dict[str, Any]:
        """One partner's attempts per hour over the last day, by outcome, and its success rate."""
        now = self.clock()
        hour = now.replace(minute=0, second=0, microsecond=0)
        first = hour - timedelta(hours=CHART_HOURS - 1)
        async with self.engine.connect() as conn:
            rows = await summaries.attempts_by_hour(conn, partner_id=partner_id, since=first)
        hours = [first + timedelta(hours=offset) for offset in range(CHART_HOURS)]
        table = {moment: dict.fromkeys(OUTCOMES, 0) for moment in hours}
        for moment, outcome, count in rows:
            if moment in table:
                table[moment][outcome] = table[moment].get(outcome, 0) + count
        attempts = sum(sum(counts.values()) for counts in table.values())
        delivered = sum(counts["delivered"] for counts in table.values())
        return {
            "hours": list(table.items()),
            "attempts": attempts,
            "successRate": delivered / attempts if attempts else None,
        }

    async def deliveries(self, args: Mapping[str, str], *, limit: int = PAGE) -> Page:
        """``?partner=&status=&event=&after=``: deliveries newest first, a page at a time."""
        refuse_unknown(args, ("partner", "status", "event", "after"))
        async with self.engine.connect() as conn:
            rows = await summaries.deliveries_page(
                conn,
                partner_id=text(args, "partner"),
                status=_status(args),
                event_id=text(args, "event"),
                after=_key(args),
                limit=limit + 1,
            )
        return _page(rows, limit)

    async def delivery(self, delivery_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            found = await summaries.delivery(conn, delivery_id)
        if found is not None:
            found["pretty"] = summaries.pretty(found["body"] or found["payload"])
        return found

    async def registrations(self, args: Mapping[str, str], *, limit: int = PAGE) -> Page:
        """``?intent=&q=&after=``: registrations newest first, a page at a time; ``q`` is the start
        of an address."""
        refuse_unknown(args, ("intent", "q", "after"))
        intent = text(args, "intent")
        if intent is not None and intent not in INTENTS:
            raise invalid("intent", "invalid", f"Must be one of: {', '.join(INTENTS)}.")
        query = (text(args, "q") or "").strip()
        if len(query) > MAX_QUERY:
            raise invalid("q", "too_long", f"Must be at most {MAX_QUERY} characters.")
        async with self.engine.connect() as conn:
            rows = await summaries.registrations_page(
                conn, intent=intent, prefix=query or None, after=_key(args, numbered=True), limit=limit + 1
            )
        return _page(rows, limit)

    async def partner_names(self, *, removed: bool = True) -> dict[str, str]:
        """Every partner's name by id; without the removed ones unless ``removed``."""
        async with self.engine.connect() as conn:
            return await summaries.partner_names(conn, removed=removed)
