"""Settle: what an attempt's answer does to its delivery and its partner, and recording it.

``decide`` turns an attempt into its record: delivered, retried later on the schedule, failed once
the schedule is spent, or paused (410). ``record`` logs a batch of records in the caller's
transaction, each guarded by its claim token so a worker whose lease was taken over cannot
overwrite the newer claim, and returns what the attempts do to their partners as data
(``PartnerEffect``: a pause, a circuit's new state, a disable), folded by ``effects`` through each
partner's circuit breaker (``service.webhooks.breaker``); ``partners.apply`` writes them, in the
same transaction.

Delivery states: ``pending`` (waiting, or its partner is paused) -> ``delivering`` (claimed) ->
``delivered`` | ``pending`` (retry scheduled) | ``failed`` (schedule spent; an admin retry makes it
``pending`` again). A batch's members follow it when it is delivered or fails.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    ARRAY,
    Dialect,
    String,
    any_,
    bindparam,
    func,
    insert,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from service.db.tables import UTCDateTime, deliveries, delivery_attempts
from service.states import STATUS_AFTER, AttemptOutcome, CircuitChange, DeliveryStatus, PartnerStatus
from service.webhooks.breaker import BreakerPolicy, BreakerState, after_attempt
from service.webhooks.claim import Job
from service.webhooks.partners import PartnerEffect, Standing, lock_standing
from service.webhooks.retry import RetryPolicy, Verdict
from service.webhooks.send import Attempt


class Settlement(NamedTuple):
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


def decide(
    job: Job, attempt: Attempt, *, policy: RetryPolicy, rng: random.Random, now: datetime
) -> Settlement:
    """What an attempt's answer does to its delivery: delivered, retry later, failed or paused."""
    verdict = attempt.verdict
    next_at: datetime | None = None
    if verdict is Verdict.DELIVERED:
        result = AttemptOutcome.DELIVERED
    elif verdict is Verdict.GONE:
        result, next_at = AttemptOutcome.PAUSED, now  # due again the moment the partner is resumed
    else:
        delay = policy.next_delay(job.attempt, verdict, rng, retry_after=attempt.retry_after)
        if delay is None:
            result = AttemptOutcome.FAILED
        else:
            result, next_at = AttemptOutcome.RETRY, now + timedelta(seconds=delay)
    return Settlement(
        job=job,
        started_at=attempt.started_at,
        duration_ms=attempt.duration_ms,
        status_code=attempt.status_code,
        error_class=attempt.error_class,
        response_excerpt=attempt.response_excerpt,
        outcome=result,
        finished_at=now,
        next_attempt_at=next_at,
    )


# What an attempt's log row holds, in order.
_LOGGED = (
    "delivery_id",
    "event_id",
    "event",
    "partner_id",
    "attempt",
    "started_at",
    "duration_ms",
    "status_code",
    "error_class",
    "response_excerpt",
    "outcome",
)


# A turn's attempts are logged in one statement, whatever their number. PostgreSQL takes them as
# one COPY (asyncpg's binary COPY, in the turn's transaction): against one INSERT of an array per
# column (unnest), the worker spends 3.5 µs less a delivery encoding them (41-50 thousand fewer
# instructions, benchmarks/instructions.py), and the database 3 µs less planning and unnesting
# them (drains of 10,000 with the attempts stubbed, /proc). SQLite takes one JSON array of rows
# (json_each). Row by row, as an executemany, SQLite's driver thread gave the interpreter lock back
# and waited to take it again for every row while the senders held it: a turn of 256 attempts
# spent some 50 ms there, and the senders ran out of claimed work before it ended
# (benchmarks/delivery.py --like-for-like).
def _log_statement() -> Any:
    rows = func.json_each(bindparam("b_rows", type_=String())).table_valued("value")
    chosen = select(*(func.json_extract(rows.c.value, f"$[{at}]") for at in range(len(_LOGGED))))
    return insert(delivery_attempts).from_select([delivery_attempts.c[name] for name in _LOGGED], chosen)


_LOG_SQLITE = _log_statement()


