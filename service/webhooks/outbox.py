"""The durable outbox: published events, one delivery per partner, and the attempt log.

``publish`` stores an event and its deliveries in the caller's transaction, so an event is either
fully fanned out or not stored at all. Workers take due deliveries with ``claim_due``: on
PostgreSQL a ``FOR UPDATE SKIP LOCKED`` subquery lets many workers claim side by side without ever
sharing a row; on SQLite the same conditional ``UPDATE`` runs under the database's single write
lock. A claim is a lease (``claimed_until``, copied to ``next_attempt_at``): a worker killed
mid-attempt leaves its deliveries ``delivering`` until the lease runs out, and then any worker
takes them again (at least once). Claims read each partner with room under its cap through the
partial index ``ix_deliveries_partner_claimable``, which holds only pending and delivering rows,
by partner in due order.
``record_attempts`` settles a batch of attempts in one transaction, each guarded by its claim
token so a worker whose lease was taken over cannot overwrite the newer claim.

Delivery states: ``pending`` (waiting, or its partner is paused) -> ``delivering`` (claimed) ->
``delivered`` | ``pending`` (retry scheduled) | ``failed`` (schedule spent; an admin retry makes it
``pending`` again). Batched kinds wait as ``batching`` until ``service.webhooks.batching`` forms
their batch, a delivery row of its own with a fixed ``body``; its members follow it when it settles.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    Integer,
    String,
    any_,
    bindparam,
    case,
    delete,
    func,
    literal_column,
    null,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import Join
from ulid import ULID

from service.clock import format_timestamp
from service.db.tables import UTCDateTime, deliveries, delivery_attempts, events, partner_secrets, partners
from service.events import EventPayload, dedupe_key, dump_payload, parse_event
from service.exceptions import FieldError, StateConflict
from service.ids import new_id
from service.keyring import Keyring, UnreadableSecret
from service.webhooks.batching import BATCHED, BATCHING, BatchPolicy, form_batches, next_formed, waits_until
from service.webhooks.breaker import BreakerPolicy, BreakerState, Change, after_attempt
from service.webhooks.notify import notify
from service.webhooks.partners import ACTIVE, DISABLED, PAUSED, pause_many
from service.webhooks.states import CLAIMABLE, STATUS_AFTER, AttemptOutcome, DeliveryStatus, PartnerStatus

log = logging.getLogger(__name__)

PENDING = DeliveryStatus.PENDING
DELIVERING = DeliveryStatus.DELIVERING
DELIVERED = DeliveryStatus.DELIVERED
FAILED = DeliveryStatus.FAILED


def new_delivery_id() -> str:
    return new_id("dlv")


def new_claim_token() -> str:
    return str(ULID())


def encode_payload(payload: EventPayload) -> str:
    """The exact JSON text every delivery of the event sends (compact, UTF-8)."""
    return json.dumps(dump_payload(payload), ensure_ascii=False, separators=(",", ":"))


# --- publishing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    event_id: str
    deliveries: int  # deliveries created by this publish; 0 for a repeat
    duplicate: bool


def _insert_ignoring_conflicts(conn: AsyncConnection) -> Any:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(events).on_conflict_do_nothing()


async def publish(conn: AsyncConnection, payload: EventPayload, *, now: datetime) -> Published:
    """Store the event and one delivery per interested partner, in the caller's transaction.

    A dedupe key seen before answers with the first event's id and creates nothing. An eventId
    already used by an event with another dedupe key is a ``StateConflict``: consumers dedupe on
    eventId, so two different events must never share one.
    """
    key = dedupe_key(payload)
    inserted = await conn.execute(
        _insert_ignoring_conflicts(conn)
        .values(
            id=payload.eventId,
            kind=payload.KIND,
            dedupe_key=key,
            payload=encode_payload(payload),
            occurred_at=datetime.fromisoformat(payload.occurredAt),
            created_at=now,
        )
        .returning(events.c.id)
    )
    if inserted.first() is None:
        first = await conn.scalar(select(events.c.id).where(events.c.dedupe_key == key))
        if first is None:
            raise StateConflict(
                "This eventId already belongs to another event.",
                errors=[FieldError("eventId", "conflict", "Use a new eventId for a different event.")],
            )
        return Published(event_id=first, deliveries=0, duplicate=True)

    rows = await conn.execute(
        select(partners.c.id, partners.c.events, partners.c.batch).where(
            partners.c.status.in_((ACTIVE, PAUSED, DISABLED))
        )
    )
    targets: list[tuple[str, DeliveryStatus, datetime]] = []
    for partner_id, kinds, batch in rows:
        if kinds is not None and payload.KIND not in json.loads(kinds):
            continue
        policy = BatchPolicy.loads(batch)
        if policy is not None and payload.KIND in policy.events:
            # Waits for its batch; due (forces the batch out) once it has waited maxWaitSeconds.
            targets.append((partner_id, BATCHING, waits_until(policy, now)))
        else:
            targets.append((partner_id, PENDING, now))
    if targets:
        await conn.execute(
            deliveries.insert(),
            [
                {
                    "id": new_delivery_id(),
                    "event_id": payload.eventId,
                    "partner_id": partner_id,
                    "status": status,
                    "attempts": 0,
                    "next_attempt_at": due,
                    "created_at": now,
                    "updated_at": now,
                }
                for partner_id, status, due in targets
            ],
        )
        await notify(conn)
    return Published(event_id=payload.eventId, deliveries=len(targets), duplicate=False)


async def publish_event(engine: AsyncEngine, data: Mapping[str, Any], *, now: datetime) -> Published:
    """Validate ``{event, ...members}`` (``InvalidInput`` per field) and store it, in one transaction."""
    payload = parse_event(data, now=now)
    async with engine.begin() as conn:
        return await publish(conn, payload, now=now)


# --- claiming and settling --------------------------------------------------------------------


# Job and AttemptRecord (and the sender's Attempt) are named tuples: immutable like a frozen
# dataclass, and made in a fraction of its time (a frozen dataclass sets each field through
# object.__setattr__), which counts when the worker makes three of them for every attempt.
class Job(NamedTuple):
    """One claimed delivery, with everything needed to send it."""

    delivery_id: str
    event_id: str
    kind: str
    partner_id: str
    url: str
    body: bytes
    attempt: int  # the number of this attempt, 1 for the first: the delivery's logged attempts + 1
    secrets: tuple[str, ...]  # live at claim time, newest first
    claim_token: str
    claimed_until: datetime  # the lease's end, also the row's next_attempt_at while claimed
    probe: bool = False  # claimed while its partner's circuit was half-open
    batch: bool = False  # a batch's own delivery: its members follow it when it settles

    def __repr__(self) -> str:  # never the secrets
        return f"Job({self.delivery_id}, attempt={self.attempt})"


# Hot statements are built once, at import, each with one shape (no lists of ids whose length
# changes the SQL, but for SQLite's settle, below): SQLAlchemy then compiles each once per dialect,
# SQLite's statement cache and asyncpg's prepared statements are reused, and no execution pays for
# building SQL. The status
# test is literal SQL, identical to the partial index's, so both databases can prove the index
# applies (a bound parameter would hide that from the planner).
_CLAIMABLE = deliveries.c.status.in_([literal_column(f"'{status}'") for status in CLAIMABLE])


_NOW = bindparam("b_now", type_=UTCDateTime())
# Claims on PostgreSQL take this transaction-scoped advisory lock first, so two workers never
# count a partner's claims at the same moment: the per-partner cap holds across every worker.
# Claims are one short statement each, so taking them in turn costs little.
CLAIM_LOCK = 0x5E5E_C1A1
_CLAIM_LOCK = select(func.pg_advisory_xact_lock(CLAIM_LOCK))


class _CrossJoin(Join):
    """An inner join SQLite must run in the order written (its ``CROSS JOIN``); elsewhere a JOIN."""

    inherit_cache = True


@compiles(_CrossJoin, "sqlite")
def _compile_cross_join(element: _CrossJoin, compiler: Any, **kw: Any) -> str:
    joined: str = compiler.visit_join(element, **kw)
    right = compiler.process(element.right, **{**kw, "asfrom": True})
    head, found, tail = joined.rpartition(f" JOIN {right} ON ")
    if not found:
        raise AssertionError(f"unexpected join text: {joined}")
    return f"{head} CROSS JOIN {right} ON {tail}"


def _claimable(table: Any) -> Any:
    """The claimable-status test on ``table`` (the deliveries table or an alias of it)."""
    return table.c.status.in_([literal_column(f"'{status}'") for status in CLAIMABLE])


def _claim_statement(postgres: bool) -> Any:
    """Due deliveries of active partners, each partner served in turn and held to its cap.

    A partner's cap is its own ``max_in_flight`` or the default (``b_cap``) while its circuit is
    closed, one (the probe) once an open circuit's cool-down has passed, and none while it is open.
    Its live claims (``delivering`` with a lease still running) count against the cap. Taking
    every partner's first due row before anyone's second means a partner with a large backlog
    cannot crowd out one with a single due event.

    The claim starts from the partners with room under their caps (few rows) and reads each one's
    due rows through ``ix_deliveries_partner_claimable``, in due order, only as far as it could
    take: a partner at its cap (hanging, or its circuit open) costs nothing however large its
    backlog. PostgreSQL reads exactly each partner's headroom (a LATERAL subquery with a per-row
    LIMIT); SQLite, which allows no column in a LIMIT, ranks each partner's rows up to its
    ``b_limit``-th due one (no claim takes more from one partner).
    """
    in_flight = (
        select(deliveries.c.partner_id, func.count().label("claimed"))
        .where(deliveries.c.status == literal_column(f"'{DELIVERING}'"), deliveries.c.next_attempt_at > _NOW)
        .group_by(deliveries.c.partner_id)
        .subquery("in_flight")
    )
    cap = case(
        (
            partners.c.circuit_open_until.is_(None),
            func.coalesce(partners.c.max_in_flight, bindparam("b_cap", type_=Integer())),
        ),
        (partners.c.circuit_open_until <= _NOW, 1),
        else_=0,
    )
    headroom = cap - func.coalesce(in_flight.c.claimed, 0)
    eligible = (
        select(partners.c.id, headroom.label("headroom"))
        .outerjoin(in_flight, in_flight.c.partner_id == partners.c.id)
        .where(partners.c.status == literal_column(f"'{ACTIVE}'"), headroom > 0)
        .subquery("eligible")
    )
    due = deliveries.alias("due")
    limit = bindparam("b_limit", type_=Integer())
    if postgres:
        turns = (
            select(
                due.c.id,
                due.c.next_attempt_at,
                func.row_number().over(order_by=due.c.next_attempt_at).label("turn"),
            )
            .where(due.c.partner_id == eligible.c.id, _claimable(due), due.c.next_attempt_at <= _NOW)
            .order_by(due.c.next_attempt_at)
            .limit(func.least(eligible.c.headroom, limit))
            .lateral("turns")
        )
        ranked = (
            select(turns.c.id, turns.c.next_attempt_at, turns.c.turn, eligible.c.id.label("partner_id"))
            .select_from(eligible.join(turns, true()))
            .subquery("ranked")
        )
        chosen_rows = select(ranked.c.id)
    else:
        other = deliveries.alias("other")
        # The partner's first b_limit due rows (no claim takes more from one partner), read from
        # its index; CROSS JOIN keeps SQLite's planner from reading every due row instead.
        first_due = (
            select(other.c.id)
            .where(other.c.partner_id == eligible.c.id, _claimable(other), other.c.next_attempt_at <= _NOW)
            .order_by(other.c.next_attempt_at)
            .limit(limit)
        )
        ranked = (
            select(
                due.c.id,
                due.c.next_attempt_at,
                due.c.partner_id,
                func.row_number()
                .over(partition_by=due.c.partner_id, order_by=(due.c.next_attempt_at, due.c.id))
                .label("turn"),
                eligible.c.headroom,
            )
            .select_from(_CrossJoin(eligible, due, due.c.id.in_(first_due)))
            .subquery("ranked")
        )
        chosen_rows = select(ranked.c.id).where(ranked.c.turn <= ranked.c.headroom)
    chosen = chosen_rows.order_by(ranked.c.turn, ranked.c.next_attempt_at, ranked.c.partner_id).limit(limit)
    return (
        update(deliveries)
        # Re-checked on the row itself: on PostgreSQL a row changed since the ranking was read
        # (settled by its worker, say) is tested again and dropped.
        .where(
            deliveries.c.id.in_(chosen.scalar_subquery()), _CLAIMABLE, deliveries.c.next_attempt_at <= _NOW
        )
        .values(
            status=DELIVERING,
            claim_token=bindparam("b_token"),
            claimed_until=bindparam("b_until", type_=UTCDateTime()),
            # Should this claim be abandoned, the delivery is due again when the lease ends: a
            # `delivering` row whose next_attempt_at has passed is claimable like a pending one.
            next_attempt_at=bindparam("b_until", type_=UTCDateTime()),
            updated_at=_NOW,
        )
    )


_CLAIM = {name: _claim_statement(name == "postgresql") for name in ("sqlite", "postgresql")}
# The rows one claim took, found by what the claim wrote: every one is delivering, with the
# claim's token and next_attempt_at = its lease end, so the partial index finds them by that time.
_CLAIMED_JOBS = (
    select(
        deliveries.c.id,
        deliveries.c.attempts,
        events.c.id.label("event_id"),
        events.c.kind,
        # A batch sends its own fixed body; any other delivery, its event's payload.
        func.coalesce(deliveries.c.body, events.c.payload).label("payload"),
        deliveries.c.body.is_not(None).label("batch"),
        partners.c.id.label("partner_id"),
        partners.c.url,
        partners.c.circuit_open_until,
    )
    .join(events, events.c.id == deliveries.c.event_id)
    .join(partners, partners.c.id == deliveries.c.partner_id)
    .where(
        _CLAIMABLE,
        deliveries.c.next_attempt_at == bindparam("b_until", type_=UTCDateTime()),
        deliveries.c.claim_token == bindparam("b_token"),
    )
    .order_by(deliveries.c.created_at, deliveries.c.event_id, deliveries.c.partner_id)
)
# The stored secrets of the partners one claim took, newest first, found by what the claim wrote
# (as above). Each is opened once per claim, not once per delivery.
_CLAIMED_SECRETS = (
    select(
        partner_secrets.c.id,
        partner_secrets.c.partner_id,
        partner_secrets.c.secret,
        partner_secrets.c.expires_at,
    )
    .where(
        partner_secrets.c.partner_id.in_(
            select(deliveries.c.partner_id).where(
                _CLAIMABLE,
                deliveries.c.next_attempt_at == bindparam("b_until", type_=UTCDateTime()),
                deliveries.c.claim_token == bindparam("b_token"),
            )
        )
    )
    .order_by(partner_secrets.c.id.desc())
)


async def _claimed_secrets(
    conn: AsyncConnection, *, token: str, until: datetime, now: datetime, keyring: Keyring
) -> dict[str, tuple[str, ...]]:
    """Partner id -> its live secrets, opened, newest first; expired ones found are deleted.

    A secret no configured key opens (its key was dropped from ``SERVICE_SECRETS_KEY`` too soon) is
    left out with an error line; a partner left with none is absent from the answer.
    """
    found: dict[str, list[str]] = {}
    expired: list[int] = []
    for row in await conn.execute(_CLAIMED_SECRETS, {"b_until": until, "b_token": token}):
        if row.expires_at is not None and row.expires_at <= now:
            expired.append(row.id)
            continue
        try:
            secret = keyring.open(row.secret)
        except UnreadableSecret as error:
            log.error("partner secret unreadable: %s", error, extra={"partner": row.partner_id})
            continue
        found.setdefault(row.partner_id, []).append(secret)
    if expired:  # rare: once per secret, the first claim after its overlap ended
        await conn.execute(delete(partner_secrets).where(partner_secrets.c.id.in_(expired)))
    return {partner_id: tuple(secrets) for partner_id, secrets in found.items()}


async def claim_due(
    conn: AsyncConnection,
    *,
    now: datetime,
    limit: int,
    lease: timedelta,
    default_cap: int,
    keyring: Keyring,
    token: str | None = None,
) -> list[Job]:
    """Claim up to ``limit`` due deliveries for ``lease``: partners in turn, each within its cap.

    Due: pending with ``next_attempt_at`` passed, or delivering with its lease run out (its
    worker died; it goes out again under the same attempt number, as no attempt was logged).
    """
    token = token or new_claim_token()
    until = now + lease
    if conn.dialect.name == "postgresql":
        await conn.execute(_CLAIM_LOCK)
    params = {"b_now": now, "b_limit": limit, "b_token": token, "b_until": until, "b_cap": default_cap}
    claim = _CLAIM[conn.dialect.name]
    taken = (await conn.execute(claim, params)).rowcount
    # Batches ready now are formed after the claim's write (SQLite then holds its write lock before
    # this transaction reads anything: a read first could not be upgraded once another connection
    # had written) and claimed in a second pass, like any delivery.
    if await form_batches(conn, now=now) and taken < limit:
        taken += (await conn.execute(claim, {**params, "b_limit": limit - taken})).rowcount
    if not taken:
        return []
    rows = (await conn.execute(_CLAIMED_JOBS, {"b_until": until, "b_token": token})).all()
    signing = await _claimed_secrets(conn, token=token, until=until, now=now, keyring=keyring)
    jobs = []
    for row in rows:
        if row.partner_id not in signing:
            # Nothing to sign with (see _claimed_secrets): left claimed, it is due again when the
            # lease ends, and goes out once the key is back in SERVICE_SECRETS_KEY.
            continue
        jobs.append(
            Job(
                row.id,
                row.event_id,
                row.kind,
                row.partner_id,
                row.url,
                row.payload.encode(),
                row.attempts + 1,
                signing[row.partner_id],
                token,
                until,
                row.circuit_open_until is not None,
                bool(row.batch),
            )
        )
    return jobs


class AttemptRecord(NamedTuple):
    """One attempt as logged, and what it did to its delivery."""

    job: Job
    started_at: datetime
    duration_ms: int
    status_code: int | None
    error_class: str | None
    response_excerpt: str | None
    outcome: AttemptOutcome
    finished_at: datetime
    next_attempt_at: datetime | None = None  # for retry (and paused: due on resume)


_LOG_ATTEMPTS = delivery_attempts.insert()


# Delivered attempts, the common case, are settled in one statement per batch, found by primary
# key: a plan no database can get wrong, whatever its statistics say (a fresh table has none, and
# a prepared statement's generic plan outlives them). A row another worker has claimed since
# carries another token and is left alone. PostgreSQL takes the keys as one array (one statement,
# one prepared plan); SQLite, which has no arrays, as an expanding IN list.
def _settle_delivered_statement(postgres: bool) -> Any:
    if postgres:
        ids = deliveries.c.id == any_(bindparam("b_ids", type_=ARRAY(String())))
        tokens = deliveries.c.claim_token == any_(bindparam("b_tokens", type_=ARRAY(String())))
    else:
        ids = deliveries.c.id.in_(bindparam("b_ids", expanding=True))
        tokens = deliveries.c.claim_token.in_(bindparam("b_tokens", expanding=True))
    return (
        update(deliveries)
        .where(ids, tokens, deliveries.c.status == literal_column(f"'{DELIVERING}'"))
        .values(
            status=literal_column(f"'{DELIVERED}'"),
            next_attempt_at=bindparam("b_at", type_=UTCDateTime()),
            delivered_at=bindparam("b_at", type_=UTCDateTime()),
            attempts=deliveries.c.attempts + 1,
            claimed_until=null(),
            claim_token=null(),
            updated_at=bindparam("b_at", type_=UTCDateTime()),
        )
    )


_SETTLE_DELIVERED = {
    name: _settle_delivered_statement(name == "postgresql") for name in ("sqlite", "postgresql")
}
_settle = (
    update(deliveries)
    .where(deliveries.c.id == bindparam("b_id"), deliveries.c.claim_token == bindparam("b_token"))
    .values(
        status=bindparam("b_status"),
        next_attempt_at=bindparam("b_next"),
        delivered_at=bindparam("b_delivered"),
        attempts=deliveries.c.attempts + 1,
        claimed_until=None,
        claim_token=None,
        updated_at=bindparam("b_now"),
    )
)


async def record_attempts(
    conn: AsyncConnection, records: Sequence[AttemptRecord], *, breaker: BreakerPolicy
) -> list[tuple[str, Change]]:
    """Log the attempts, settle their deliveries and their partners' circuits, in the caller's
    transaction; what changed in which partner's circuit."""
    if not records:
        return []
    await conn.execute(_LOG_ATTEMPTS, [_log_row(record) for record in records])
    delivered = [record for record in records if record.outcome is AttemptOutcome.DELIVERED]
    if delivered:
        await conn.execute(
            _SETTLE_DELIVERED[conn.dialect.name],
            {
                "b_ids": [record.job.delivery_id for record in delivered],
                "b_tokens": list({record.job.claim_token for record in delivered}),
                # The batch's last finish: within LOG_DELAY of each attempt's own.
                "b_at": max(record.finished_at for record in delivered),
            },
        )
    others = [record for record in records if record.outcome is not AttemptOutcome.DELIVERED]
    if others:
        await conn.execute(
            _settle,
            [
                {
                    "b_id": record.job.delivery_id,
                    "b_token": record.job.claim_token,
                    "b_status": STATUS_AFTER[record.outcome],
                    "b_next": record.next_attempt_at or record.finished_at,
                    "b_delivered": None,
                    "b_now": record.finished_at,
                }
                for record in others
            ],
        )
    settled_batches = [record for record in records if record.job.batch]
    if settled_batches:
        await _settle_members(conn, settled_batches)
    latest = max(record.finished_at for record in records)
    gone = [record.job.partner_id for record in records if record.outcome is AttemptOutcome.PAUSED]
    await pause_many(conn, gone, now=latest)
    return await _settle_circuits(conn, records, breaker, now=latest)


