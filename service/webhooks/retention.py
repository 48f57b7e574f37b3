"""Retention: what is deleted once it is older than ``SERVICE_RETENTION_DAYS``, and how.

- A settled delivery (``states.SETTLED``: nothing changes it any more unless an operator acts) is
  old once its last change (``updated_at``: when it was delivered or failed for good) is older
  than the retention. It goes with its attempt rows.
- An event is old once it was stored (``created_at``) before the cut-off and no delivery of it is
  left, so an event with one delivery still waiting is kept whole. Registrations and partners are
  never pruned.
- The sitemap lists the rooms events name (``service.db.rooms``): of the old events naming a room,
  the newest is kept (its deliveries are pruned as any other), so sitemap.xml keeps every room it
  has learnt, with the same last-modified time.

Rows go in batches of ``BATCH``, one short transaction each: candidates are found by a read (which
never holds SQLite's write lock), and the write deletes only those still settled and old. Between
batches the pruning rests, so that it works at most ``DUTY`` of the time (a batch that took 5 ms is
followed by 20 ms of rest): delivery, which shares the database and, in the worker, the event loop
and its CPU, keeps most of both. A first backlog of 10^5 settled deliveries takes a minute or two;
an hour's worth, what the worker finds each hour, a moment. On PostgreSQL the write locks them
first, so a replay racing the pruning waits for one batch and then finds its delivery gone or
untouched. The worker passes its own transaction lock, so its deliveries' bookkeeping waits for one
batch at most.

Each pass first cancels what a removed partner was left waiting (``cancel_stranded``): a publish
that read the partner as active just before its removal committed stores its delivery after the
removal cancelled the rest (``partners.remove_partner``). Nothing sends, cancels or prunes such a
row (claims take active partners only), and the queue gauges would count it for ever. It becomes
``cancelled``, as the removal would have made it, and is pruned a retention later. The removed
partners are few and each one's waiting rows are read through the partial indexes of waiting rows
(``ix_deliveries_partner_claimable``, ``ix_deliveries_batching``), so the pass costs a few index
probes an hour and delivery nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, Integer, bindparam, delete, exists, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from service.db.engine import brief_transaction
from service.db.rooms import ROOM_KINDS, room_of
from service.db.tables import BATCHING, CLAIMABLE_WHERE, deliveries, delivery_attempts, events, partners
from service.states import SETTLED, DeliveryStatus, PartnerStatus
from service.webhooks.partners import UNDELIVERED

log = logging.getLogger(__name__)

BATCH = 500  # rows per transaction: a few milliseconds of the write lock
DUTY = 0.2  # the share of the time pruning works; it rests the remainder (benchmarks/prune.py)


@dataclass(slots=True)
class Pruned:
    """What one pruning deleted."""

    deliveries: int = 0
    attempts: int = 0
    events: int = 0
    cancelled: int = 0  # waiting deliveries of removed partners cancelled (cancel_stranded)

    def document(self) -> dict[str, int]:
        return {
            "deliveries": self.deliveries,
            "attempts": self.attempts,
            "events": self.events,
            "cancelled": self.cancelled,
        }


def _old_settled(cutoff: datetime) -> ColumnElement[bool]:
    return deliveries.c.status.in_([str(status) for status in SETTLED]) & (deliveries.c.updated_at < cutoff)


def _no_delivery() -> ColumnElement[bool]:
    return ~exists().where(deliveries.c.event_id == events.c.id)


class _Pacer:
    """Rests after each step for as long as keeps the work at ``duty`` of the time."""

    def __init__(self, duty: float) -> None:
        if not 0 < duty <= 1:
            raise ValueError("duty must be in (0, 1]")
        self._rest_per_work = 1 / duty - 1
        self._started = time.monotonic()

    async def rest(self) -> None:
        worked = time.monotonic() - self._started
        await asyncio.sleep(worked * self._rest_per_work)  # at least one turn of the loop
        self._started = time.monotonic()


@contextlib.asynccontextmanager
async def _held(lock: asyncio.Lock | None) -> AsyncIterator[None]:
    if lock is None:
        yield
    else:
        async with lock:
            yield


async def prune(
    engine: AsyncEngine,
    *,
    now: datetime,
    older_than: timedelta,
    batch: int = BATCH,
    lock: asyncio.Lock | None = None,
    duty: float = DUTY,
) -> Pruned:
    """Cancel what removed partners were left waiting (``cancel_stranded``), then delete settled
    deliveries, their attempts and delivery-less events older than ``older_than``.

    Each batch is one transaction, taken under ``lock`` when given; between batches it rests so
    that it works ``duty`` of the time.
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    pruned = Pruned()
    pacer = _Pacer(duty)
    pruned.cancelled = await cancel_stranded(engine, now=now, batch=batch, lock=lock, pacer=pacer)
    try:
        cutoff = now - older_than
    except OverflowError:  # before the year 1: nothing stored is that old
        return pruned
    await _prune_deliveries(engine, cutoff, pruned, batch=batch, lock=lock, pacer=pacer)
    await _prune_events(engine, cutoff, pruned, batch=batch, lock=lock, pacer=pacer)
    return pruned


