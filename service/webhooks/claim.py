"""Claim: take due deliveries for a while (a lease), hand back the ones never sent, and say when
the next one falls due.

Workers take due deliveries with ``claim_due``: one conditional ``UPDATE`` that serves partners in
turn and holds each to its in-flight cap, counted across every worker (on PostgreSQL under a
transaction-scoped advisory lock; on SQLite under the database's single write lock). A claim is a
lease (``claimed_until``, copied to ``next_attempt_at``), counted from when the claim holds its
lock (``clock``), so a wait for the lock never shortens it: a worker killed mid-attempt leaves its
deliveries ``delivering`` until the lease runs out, and then any worker takes them again (at least
once). Claims read each partner with room under its cap through the partial index
``ix_deliveries_partner_claimable``, which holds only pending and delivering rows, by partner in due
order. A claim also forms the batches that are ready (``service.webhooks.batching``) and opens the
claimed partners' secrets once per claim; what it took of a partner with no secret that opens is
handed back ``pending`` in the same transaction, due again when the lease would have ended.

**Slots and depth.** Each claim is made by a holder (a worker run, ``claimed_by``) and gives every
job its partner's *slots*: the partner's cap less the live claims other holders have on it, and
never more than the holder's own bound (``max_slots``: a worker's is three quarters of its senders,
so a partner whose cap reaches the worker's concurrency cannot take every sender while it hangs). The
holder sends at most that many of the partner's deliveries at once (``service.webhooks.lanes``),
and may claim up to ``depth`` times its slots (at most ``MAX_AHEAD`` beyond them), so a partner
answering quickly finds its next delivery already in hand. Depth is earned: a claim names the
partners it may claim ahead for (``deep``, the worker's partners whose deliveries have just gone
through), each with a depth of its own (what the partner sends within its leases, by how long its
attempts take), and every other partner gets its slots only, so a partner that hangs or fails soon
holds no parked leases. The cap still holds across workers:
another holder's slots are what the cap leaves after this holder's claimed rows, which are never
fewer than its attempts in flight (docs/architecture.md, "Slots"). A circuit that is not closed
gets no depth: its probe goes alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    Boolean,
    Integer,
    String,
    and_,
    any_,
    bindparam,
    case,
    delete,
    false,
    func,
    literal_column,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import Join
from ulid import ULID

from service.clock import Clock
from service.db import locks
from service.db.tables import UTCDateTime, deliveries, events, partner_secrets, partners, secret_digests
from service.keyring import Keyring, UnreadableSecret
from service.states import CLAIMABLE, DeliveryStatus, PartnerStatus
from service.webhooks.batching import form_batches, next_formed
from service.webhooks.notify import notify
from service.webhooks.requeue import requeued

log = logging.getLogger(__name__)


def new_claim_token() -> str:
    return str(ULID())


# Job and Settlement (and the sender's Attempt) are named tuples: immutable like a frozen
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
    slots: int = 1  # its partner's attempts this holder may have in flight at once, as of the claim
    digests: frozenset[str] = frozenset()  # of every secret its partner was issued (send's excerpt)
    revision: int = 0  # its partner's as of the claim (``partners.REVISED``): newer, it goes back

    def __repr__(self) -> str:  # never the secrets
        return f"Job({self.delivery_id}, attempt={self.attempt})"


# Hot statements are built once, at import, each with one shape (no lists of ids whose length
# changes the SQL, but for SQLite's settle, below): SQLAlchemy then compiles each once per dialect,
# SQLite's statement cache and asyncpg's prepared statements are reused, and no execution pays for
# building SQL. The status
# test is literal SQL, identical to the partial index's, so both databases can prove the index
# applies (a bound parameter would hide that from the planner).
def _claimable(table: Any) -> Any:
    """The claimable-status test on ``table`` (the deliveries table or an alias of it)."""
    return table.c.status.in_([literal_column(f"'{status}'") for status in CLAIMABLE])


_NOW = bindparam("b_now", type_=UTCDateTime())
# Claims on PostgreSQL take this transaction-scoped advisory lock first, so two workers never
# count a partner's claims at the same moment: the per-partner cap holds across every worker.
# Claims are one short statement each, so taking them in turn costs little.
CLAIM_LOCK = 0x5E5E_C1A1
# Then the rest of the turn is planned for the table as it is now. The claim is a prepared
# statement, and once PostgreSQL settles on a generic plan for one it keeps it until the table is
# analyzed again: a plan made while the table held a few rows (a new deployment, a worker started
# on a quiet outbox) reads it whole, right for a few rows, and after a burst, before autovacuum's
# next look, each claim compared every due row with the chosen ids: 743 ms to claim 512 of a
# 30,000 backlog (the server's log of a drain); planned for the table as it was, 24 ms (EXPLAIN
# ANALYZE, PostgreSQL 15). Planning costs the claim about a millisecond. Transaction-scoped, like
# the lock.
_PLANNED_NOW = select(func.set_config("plan_cache_mode", "force_custom_plan", True))


_HOLDER = bindparam("b_holder", type_=String())
# A holder claims at most this many of one partner's deliveries beyond its slots, whatever the
# depth: a partner with a large cap keeps about four turns' worth at hand (worker.BATCH), not
# thousands of leases. What the worker has sent and not yet logged counts against it: under a
# backlog a turn's worth is waiting to be logged while the next is sent, so at 1,024 a partner at
# cap 64 had a turn's worth at hand and its senders idled at every turn's end (pacing "A turn that
# finds less than a batch parked").
MAX_AHEAD = 2048
# A partner's cap: its own max_in_flight or the default (b_cap) while its circuit is closed, one
# (the probe) once an open circuit's cool-down has passed, none while it is open.
_CAP = case(
    (
        partners.c.circuit_open_until.is_(None),
        func.coalesce(partners.c.max_in_flight, bindparam("b_cap", type_=Integer())),
    ),
    (partners.c.circuit_open_until <= _NOW, 1),
    else_=0,
)


def _live_claims(*, once: bool = False) -> Any:
    """Per partner, its deliveries under a live claim (``claimed``) and how many of them this
    holder has (``mine``); read through ``ix_deliveries_in_flight``. ``once``: as a materialized
    CTE, counted once per statement whatever plan the rest gets."""
    mine = case((deliveries.c.claimed_by == _HOLDER, 1), else_=0)
    counted = (
        select(deliveries.c.partner_id, func.count().label("claimed"), func.sum(mine).label("mine"))
        .where(
            deliveries.c.status == literal_column(f"'{DeliveryStatus.DELIVERING}'"),
            deliveries.c.next_attempt_at > _NOW,
        )
        .group_by(deliveries.c.partner_id)
    )
    return counted.cte("claimed").prefix_with("MATERIALIZED") if once else counted.subquery("claimed")


# The most slots one holder takes for one partner, whatever its cap (``b_most``): a worker binds
# three quarters of its senders (``worker.most_slots``), so a partner whose cap is as large as the
# worker's concurrency never holds every sender while it hangs. Left unbound, no bound: more than
# any cap (partners.MAX_IN_FLIGHT_LIMIT, or the default) could be.
NO_MOST = 2**31 - 1
_MOST = bindparam("b_most", NO_MOST, type_=Integer())


def _slots(claimed: Any) -> Any:
    """The partner's slots for this holder: its cap less the other holders' live claims, and never
    more than ``b_most``. Fewer slots for one holder never let the holders together past the cap:
    another holder's slots count this one's claimed rows, not its slots."""
    left = _CAP - (func.coalesce(claimed.c.claimed, 0) - func.coalesce(claimed.c.mine, 0))
    return case((left > _MOST, _MOST), else_=left)


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


def _depth(postgres: bool) -> Any:
    """How many times its slots the partner may hold: ``b_depth`` for every partner when
    ``b_all_deep``, else the depth ``b_deep`` gives it, or 1 (its slots only) when it is not named.
    Bound as one value each, so the statement keeps one shape: on PostgreSQL the ids and their
    depths as two arrays (``b_deep``, ``b_depths``), on SQLite one JSON object of id to depth."""
    if postgres:
        pairs = func.unnest(
            bindparam("b_deep", type_=ARRAY(String())), bindparam("b_depths", type_=ARRAY(Integer()))
        )
        named_depths = pairs.table_valued("id", "depth").render_derived()
        named = select(named_depths.c.depth).where(named_depths.c.id == partners.c.id).scalar_subquery()
    else:
        named = (
            select(literal_column("value"))
            .select_from(func.json_each(bindparam("b_deep", type_=String())))
            .where(literal_column("key") == partners.c.id)
            .scalar_subquery()
        )
    every = bindparam("b_depth", type_=Integer())
    return case((bindparam("b_all_deep", type_=Boolean()), every), else_=func.coalesce(named, 1))


def _named(dialect: str, depths: Mapping[str, int]) -> dict[str, Any]:
    """Partners' depths as ``_depth`` binds them on ``dialect``."""
    if dialect == "postgresql":
        return {"b_deep": list(depths), "b_depths": list(depths.values())}
    return {"b_deep": json.dumps(depths)}