# Delivered attempts, the common case, are settled in one statement per batch, found by primary
# key and guarded by their claim tokens alone: a row another worker has claimed since carries
# another token and is left alone, and a token is only ever on a `delivering` row (the claim sets
# both; everything that moves a row on clears the token), so the status need not be tested. Tested
# as a literal, it matched ix_deliveries_in_flight's predicate, and PostgreSQL's generic plan read
# every live claim through that index and compared each with the whole array of ids: 14 of the
# 36 ms settling 348 rows, beside 1,024 claims (auto_explain, PostgreSQL 15). PostgreSQL takes the
# keys as one array (one statement, one prepared plan); SQLite, which has no arrays, as an
# expanding IN list.
def _mark_delivered_statement(postgres: bool) -> Any:
    if postgres:
        ids = deliveries.c.id == any_(bindparam("b_ids", type_=ARRAY(String())))
        tokens = deliveries.c.claim_token == any_(bindparam("b_tokens", type_=ARRAY(String())))
    else:
        ids = deliveries.c.id.in_(bindparam("b_ids", expanding=True))
        tokens = deliveries.c.claim_token.in_(bindparam("b_tokens", expanding=True))
    return (
        update(deliveries)
        .where(ids, tokens)
        .values(
            status=literal_column(f"'{DeliveryStatus.DELIVERED}'"),
            next_attempt_at=bindparam("b_at", type_=UTCDateTime()),
            delivered_at=bindparam("b_at", type_=UTCDateTime()),
            attempts=deliveries.c.attempts + 1,
            claimed_until=null(),
            claim_token=null(),
            updated_at=bindparam("b_at", type_=UTCDateTime()),
        )
    )


_MARK_DELIVERED = {name: _mark_delivered_statement(name == "postgresql") for name in ("sqlite", "postgresql")}
# What a retried, failed or paused attempt leaves on its delivery, in order.
_OUTCOME = ("id", "claim_token", "status", "next_attempt_at", "updated_at")


# Retries and failures are settled in one statement of one shape, as the attempt log is: each
# delivery's own status and next attempt, from one array per column (PostgreSQL) or one JSON array
# of rows (SQLite), found by primary key and claim token. Row by row, a partner failing every
# attempt cost each turn one driver round trip per failure. On PostgreSQL the ids come once more as
# an array, so the plan reads the primary key whatever its estimate of the unnested rows.
def _mark_outcome_statement(postgres: bool) -> Any:
    found: list[Any] = []
    value: dict[str, Any]
    if postgres:
        arrays = [bindparam(f"b_{name}", type_=ARRAY(deliveries.c[name].type)) for name in _OUTCOME]
        rows = func.unnest(*arrays).table_valued(*_OUTCOME).render_derived()
        value = {name: rows.c[name] for name in _OUTCOME}
        found.append(deliveries.c.id == any_(arrays[0]))
    else:
        rows = func.json_each(bindparam("b_rows", type_=String())).table_valued("value")
        value = {name: func.json_extract(rows.c.value, f"$[{at}]") for at, name in enumerate(_OUTCOME)}
    return (
        update(deliveries)
        .where(*found, deliveries.c.id == value["id"], deliveries.c.claim_token == value["claim_token"])
        .values(
            status=value["status"],
            next_attempt_at=value["next_attempt_at"],
            delivered_at=null(),
            attempts=deliveries.c.attempts + 1,
            claimed_until=null(),
            claim_token=null(),
            updated_at=value["updated_at"],
        )
        .returning(deliveries.c.id)
    )


_MARK_OUTCOME = {name: _mark_outcome_statement(name == "postgresql") for name in ("sqlite", "postgresql")}


def changes(effects: Sequence[PartnerEffect]) -> list[tuple[str, CircuitChange]]:
    """Each partner's circuit changes, in order."""
    return [(effect.partner_id, change) for effect in effects for change in effect.changes]


class Recorded(NamedTuple):
    """What ``record`` found: the attempts' effects on their partners, and the deliveries of those
    retried, failed or paused that their attempt settled nothing for (``superseded``): the claim
    it was made under had been taken over (its lease ran out before it was logged), and the
    delivery is another claim's to settle. Such an attempt is logged and moves its partner's
    circuit (it was made, and answered as it was), but e.g. did not fail its delivery for good."""

    effects: list[PartnerEffect]
    superseded: frozenset[str] = frozenset()