# The removed partners: never pruned, so this lists every partner ever removed (a few rows).
_REMOVED = select(partners.c.id).where(partners.c.status == PartnerStatus.REMOVED).order_by(partners.c.id)
_EVER = datetime(1, 1, 1, tzinfo=UTC)  # before every row's next_attempt_at
# A partner's waiting rows, each set read through its partial index: the index's own predicate, as
# literal text, lets both planners use it. The range on the index's second column changes no answer
# (every row is due after _EVER); without it SQLite reads the partner's rows by the table's key
# (partner_id, id), its whole history, as service.webhooks.stats explains for the gauges.
_STRANDED = tuple(
    select(deliveries.c.id)
    .where(deliveries.c.partner_id == bindparam("b_partner"), waiting, deliveries.c.next_attempt_at >= _EVER)
    .limit(bindparam("b_limit", type_=Integer()))
    for waiting in (CLAIMABLE_WHERE, BATCHING)  # pending and delivering; batching
)
# As partners.remove_partner leaves them.
_CANCELLED = {"status": DeliveryStatus.CANCELLED, "claim_token": None, "claimed_until": None}


async def cancel_stranded(
    engine: AsyncEngine,
    *,
    now: datetime,
    batch: int = BATCH,
    lock: asyncio.Lock | None = None,
    pacer: _Pacer | None = None,
) -> int:
    """Cancel the deliveries of removed partners still waiting to be sent, and the members of
    any batch among them; how many rows were cancelled.

    Candidates are read first (outside ``lock``), ``batch`` at a time, and the write cancels only
    those still waiting, in one transaction under ``lock``.
    """
    pacer = pacer or _Pacer(DUTY)
    async with engine.connect() as conn:
        removed = list(await conn.scalars(_REMOVED))
    cancelled = 0
    while removed:
        ids: list[str] = []
        still: list[str] = []  # the partners that may have more waiting: read again after the write
        async with engine.connect() as conn:
            for partner_id in removed:
                found = 0
                for stranded in _STRANDED:
                    if len(ids) < batch:
                        params = {"b_partner": partner_id, "b_limit": batch - len(ids)}
                        rows = list(await conn.scalars(stranded, params))
                        ids += rows
                        found += len(rows)
                if found or len(ids) >= batch:
                    still.append(partner_id)
        if not ids:
            break
        async with _held(lock), brief_transaction(engine) as conn:
            values = {**_CANCELLED, "updated_at": now}
            # A batch's members first: they name the batch, which stays waiting until the next statement.
            members = await conn.execute(
                update(deliveries)
                .where(deliveries.c.batch_id.in_(ids), deliveries.c.status == DeliveryStatus.BATCHED)
                .values(**values)
            )
            waiting = await conn.execute(
                update(deliveries)
                .where(deliveries.c.id.in_(ids), deliveries.c.status.in_(UNDELIVERED))
                .values(**values)
            )
        cancelled += members.rowcount + waiting.rowcount
        removed = still
        if len(ids) < batch:
            break
        await pacer.rest()
    if cancelled:
        log.warning(
            "cancelled deliveries left waiting for removed partners (a publish raced a removal)",
            extra={"cancelled": cancelled},
        )
    return cancelled