def _claim_statement(postgres: bool) -> Any:
    """Due deliveries of active partners, each partner served in turn and held to its cap.

    A partner's live claims (``delivering`` with a lease still running) by other holders count
    against its cap (``_CAP``); what is left is this holder's slots, and it may hold ``b_depth``
    times that many of the partner's deliveries (one, for a probe). Taking
    every partner's first due row before anyone's second means a partner with a large backlog
    cannot crowd out one with a single due event.

    The claim starts from the partners with room under their caps (few rows) and reads each one's
    due rows through ``ix_deliveries_partner_claimable``, in due order, only as far as it could
    take: a partner at its cap or depth (hanging, or its circuit open) costs nothing however large its
    backlog. Each partner's rows are read up to its share of the claim (``b_each``, see ``_share``);
    PostgreSQL also stops at the partner's headroom (a LATERAL subquery with a per-row LIMIT), while
    SQLite, which allows no column in a LIMIT, ranks what it read and keeps each partner's headroom.
    """
    claimed = _live_claims()
    slots = _slots(claimed)
    # Rows this claim may add: a closed circuit's slots times the depth (never more than MAX_AHEAD
    # beyond the slots), a probe's one slot; less what the holder already has.
    depth = _depth(postgres)
    ahead = slots * (depth - 1)
    ahead = case((ahead > MAX_AHEAD, MAX_AHEAD), else_=ahead)
    held = slots + case((partners.c.circuit_open_until.is_(None), ahead), else_=0)
    headroom = held - func.coalesce(claimed.c.mine, 0)
    eligible = (
        select(partners.c.id, headroom.label("headroom"))
        .outerjoin(claimed, claimed.c.partner_id == partners.c.id)
        .where(partners.c.status == literal_column(f"'{PartnerStatus.ACTIVE}'"), slots > 0, headroom > 0)
        .subquery("eligible")
    )
    due = deliveries.alias("due")
    limit = bindparam("b_limit", type_=Integer())
    each = bindparam("b_each", type_=Integer())  # a partner's share of the claim (see _share)
    if postgres:
        # Numbered in ROWS mode: under the default RANGE mode PostgreSQL before 16 reads every
        # peer of a row (the same due time) before numbering it, and a burst published at one
        # moment is all peers, so the LIMIT stopped nothing: 6,000 index rows read to claim 512,
        # 11.5 ms; in ROWS mode 512 rows, 7.5 ms (EXPLAIN ANALYZE, PostgreSQL 15).
        turns = (
            select(
                due.c.id,
                due.c.next_attempt_at,
                func.row_number().over(order_by=due.c.next_attempt_at, rows=(None, 0)).label("turn"),
            )
            .where(due.c.partner_id == eligible.c.id, _claimable(due), due.c.next_attempt_at <= _NOW)
            .order_by(due.c.next_attempt_at)
            .limit(func.least(eligible.c.headroom, each))
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
        # The partner's first b_each due rows (its share of the claim, see _share), read from its
        # index; CROSS JOIN keeps SQLite's planner from reading every due row instead.
        first_due = (
            select(other.c.id)
            .where(other.c.partner_id == eligible.c.id, _claimable(other), other.c.next_attempt_at <= _NOW)
            .order_by(other.c.next_attempt_at)
            .limit(each)
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
    # Re-checked on the row itself: on PostgreSQL a row changed since the ranking was read
    # (settled by its worker, say) is tested again and dropped.
    still_due = and_(_claimable(deliveries), deliveries.c.next_attempt_at <= _NOW)
    if postgres:
        # The chosen ids as one array, computed first, so each row is found by its primary key.
        # Under `id IN (subquery)`, once ANALYZE had seen a backlog, PostgreSQL 15 hash-joined the
        # chosen ids against a scan of the whole table: 10,000 rows read to claim 64, 5.9 ms; by
        # key, 1.7 ms (EXPLAIN ANALYZE). Draining 10,000 at cap 16 after an ANALYZE, the claim
        # took 44 µs a delivery against 49 (medians of seven drains).
        picked = deliveries.c.id == any_(func.array(chosen.scalar_subquery(), type_=ARRAY(String())))
        # The re-check inside coalesce() (the same truth: neither column is ever NULL) is no
        # index condition, so the primary key is the only way in, whatever the statistics say.
        # Written plainly, a table never analyzed (a burst before autovacuum's first look) let the
        # planner take it for an index condition on a partial index of the claimable rows: every
        # due row read and compared with the whole array, 137 ms to claim 512 of 10,000 through
        # ix_deliveries_claimable; by key, 9.8 ms (EXPLAIN ANALYZE, PostgreSQL 15).
        still_due = func.coalesce(still_due, false())
    else:
        picked = deliveries.c.id.in_(chosen.scalar_subquery())
    return (
        update(deliveries)
        .where(picked, still_due)
        .values(
            status=DeliveryStatus.DELIVERING,
            claim_token=bindparam("b_token"),
            claimed_by=_HOLDER,
            claimed_until=bindparam("b_until", type_=UTCDateTime()),
            # Should this claim be abandoned, the delivery is due again when the lease ends: a
            # `delivering` row whose next_attempt_at has passed is claimable like a pending one.
            next_attempt_at=bindparam("b_until", type_=UTCDateTime()),
            updated_at=_NOW,
        )
    )


_CLAIM = {name: _claim_statement(name == "postgresql") for name in ("sqlite", "postgresql")}
# Counted once, not once per claimed row: PostgreSQL, sure from its statistics that a token matches
# one row, joined the count to each of them, and a claim of 270 rows read the 270 live claims 270
# times (36 ms; 2.4 ms counted once, EXPLAIN ANALYZE after ANALYZE, PostgreSQL 15).
_CLAIMED_NOW = _live_claims(once=True)
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
        # A probe: claimed while the partner's circuit was half-open. Read as a boolean, not the
        # time, which would go through the column type's own conversion for every row.
        partners.c.circuit_open_until.is_not(None).label("probe"),
        _slots(_CLAIMED_NOW).label("slots"),
        partners.c.revision,
    )
    .join(events, events.c.id == deliveries.c.event_id)
    .join(partners, partners.c.id == deliveries.c.partner_id)
    .outerjoin(_CLAIMED_NOW, _CLAIMED_NOW.c.partner_id == partners.c.id)
    .where(
        _claimable(deliveries),
        deliveries.c.next_attempt_at == bindparam("b_until", type_=UTCDateTime()),
        deliveries.c.claim_token == bindparam("b_token"),
    )
    .order_by(deliveries.c.created_at, deliveries.c.event_id, deliveries.c.partner_id)
)
# The partners one claim took, found by what the claim wrote (as above).
_CLAIMED_PARTNERS = select(deliveries.c.partner_id).where(
    _claimable(deliveries),
    deliveries.c.next_attempt_at == bindparam("b_until", type_=UTCDateTime()),
    deliveries.c.claim_token == bindparam("b_token"),
)
# Their stored secrets, newest first: each is opened once per claim, not once per delivery.
_CLAIMED_SECRETS = (
    select(
        partner_secrets.c.id,
        partner_secrets.c.partner_id,
        partner_secrets.c.secret,
        partner_secrets.c.expires_at,
    )
    .where(partner_secrets.c.partner_id.in_(_CLAIMED_PARTNERS))
    .order_by(partner_secrets.c.id.desc())
)
# The digests of every secret they were issued (partners.record_digests), for their answers.
_CLAIMED_DIGESTS = select(secret_digests.c.partner_id, secret_digests.c.digest).where(
    secret_digests.c.partner_id.in_(_CLAIMED_PARTNERS)
)