async def record(conn: AsyncConnection, records: Sequence[Settlement], *, breaker: BreakerPolicy) -> Recorded:
    """Log the attempts and settle their deliveries in the caller's transaction; what they do to
    their partners, read under a lock on each partner's row (``partners.lock_standing``), taken
    before any delivery's on PostgreSQL."""
    if not records:
        return Recorded([])
    partner_ids = sorted({record.job.partner_id for record in records})
    # On PostgreSQL the partners' rows first, before any delivery's, the order a partner's removal
    # and a resume take (its row, then its deliveries): one waits for the other. Settling first,
    # the turn deadlocked with a removal that had locked the partner's row and waited for the
    # delivery the turn had just settled. On SQLite the read comes after the first write, which
    # takes the database's write lock: before it, a removal committing meanwhile would go unseen.
    standing = await lock_standing(conn, partner_ids) if conn.dialect.name == "postgresql" else None
    delivered = [record for record in records if record.outcome is AttemptOutcome.DELIVERED]
    if delivered:
        await conn.execute(
            _MARK_DELIVERED[conn.dialect.name],
            {
                "b_ids": [record.job.delivery_id for record in delivered],
                "b_tokens": list({record.job.claim_token for record in delivered}),
                # The batch's last finish: within LOG_DELAY of each attempt's own.
                "b_at": max(record.finished_at for record in delivered),
            },
        )
    superseded: frozenset[str] = frozenset()
    others = [record for record in records if record.outcome is not AttemptOutcome.DELIVERED]
    if others:
        marked = await conn.execute(_MARK_OUTCOME[conn.dialect.name], _outcome_params(conn.dialect, others))
        superseded = frozenset(record.job.delivery_id for record in others) - set(marked.scalars())
    # After the statements above, which began the transaction on the driver's connection: the COPY
    # goes to that connection directly, and must not run before it is in the transaction.
    await _log(conn, records)
    settled_batches = [record for record in records if record.job.batch]
    if settled_batches:
        await _follow_batches(conn, settled_batches)
    if standing is None:
        standing = await lock_standing(conn, partner_ids)
    return Recorded(effects(records, standing, breaker), superseded)


async def claims(conn: AsyncConnection, delivery_ids: Sequence[str]) -> set[tuple[str, str | None]]:
    """Each of the deliveries with the claim token it holds now (None: unclaimed), in the caller's
    transaction (one SELECT). ``record`` settles a delivery only under its record's token, but logs
    the attempt and moves the partner's circuit whatever it finds: a record whose delivery no
    longer holds its token (settled already, or cancelled) must not be recorded. The worker asks
    only for records a failed turn put back, whose commit may have landed with its answer lost
    (``Worker._still_claimed``)."""
    found = await conn.execute(
        select(deliveries.c.id, deliveries.c.claim_token).where(deliveries.c.id.in_(delivery_ids))
    )
    return {(delivery_id, token) for delivery_id, token in found}


# Only where the batch's own row took the outcome: an attempt whose claim was taken over (its lease
# ran out before it was logged) settles nothing, and its members stay with the batch's new claim.
_SETTLED_BATCH = deliveries.alias("settled_batch")
_FOLLOW = (
    update(deliveries)
    .where(
        deliveries.c.batch_id == bindparam("b_batch"),
        deliveries.c.status == bindparam("b_from"),
        select(_SETTLED_BATCH.c.id)
        .where(_SETTLED_BATCH.c.id == bindparam("b_batch"), _SETTLED_BATCH.c.status == bindparam("b_status"))
        .exists(),
    )
    .values(
        status=bindparam("b_status"),
        delivered_at=bindparam("b_delivered"),
        updated_at=bindparam("b_now"),
    )
)


async def _follow_batches(conn: AsyncConnection, records: Sequence[Settlement]) -> None:
    """A batch delivered or failed takes its members with it (a retry keeps them ``batched``)."""
    follow = [
        {
            "b_batch": record.job.delivery_id,
            "b_from": DeliveryStatus.BATCHED,
            "b_status": STATUS_AFTER[record.outcome],
            "b_delivered": record.finished_at if record.outcome is AttemptOutcome.DELIVERED else None,
            "b_now": record.finished_at,
        }
        for record in records
        if record.outcome in (AttemptOutcome.DELIVERED, AttemptOutcome.FAILED)
    ]
    if follow:
        await conn.execute(_FOLLOW, follow)


def _log_row(record: Settlement, started_at: Any) -> tuple[Any, ...]:
    """An attempt's log row, its values in ``_LOGGED`` order."""
    job = record.job
    return (
        job.delivery_id,
        job.event_id,
        job.kind,
        job.partner_id,
        job.attempt,
        started_at,
        record.duration_ms,
        record.status_code,
        record.error_class,
        record.response_excerpt,
        str(record.outcome),
    )