_FOLLOW = (
    update(deliveries)
    .where(deliveries.c.batch_id == bindparam("b_batch"), deliveries.c.status == bindparam("b_from"))
    .values(
        status=bindparam("b_status"),
        delivered_at=bindparam("b_delivered"),
        updated_at=bindparam("b_now"),
    )
)


async def _settle_members(conn: AsyncConnection, records: Sequence[AttemptRecord]) -> None:
    """A batch delivered or failed takes its members with it (a retry keeps them ``batched``)."""
    follow = [
        {
            "b_batch": record.job.delivery_id,
            "b_from": BATCHED,
            "b_status": STATUS_AFTER[record.outcome],
            "b_delivered": record.finished_at if record.outcome is AttemptOutcome.DELIVERED else None,
            "b_now": record.finished_at,
        }
        for record in records
        if record.outcome in (AttemptOutcome.DELIVERED, AttemptOutcome.FAILED)
    ]
    if follow:
        await conn.execute(_FOLLOW, follow)


def _log_row(record: AttemptRecord) -> dict[str, Any]:
    return {
        "delivery_id": record.job.delivery_id,
        "event_id": record.job.event_id,
        "event": record.job.kind,
        "partner_id": record.job.partner_id,
        "attempt": record.job.attempt,
        "started_at": record.started_at,
        "duration_ms": record.duration_ms,
        "status_code": record.status_code,
        "error_class": record.error_class,
        "response_excerpt": record.response_excerpt,
        "outcome": record.outcome,
    }