async def _claimed_digests(
    conn: AsyncConnection, *, token: str, until: datetime
) -> dict[str, frozenset[str]]:
    """Partner id -> the digests of every secret it was issued, for the partners one claim took."""
    found: dict[str, set[str]] = {}
    for partner_id, digest in await conn.execute(_CLAIMED_DIGESTS, {"b_until": until, "b_token": token}):
        found.setdefault(partner_id, set()).add(digest)
    return {partner_id: frozenset(each) for partner_id, each in found.items()}


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


def _depth_of_each(deep: Mapping[str, int] | Collection[str] | None, depth: int) -> dict[str, int]:
    """Each partner named deep with its depth: its own, or ``depth``."""
    depths = dict(deep) if isinstance(deep, Mapping) else dict.fromkeys(deep or (), depth)
    if any(not isinstance(each, int) or each < 1 for each in (depth, *depths.values())):
        raise ValueError("depth must be a whole number, at least 1")
    return depths


def _share(limit: int, deep: Collection[str] | None, cap: int | None = None) -> int:
    """How many due rows the claim reads of each partner in its first pass (``b_each``).

    Ranking every partner's due rows up to the limit costs more than the claim itself when many
    partners share it: on SQLite, ten partners read 512 rows each to claim 512 in all took 29 µs
    a claimed row, against 10.5 µs reading their shares; on PostgreSQL ten partners read 270 rows
    each to claim 270 (EXPLAIN ANALYZE: 2,700 rows ranked, 9.8 ms of the claim's 24.7 ms). The
    partners claimed ahead (``deep``) take the claim's rows between them, the others a slot or
    two each, so each reads its share of the limit among the deep ones (never more than its own
    headroom on PostgreSQL, whose LIMIT takes a column). With none deep (a worker's first claim,
    or every partner failing), no partner may take more than its slots, so each reads the default
    ``cap`` at most: a worker starting beside ten partners at the default cap read 512 rows of
    each of the eleven to claim 88 (36 ms; 8 rows each, 14 ms, SQLite). Should the claim come back
    short while a share held it back (a partner with a larger cap of its own, say), a second pass
    reads the rest."""
    if deep is None:
        return limit
    if not deep:
        return limit if cap is None else min(limit, cap)
    return -(-limit // len(deep))


async def claim_due(
    conn: AsyncConnection,
    *,
    now: datetime,
    limit: int,
    lease: timedelta,
    default_cap: int,
    keyring: Keyring,
    token: str | None = None,
    holder: str | None = None,
    depth: int = 1,
    deep: Mapping[str, int] | Collection[str] | None = None,
    max_slots: int | None = None,
    clock: Clock | None = None,
) -> list[Job]:
    """Claim up to ``limit`` due deliveries for ``lease``: partners in turn, each within its cap,
    for ``holder`` (a worker run; one of its own when not given), up to ``depth`` times each
    partner's slots for the partners in ``deep`` (every partner when None), or as many times as
    ``deep`` maps it to, up to its slots for the others; a partner's slots are never more than
    ``max_slots`` (no bound when None).

    Due: pending with ``next_attempt_at`` passed, or delivering with its lease run out (its
    worker died; it goes out again under the same attempt number, as no attempt was logged).

    ``clock``, when given, is read again once the claim holds its lock (on PostgreSQL it may wait
    for another worker's claim, up to ``locks.WAIT_AT_MOST_S``): the lease and the due test count
    from then, not from ``now``, so the wait does not eat into the lease. Every job of one claim
    has the same ``claimed_until``.
    """
    depths = _depth_of_each(deep, depth)
    token = token or new_claim_token()
    if conn.dialect.name == "postgresql":
        await locks.take(conn, CLAIM_LOCK)
        await conn.execute(_PLANNED_NOW)
    if clock is not None:
        now = clock()
    until = now + lease
    params = {
        "b_now": now,
        "b_limit": limit,
        "b_token": token,
        "b_until": until,
        "b_cap": default_cap,
        "b_most": NO_MOST if max_slots is None else max_slots,
        "b_holder": holder or token,
        "b_depth": depth,
        "b_all_deep": deep is None,
        **_named(conn.dialect.name, depths),
    }
    claim = _CLAIM[conn.dialect.name]
    each = _share(limit, deep, default_cap)
    taken = (await conn.execute(claim, {**params, "b_each": each})).rowcount
    # Batches ready now are formed after the claim's write (SQLite then holds its write lock before
    # this transaction reads anything: a read first could not be upgraded once another connection
    # had written) and claimed in a second pass, like any delivery; so is what a share left. A
    # share held a partner back only if it took its whole share, so the claim took at least that.
    formed = await form_batches(conn, now=now)
    if taken < limit and (formed or each <= taken):
        rest = limit - taken
        taken += (await conn.execute(claim, {**params, "b_limit": rest, "b_each": rest})).rowcount
    if not taken:
        return []
    rows = (await conn.execute(_CLAIMED_JOBS, params)).all()
    signing = await _claimed_secrets(conn, token=token, until=until, now=now, keyring=keyring)
    known = await _claimed_digests(conn, token=token, until=until)
    none: frozenset[str] = frozenset()
    jobs = []
    # Unpacked in _CLAIMED_JOBS's column order: a turn builds hundreds of jobs, and reading each
    # column by name costs more than the rest of building one.
    for row in rows:
        delivery_id, attempts, event_id, kind, payload, batch, partner_id, url, probe, slots, revision = row
        if partner_id not in signing:
            continue  # nothing to sign with (see _claimed_secrets): handed back below
        jobs.append(
            Job(
                delivery_id,
                event_id,
                kind,
                partner_id,
                url,
                payload.encode(),
                attempts + 1,
                signing[partner_id],
                token,
                until,
                bool(probe),
                bool(batch),
                slots,
                known.get(partner_id, none),
                revision,
            )
        )
    if len(jobs) < len(rows):  # rare: a partner's secrets discarded, or sealed under a dropped key
        waiting = {row.partner_id for row in rows} - signing.keys()
        await _hand_back_unsigned(conn, waiting, token=token, until=until, now=now)
    return jobs


async def _hand_back_unsigned(
    conn: AsyncConnection, partner_ids: Collection[str], *, token: str, until: datetime, now: datetime
) -> None:
    """Make what this claim took of ``partner_ids``, partners it cannot sign for, ``pending`` again,
    unclaimed, due when the claim's lease would have ended, and the rest of their deliveries due now
    with it: they show as waiting (no attempt, no worker holding them), and each partner is claimed
    again once a lease, not a few of its deliveries at every turn, until it has a secret that opens
    (``rotate-secret``, or the key that sealed its secret listed again)."""
    due = and_(_claimable(deliveries), deliveries.c.next_attempt_at <= now)
    await conn.execute(
        update(deliveries)
        .where(deliveries.c.partner_id.in_(partner_ids), or_(deliveries.c.claim_token == token, due))
        .values({**requeued(now), "next_attempt_at": until, "claimed_by": None})
    )
    for partner_id in sorted(partner_ids):
        log.warning(
            "partner has no secret to sign with; its deliveries wait for rotate-secret, or for the "
            "key that sealed its secret to be listed in SERVICE_SECRETS_KEY again",
            extra={"partner": partner_id},
        )


async def release(conn: AsyncConnection, jobs: Sequence[Job], *, now: datetime) -> None:
    """Hand back claimed deliveries that were never attempted (a worker stopping cleanly)."""
    if not jobs:
        return
    await conn.execute(
        update(deliveries)
        .where(deliveries.c.id == bindparam("b_id"), deliveries.c.claim_token == bindparam("b_token"))
        .values(**requeued(now)),
        [{"b_id": job.delivery_id, "b_token": job.claim_token} for job in jobs],
    )
    await notify(conn)  # another worker may take them now


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
        .where(_claimable(deliveries), partners.c.status == literal_column(f"'{PartnerStatus.ACTIVE}'"))
    )
    formed = await next_formed(conn)  # a batch forms (and is due) when its oldest has waited
    return min((moment for moment in (due, formed) if moment is not None), default=None)