async def _log(conn: AsyncConnection, records: Sequence[Settlement]) -> None:
    """Write the attempts' log rows, their start times as the column's own type stores them: one
    COPY on PostgreSQL, one INSERT on SQLite."""
    stored = delivery_attempts.c.started_at.type.dialect_impl(conn.dialect).bind_processor(conn.dialect)
    assert stored is not None  # UTCDateTime: naive UTC (SQLite's DATETIME text)
    rows = [_log_row(record, stored(record.started_at)) for record in records]
    if conn.dialect.name == "postgresql":
        driver = (await conn.get_raw_connection()).driver_connection
        if driver is None or not driver.is_in_transaction():  # would commit on its own
            raise RuntimeError("the attempt log is written in the caller's transaction, once it began")
        await driver.copy_records_to_table(delivery_attempts.name, records=rows, columns=_LOGGED)
    else:
        await conn.execute(_LOG_SQLITE, {"b_rows": json.dumps(rows)})


def _outcome_row(record: Settlement, stamp: Callable[[datetime], Any]) -> tuple[Any, ...]:
    """A delivery's values after an attempt that did not deliver, in ``_OUTCOME`` order."""
    job = record.job
    due = record.next_attempt_at or record.finished_at
    status = str(STATUS_AFTER[record.outcome])
    return (job.delivery_id, job.claim_token, status, stamp(due), stamp(record.finished_at))


def _outcome_params(dialect: Dialect, records: Sequence[Settlement]) -> dict[str, Any]:
    """The outcome statement's parameters: an array per column (PostgreSQL), or every row in one
    JSON document (SQLite), times as the column's own type stores them."""
    if dialect.name == "postgresql":
        columns = zip(*(_outcome_row(record, _unchanged) for record in records), strict=True)
        return {f"b_{name}": list(values) for name, values in zip(_OUTCOME, columns, strict=True)}
    stored = deliveries.c.next_attempt_at.type.dialect_impl(dialect).bind_processor(dialect)
    assert stored is not None  # UTCDateTime: naive UTC, as SQLite's DATETIME text
    return {"b_rows": json.dumps([_outcome_row(record, stored) for record in records])}


def _unchanged(moment: datetime) -> datetime:
    return moment


_CLEAR = BreakerState()  # a closed circuit with no failure counted


def effects(
    records: Sequence[Settlement], standing: Mapping[str, Standing], policy: BreakerPolicy
) -> list[PartnerEffect]:
    """What the attempts do to their partners: each partner's attempts folded, in the order they
    finished, through its circuit breaker (a 410 is an answer, neither way, and pauses it). Only
    partners something happens to are named; a pause or a disable only of an active partner."""
    by_partner: dict[str, list[Settlement]] = {}
    for record in records:
        by_partner.setdefault(record.job.partner_id, []).append(record)
    found = []
    for partner_id, attempts in by_partner.items():
        if partner_id not in standing:
            continue  # removed meanwhile
        status, before = standing[partner_id]
        if before == _CLEAR and all(record.outcome is AttemptOutcome.DELIVERED for record in attempts):
            continue  # a healthy partner delivered to: nothing moves (most of a busy turn's partners)
        active = status == PartnerStatus.ACTIVE
        pause = active and any(record.outcome is AttemptOutcome.PAUSED for record in attempts)
        state, happened = before, []
        for record in sorted(attempts, key=lambda record: record.finished_at):
            if record.outcome is AttemptOutcome.PAUSED:
                continue
            state, more = after_attempt(
                state,
                ok=record.outcome is AttemptOutcome.DELIVERED,
                probe=record.job.probe,
                at=record.finished_at,
                policy=policy,
            )
            happened += more
        disable = CircuitChange.DISABLED in happened and active and not pause
        if CircuitChange.DISABLED in happened and not disable:
            happened = [change for change in happened if change is not CircuitChange.DISABLED]
        moved = state != before
        if moved or pause or disable:
            found.append(
                PartnerEffect(
                    partner_id,
                    breaker=state if moved else None,
                    pause=pause,
                    disable=disable,
                    changes=tuple(dict.fromkeys(happened)),
                )
            )
    return found