_BREAKER_COLUMNS = (
    partners.c.id,
    partners.c.status,
    partners.c.consecutive_failures,
    partners.c.failing_since,
    partners.c.circuit_open_until,
    partners.c.circuit_cooldown,
)
_FAILED = (AttemptOutcome.RETRY, AttemptOutcome.FAILED)


async def _settle_circuits(
    conn: AsyncConnection, records: Sequence[AttemptRecord], policy: BreakerPolicy, *, now: datetime
) -> list[tuple[str, Change]]:
    """Fold each partner's attempts, in the order they finished, through its circuit breaker."""
    by_partner: dict[str, list[AttemptRecord]] = {}
    for record in records:
        if record.outcome is not AttemptOutcome.PAUSED:  # a 410 is an answer, neither way
            by_partner.setdefault(record.job.partner_id, []).append(record)
    if not by_partner:
        return []
    query = select(*_BREAKER_COLUMNS).where(partners.c.id.in_(sorted(by_partner)))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()  # two workers settling one partner take turns
    changes: list[tuple[str, Change]] = []
    for row in (await conn.execute(query)).all():
        before = BreakerState(
            row.consecutive_failures, row.failing_since, row.circuit_open_until, row.circuit_cooldown
        )
        state, happened = before, []
        for record in sorted(by_partner[row.id], key=lambda record: record.finished_at):
            state, more = after_attempt(
                state,
                ok=record.outcome is AttemptOutcome.DELIVERED,
                probe=record.job.probe,
                at=record.finished_at,
                policy=policy,
            )
            happened += more
        if state == before:
            continue
        values: dict[str, Any] = {
            "consecutive_failures": state.consecutive_failures,
            "failing_since": state.failing_since,
            "circuit_open_until": state.open_until,
            "circuit_cooldown": state.cooldown,
        }
        if Change.DISABLED in happened:
            if row.status == ACTIVE:
                values.update(status=PartnerStatus.DISABLED, updated_at=now)
            else:  # paused meanwhile, or disabled by an earlier batch: nothing new to tell
                happened = [change for change in happened if change is not Change.DISABLED]
        await conn.execute(update(partners).where(partners.c.id == row.id).values(**values))
        changes += [(row.id, change) for change in dict.fromkeys(happened)]
    return changes