async def _prune_deliveries(
    engine: AsyncEngine,
    cutoff: datetime,
    pruned: Pruned,
    *,
    batch: int,
    lock: asyncio.Lock | None,
    pacer: _Pacer,
) -> None:
    old = _old_settled(cutoff)
    while True:
        async with engine.connect() as conn:
            ids = list(await conn.scalars(select(deliveries.c.id).where(old).limit(batch)))
        if not ids:
            return
        async with _held(lock), brief_transaction(engine) as conn:
            doomed = deliveries.c.id.in_(ids) & old
            if conn.dialect.name == "postgresql":
                # Lock them, so nothing requeues one between its attempts' deletion and its own.
                await conn.execute(select(deliveries.c.id).where(doomed).with_for_update())
            # On SQLite this first statement takes the write lock, so the two deletes agree.
            attempts = await conn.execute(
                delete(delivery_attempts).where(
                    delivery_attempts.c.delivery_id.in_(select(deliveries.c.id).where(doomed))
                )
            )
            gone = await conn.execute(delete(deliveries).where(doomed))
        pruned.attempts += attempts.rowcount
        pruned.deliveries += gone.rowcount
        if len(ids) < batch:
            return
        await pacer.rest()


async def _kept_for_rooms(conn: AsyncConnection, cutoff: datetime, pacer: _Pacer) -> set[str]:
    """For each room old events name, the newest of them: what keeps the room in the sitemap."""
    newest: dict[str, tuple[datetime, str]] = {}
    query = select(events.c.id, events.c.payload, events.c.occurred_at).where(
        events.c.kind.in_(ROOM_KINDS), events.c.created_at < cutoff
    )
    result = await conn.stream(query)
    async for rows in result.partitions(BATCH):
        for event_id, payload, occurred_at in rows:
            room_url = room_of(payload)
            if room_url is not None and (
                room_url not in newest or (occurred_at, event_id) > newest[room_url]
            ):
                newest[room_url] = (occurred_at, event_id)
        await pacer.rest()  # parsing payloads takes the loop's time too
    return {event_id for _, event_id in newest.values()}


async def _prune_events(
    engine: AsyncEngine,
    cutoff: datetime,
    pruned: Pruned,
    *,
    batch: int,
    lock: asyncio.Lock | None,
    pacer: _Pacer,
) -> None:
    async with engine.connect() as conn:
        kept = await _kept_for_rooms(conn, cutoff, pacer)
    page = (
        select(events.c.created_at, events.c.id)
        .where(events.c.created_at < cutoff, _no_delivery())
        .order_by(events.c.created_at, events.c.id)
        .limit(batch)
    )
    after: tuple[datetime, str] | None = None
    while True:
        query = page if after is None else page.where(tuple_(events.c.created_at, events.c.id) > after)
        async with engine.connect() as conn:
            rows = [(created_at, event_id) for created_at, event_id in await conn.execute(query)]
        if not rows:
            return
        after = rows[-1]
        doomed = [event_id for _, event_id in rows if event_id not in kept]
        if doomed:
            async with _held(lock), brief_transaction(engine) as conn:
                gone = await conn.execute(
                    delete(events).where(
                        events.c.id.in_(doomed), events.c.created_at < cutoff, _no_delivery()
                    )
                )
            pruned.events += gone.rowcount
        if len(rows) < batch:
            return
        await pacer.rest()