async def release_claims(conn: AsyncConnection, jobs: Sequence[Job], *, now: datetime) -> None:
    """Hand back claimed deliveries that were never attempted (a worker stopping cleanly)."""
    if not jobs:
        return
    await conn.execute(
        update(deliveries)
        .where(deliveries.c.id == bindparam("b_id"), deliveries.c.claim_token == bindparam("b_token"))
        .values(
            status=PENDING,
            next_attempt_at=now,
            claimed_until=None,
            claim_token=None,
            updated_at=now,
        ),
        [{"b_id": job.delivery_id, "b_token": job.claim_token} for job in jobs],
    )
    await notify(conn)  # another worker may take them now


# --- reading ----------------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None


async def list_deliveries(
    conn: AsyncConnection,
    *,
    partner_id: str | None = None,
    status: str | None = None,
    event_id: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """Deliveries, newest first, each with its attempts in order (the admin view)."""
    stmt = (
        select(
            deliveries.c.id,
            deliveries.c.event_id,
            events.c.kind,
            deliveries.c.partner_id,
            deliveries.c.status,
            deliveries.c.next_attempt_at,
            deliveries.c.created_at,
            deliveries.c.delivered_at,
            deliveries.c.batch_id,
            deliveries.c.body.is_not(None).label("batch"),
        )
        .join(events, events.c.id == deliveries.c.event_id)
        .order_by(deliveries.c.created_at.desc(), deliveries.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    if partner_id is not None:
        stmt = stmt.where(deliveries.c.partner_id == partner_id)
    if status is not None:
        stmt = stmt.where(deliveries.c.status == status)
    if event_id is not None:
        stmt = stmt.where(deliveries.c.event_id == event_id)
    rows = (await conn.execute(stmt)).all()
    attempts: dict[str, list[dict[str, Any]]] = {row.id: [] for row in rows}
    if rows:
        a = delivery_attempts
        logged = await conn.execute(
            select(a)
            .where(a.c.delivery_id.in_(list(attempts)))
            .order_by(a.c.delivery_id, a.c.attempt, a.c.id)
        )
        for attempt in logged.mappings():
            attempts[attempt["delivery_id"]].append(attempt_view(dict(attempt)))
    sizes: dict[str, int] = {}
    batches = [row.id for row in rows if row.batch]
    if batches:
        counted = await conn.execute(
            select(deliveries.c.batch_id, func.count())
            .where(deliveries.c.batch_id.in_(batches))
            .group_by(deliveries.c.batch_id)
        )
        sizes = {batch_id: int(count) for batch_id, count in counted}
    return [
        {
            "id": row.id,
            "eventId": row.event_id,
            "event": row.kind,
            "partnerId": row.partner_id,
            "status": row.status,
            "createdAt": _time(row.created_at),
            # For a delivery waiting for its batch: when the batch forms at the latest.
            "nextAttemptAt": _time(row.next_attempt_at) if row.status in (PENDING, BATCHING) else None,
            "deliveredAt": _time(row.delivered_at),
            # A batch's own delivery: how many events it carries (eventId is its oldest's); a
            # member of one: the batch's delivery id, whose attempts are its attempts.
            "batchSize": sizes.get(row.id) if row.batch else None,
            "batchId": row.batch_id,
            "attempts": attempts[row.id],
        }
        for row in rows
    ]


def attempt_view(attempt: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "attempt": attempt["attempt"],
        "startedAt": _time(attempt["started_at"]),
        "durationMs": attempt["duration_ms"],
        "statusCode": attempt["status_code"],
        "errorClass": attempt["error_class"],
        "responseExcerpt": attempt["response_excerpt"],
        "outcome": attempt["outcome"],
    }


async def next_due(conn: AsyncConnection) -> datetime | None:
    """The next moment a worker may claim something: the earliest due time (or claim end) among
    active partners' deliveries, held back to the end of an open circuit's cool-down; None when
    nothing waits that time alone will release (a paused partner's deliveries wait for a resume).
    Deliveries waiting for their batch count from the moment the batch forms."""
    held_until = case(
        (partners.c.circuit_open_until > deliveries.c.next_attempt_at, partners.c.circuit_open_until),
        else_=deliveries.c.next_attempt_at,
    )
    due: datetime | None = await conn.scalar(
        select(func.min(held_until))
        .join(partners, partners.c.id == deliveries.c.partner_id)
        .where(_CLAIMABLE, partners.c.status == literal_column(f"'{ACTIVE}'"))
    )
    formed = await next_formed(conn)  # a batch forms (and is due) when its oldest has waited
    return min((moment for moment in (due, formed) if moment is not None), default=None)


async def queue_depth(conn: AsyncConnection) -> dict[DeliveryStatus, int]:
    """Deliveries per state, every state present (0 when none)."""
    rows = await conn.execute(select(deliveries.c.status, func.count()).group_by(deliveries.c.status))
    depth = dict.fromkeys(DeliveryStatus, 0)
    depth.update({DeliveryStatus(status): int(count) for status, count in rows})
    return depth
