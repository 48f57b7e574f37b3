"""One partner cannot hurt the others: caps, fair claims, circuit breaking, poison-proof bookkeeping."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text
from webhook_helpers import (
    AUTH,
    Receiver,
    Reply,
    deliveries,
    drain,
    fixed_keyring,
    onboard,
    publish,
    room_claimed,
    seed_outbox,
    settings,
)

from service.db.engine import create_engine
from service.db.tables import delivery_attempts
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.states import AttemptOutcome
from service.webhooks import claim as claim_module
from service.webhooks import outbox, partners, send, settle, wiring
from service.webhooks import worker as worker_module
from service.webhooks.claim import Job, claim_due
from service.webhooks.partners import NewPartner
from service.webhooks.settle import Settlement

HANG = 2.5  # seconds a hanging partner sits on each request: past the attempt timeout below
TIMEOUT = 2.0


async def _claimed(engine: Any, clock: Any, partner: str, count: int) -> list[Job]:
    """``count`` deliveries for one new partner, claimed."""
    await seed_outbox(engine, clock, [(partner, "https://partner.example/hook", None)], count, fixed_keyring())
    async with engine.begin() as conn:
        return await claim_due(
            conn, now=clock(), limit=count, lease=timedelta(seconds=30), default_cap=8, keyring=fixed_keyring()
        )


async def _recorded(engine: Any, records: list[Settlement], statement: str | tuple[str, ...]) -> list[bool]:
    """``settle.record`` the records in one transaction; for each statement it ran that starts
    with ``statement`` (or one of them), whether the driver ran it row by row (executemany). A
    COPY, which goes to asyncpg's connection directly, not through SQLAlchemy, counts as one
    statement, ``COPY <table>``."""
    from unittest import mock

    import asyncpg
    from sqlalchemy import event

    from service.webhooks.breaker import BreakerPolicy

    ran: list[bool] = []

    def seen(conn: Any, cursor: Any, text: str, parameters: Any, context: Any, many: bool) -> None:
        if text.lstrip().upper().startswith(statement):
            ran.append(many)

    copy = asyncpg.Connection.copy_records_to_table

    async def copied(driver: Any, table: str, **options: Any) -> Any:
        if f"COPY {table}".upper().startswith(statement):
            ran.append(False)
        return await copy(driver, table, **options)

    event.listen(engine.sync_engine, "before_cursor_execute", seen)
    try:
        with mock.patch.object(asyncpg.Connection, "copy_records_to_table", copied):
            async with engine.begin() as conn:
                await settle.record(conn, records, breaker=BreakerPolicy())
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
    return ran


def test_settling_reads_its_partners_first_on_postgresql_and_after_its_first_write_on_sqlite(
    database_url: str, clock: Any
) -> None:
    """On PostgreSQL ``settle.record`` locks its partners' rows before any delivery's, the order a
    partner's removal takes, so the two wait for each other instead of deadlocking. On SQLite it
    reads them after its first write, which takes the database's write lock: read before it, a
    removal committing meanwhile would go unseen, and the attempts' effects (a pause) would be
    written over the removed partner."""
    from sqlalchemy import event

    from service.webhooks.breaker import BreakerPolicy

    async def scenario() -> tuple[str, list[str]]:
        engine = create_engine(database_url)
        jobs = await _claimed(engine, clock, "ordered", 2)
        delivered = AttemptOutcome.DELIVERED
        records = [Settlement(job, clock(), 5, 200, None, "ok", delivered, clock()) for job in jobs]
        ran: list[str] = []

        def seen(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            words = " ".join(statement.split()).upper()
            if words.startswith("UPDATE DELIVERIES"):
                ran.append("deliveries")
            elif words.startswith("SELECT") and " FROM PARTNERS " in f"{words} ":
                ran.append("partners")

        event.listen(engine.sync_engine, "before_cursor_execute", seen)
        try:
            async with engine.begin() as conn:
                await settle.record(conn, records, breaker=BreakerPolicy())
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", seen)
            await engine.dispose()
        return engine.dialect.name, ran

    dialect, ran = asyncio.run(scenario())
    expected = ["partners", "deliveries"] if dialect == "postgresql" else ["deliveries", "partners"]
    assert ran == expected


@pytest.mark.parametrize("hanging", [1, 10])
def test_hanging_partners_do_not_hold_up_a_healthy_one(database_url: str, clock: Any, hanging: int) -> None:
    """With K partners that never answer in time, a healthy partner still gets every event at once,
    and each hanging partner holds no more than its cap of attempts."""
    events = 30
    config = Settings(database_url=database_url, **settings(receiver_timeout=TIMEOUT))
    with Receiver(Reply(delay=HANG)) as stuck, Receiver() as healthy:

        async def scenario() -> tuple[bool, int]:
            engine = create_engine(database_url)
            stuck_partners = [(f"stuck {n}", stuck.url(f"/p{n}"), None) for n in range(hanging)]
            targets = [("healthy", healthy.url(), None), *stuck_partners]
            await seed_outbox(engine, clock, targets, events, load_keyring(config))
            worker = wiring.worker(engine, config, clock=clock)
            await worker.start()
            try:
                arrived = await asyncio.to_thread(healthy.wait_for, lambda got: len(got) >= events, TIMEOUT)
                return arrived, len(stuck.requests)
            finally:
                await worker.stop(grace=0)
                await engine.dispose()

        arrived, stuck_requests = asyncio.run(scenario())
    assert arrived, f"the healthy partner got {len(healthy.requests)} of {events} events"
    assert len(healthy.requests) == events
    assert stuck_requests <= config.webhook_max_in_flight * hanging


def test_the_cap_holds_across_workers_claiming_at_once(database_url: str, clock: Any) -> None:
    """Two workers (two engines, two connections) claiming side by side never exceed a partner's
    cap together; when the leases end, the cap is free again."""
    lease = timedelta(seconds=30)

    async def scenario() -> list[int]:
        engines = [create_engine(database_url) for _ in range(2)]
        await seed_outbox(engines[0], clock, [("capped", "https://partner.example/hook", 3)], 20, fixed_keyring())

        async def claim(engine: Any) -> int:
            async with engine.begin() as conn:
                jobs = await claim_due(
                    conn, now=clock(), limit=10, lease=lease, default_cap=8, keyring=fixed_keyring()
                )
            return len(jobs)

        claimed = []
        for _ in range(3):
            claimed.append(sum(await asyncio.gather(*(claim(engine) for engine in engines))))
        clock.advance(lease.total_seconds())
        claimed.append(sum(await asyncio.gather(*(claim(engine) for engine in engines))))
        for engine in engines:
            await engine.dispose()
        return claimed

    assert asyncio.run(scenario()) == [3, 0, 0, 3]


async def _claim_ahead(
    engine: Any,
    clock: Any,
    holder: str,
    *,
    depth: int,
    lease: timedelta,
    deep: set[str] | dict[str, int] | None = None,
    limit: int = 100,
) -> list[Job]:
    """One claim of up to ``limit`` by ``holder``, ``depth`` times the slots for ``deep`` (None: all)."""
    async with engine.begin() as conn:
        return await claim_due(
            conn,
            now=clock(),
            limit=limit,
            lease=lease,
            default_cap=8,
            keyring=fixed_keyring(),
            holder=holder,
            depth=depth,
            deep=deep,
        )


def test_claims_ahead_of_free_slots_keep_two_workers_within_the_cap(database_url: str, clock: Any) -> None:
    """A holder claims up to depth times its slots; another holder's slots are what the cap leaves
    after the first one's claimed rows, so the two never send more than the cap at once; a probe
    (half-open circuit) is claimed alone, without depth."""
    from service.webhooks.breaker import BreakerPolicy

    lease = timedelta(seconds=30)

    async def scenario() -> list[list[int]]:
        engine = create_engine(database_url)
        await seed_outbox(engine, clock, [("capped", "https://partner.example/hook", 3)], 40, fixed_keyring())

        async def claim(holder: str) -> list[Job]:
            return await _claim_ahead(engine, clock, holder, depth=4, lease=lease)

        seen = []
        first = await claim("worker-a")
        seen.append([len(first), *sorted({job.slots for job in first})])
        seen.append([len(await claim("worker-b"))])  # the cap is taken by worker-a's claimed rows
        async with engine.begin() as conn:  # worker-a logs ten of its twelve
            done = [
                Settlement(job, clock(), 5, 200, None, "ok", AttemptOutcome.DELIVERED, clock())
                for job in first[:10]
            ]
            await partners.apply(conn, (await settle.record(conn, done, breaker=BreakerPolicy())).effects, now=clock())
        second = await claim("worker-b")  # worker-a still holds 2: one slot is left
        seen.append([len(second), *sorted({job.slots for job in second})])
        seen.append([len(await claim("worker-a"))])  # worker-b's 4 claimed rows exceed what is left
        async with engine.begin() as conn:  # the partner's circuit is half-open: one probe
            await conn.execute(
                partners.partners.update().values(circuit_open_until=clock() - timedelta(seconds=1))
            )
        clock.advance(lease.total_seconds())  # every claim so far has run out
        probe = await claim("worker-c")
        seen.append([len(probe), *sorted({job.slots for job in probe})])
        await engine.dispose()
        return seen

    assert asyncio.run(scenario()) == [[12, 3], [0], [4, 1], [0], [1, 1]]


def test_claims_ahead_only_for_the_partners_named_deep(database_url: str, clock: Any) -> None:
    """Depth is earned: a claim naming one partner deep takes its depth for that one and the free
    slots only for the other; naming none gives everyone their slots, and the default (None) gives
    everyone the depth."""

    async def scenario() -> list[dict[str, int]]:
        engine = create_engine(database_url)
        targets = [("fast", "https://fast.example/hook", 2), ("slow", "https://slow.example/hook", 2)]
        await seed_outbox(engine, clock, targets, 20, fixed_keyring())
        async with engine.begin() as conn:
            ids = {row.name: row.id for row in await conn.execute(select(partners.partners))}
        names = {partner_id: name for name, partner_id in ids.items()}
        seen = []
        for holder, deep in (("a", {ids["fast"]}), ("b", set()), ("c", None)):
            jobs = await _claim_ahead(engine, clock, holder, depth=3, lease=timedelta(seconds=30), deep=deep)
            seen.append({name: sum(names[job.partner_id] == name for job in jobs) for name in ids})
            clock.advance(31)  # every claim so far has run out
        await engine.dispose()
        return seen

    assert asyncio.run(scenario()) == [{"fast": 6, "slow": 2}, {"fast": 2, "slow": 2}, {"fast": 6, "slow": 6}]


def test_each_partner_named_deep_may_have_a_depth_of_its_own(database_url: str, clock: Any) -> None:
    """A claim given each deep partner's depth holds each to its own: a partner whose attempts take
    long is claimed fewer times its slots than one answering at once; one named with depth 1, and
    one not named, get their slots only."""

    async def scenario() -> dict[str, int]:
        engine = create_engine(database_url)
        names = ("quick", "slow", "one", "unnamed")
        await seed_outbox(engine, clock, [(name, f"https://{name}.example/hook", 2) for name in names], 20,
                          fixed_keyring())  # fmt: skip
        async with engine.begin() as conn:
            ids = {row.name: row.id for row in await conn.execute(select(partners.partners))}
        deep = {ids["quick"]: 4, ids["slow"]: 2, ids["one"]: 1}
        jobs = await _claim_ahead(engine, clock, "a", depth=64, lease=timedelta(seconds=30), deep=deep)
        await engine.dispose()
        by_id = {partner_id: name for name, partner_id in ids.items()}
        return {name: sum(by_id[job.partner_id] == name for job in jobs) for name in names}

    assert asyncio.run(scenario()) == {"quick": 8, "slow": 4, "one": 2, "unnamed": 2}


@pytest.mark.parametrize("deep", [{"p": 0}, {"p": 2, "q": -1}, {"p": 2.5}])
def test_a_depth_below_one_or_not_whole_is_refused(deep: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        claim_module._depth_of_each(deep, 4)


@pytest.mark.parametrize(
    ("limit", "deep", "each"),
    [
        (512, None, 512),  # every partner deep: their number is not known here
        (512, set(), 512),  # none deep: each takes a slot or two, whatever the limit
        (512, {"a"}, 512),
        (512, {f"p{n}" for n in range(10)}, 52),
        (270, {f"p{n}" for n in range(10)}, 27),
        (10, {f"p{n}" for n in range(3)}, 4),
    ],
)
def test_a_claim_reads_each_deep_partner_its_share(limit: int, deep: set[str] | None, each: int) -> None:
    assert claim_module._share(limit, deep) == each


@pytest.mark.parametrize(
    ("limit", "deep", "cap", "each"),
    [
        (512, set(), 8, 8),  # none deep: no partner may take more than its slots
        (4, set(), 8, 4),
        (512, None, 8, 512),  # every partner deep
        (512, {f"p{n}" for n in range(10)}, 8, 52),  # the deep partners share the claim
    ],
)
def test_with_none_deep_a_claim_reads_each_partner_the_default_cap(
    limit: int, deep: set[str] | None, cap: int, each: int
) -> None:
    assert claim_module._share(limit, deep, cap) == each


def test_with_none_deep_a_partner_with_a_larger_cap_still_gets_its_slots(
    database_url: str, clock: Any
) -> None:
    """A worker's first claim reads each partner the default cap (8) first; a partner whose own cap
    is larger gets the rest of its slots in the second pass, and the others no more than theirs."""

    async def scenario() -> dict[str, int]:
        engine = create_engine(database_url)
        targets = [("wide", "https://wide.example/hook", 20)]
        targets += [(f"p{n}", f"https://p{n}.example/hook", None) for n in range(3)]
        await seed_outbox(engine, clock, targets, 30, fixed_keyring())
        async with engine.begin() as conn:
            names = {row.id: row.name for row in await conn.execute(select(partners.partners))}
        jobs = await _claim_ahead(
            engine, clock, "a", depth=4, lease=timedelta(seconds=30), deep=set(), limit=512
        )
        await engine.dispose()
        return {name: sum(names[job.partner_id] == name for job in jobs) for name in names.values()}

    assert asyncio.run(scenario()) == {"wide": 20, "p0": 8, "p1": 8, "p2": 8}


def test_a_claim_short_of_its_limit_while_shares_held_it_back_takes_the_rest(
    database_url: str, clock: Any
) -> None:
    """Three deep partners share a claim of 12 (4 each on the first pass); one has a single
    due delivery, so the other two take what it left between them, and the claim is full."""

    async def scenario() -> dict[str, int]:
        engine = create_engine(database_url)
        targets = [(name, f"https://{name}.example/hook", 10) for name in ("few", "many", "more")]
        await seed_outbox(engine, clock, targets[1:], 10, fixed_keyring())
        await seed_outbox(engine, clock, targets[:1], 1, fixed_keyring())  # its one event goes to all three
        async with engine.begin() as conn:
            ids = {row.name: row.id for row in await conn.execute(select(partners.partners))}
        lease = timedelta(seconds=30)
        jobs = await _claim_ahead(engine, clock, "a", depth=4, lease=lease, deep=set(ids.values()), limit=12)
        await engine.dispose()
        names = {partner_id: name for name, partner_id in ids.items()}
        return {name: sum(names[job.partner_id] == name for job in jobs) for name in ids}

    taken = asyncio.run(scenario())
    assert sum(taken.values()) == 12
    assert taken["few"] == 1
    assert abs(taken["many"] - taken["more"]) <= 1


def _finished(partner: str, outcome: AttemptOutcome) -> Settlement:
    at = datetime(2026, 11, 25, tzinfo=UTC)
    job = Job("dlv", "evt", "room.claimed", partner, "https://x.example/", b"{}", 1, ("s",), "tok", at)
    return Settlement(job, at, 5, None, None, None, outcome, at)


DELIVERED, RETRY = AttemptOutcome.DELIVERED, AttemptOutcome.RETRY


@pytest.mark.parametrize(
    ("finished", "delivered_last", "deep"),
    [
        ([], {}, {}),  # nothing delivered, now or last turn: slots only
        ([("a", DELIVERED)], {}, {"a": 0.005}),  # delivered now, as fast as it did
        ([], {"a": 0.3}, {"a": 0.3}),  # the turn right after a claim logs nothing: the depth holds
        ([("b", DELIVERED)], {"a": 0.3}, {"a": 0.3, "b": 0.005}),  # a's attempts are still out
        ([("a", RETRY)], {"a": 0.3}, {}),  # a failure ends it at once
        ([("a", DELIVERED), ("a", RETRY)], {"a": 0.3}, {"a": 0.005}),  # delivered this turn, as now
    ],
)
def test_a_partner_keeps_its_depth_one_turn_past_its_last_delivery_unless_it_failed(
    finished: list[tuple[str, AttemptOutcome]], delivered_last: dict[str, float], deep: dict[str, float]
) -> None:
    records = [_finished(partner, outcome) for partner, outcome in finished]
    assert worker_module._deep(records, delivered_last) == deep


def test_claims_serve_partners_in_turn(sqlite_url: str, clock: Any) -> None:
    """A partner with a large backlog does not crowd out another: a small claim takes from both."""

    async def scenario() -> list[str]:
        engine = create_engine(sqlite_url)
        async with engine.begin() as conn:
            big = await partners.create_partner(
                conn, NewPartner("big", "https://big.example/", None), now=clock(), keyring=fixed_keyring()
            )
        for index in range(50):
            await outbox.publish_event(
                engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
            )
        async with engine.begin() as conn:
            await partners.create_partner(
                conn, NewPartner("late", "https://late.example/", None), now=clock(), keyring=fixed_keyring()
            )
        await outbox.publish_event(engine, parse_event(room_claimed("latecomer"), now=clock()), now=clock())
        async with engine.begin() as conn:
            jobs = await claim_due(
                conn,
                now=clock(),
                limit=4,
                lease=timedelta(seconds=30),
                default_cap=8,
                keyring=fixed_keyring(),
            )
        await engine.dispose()
        return ["big" if job.partner_id == big.id else "late" for job in jobs]

    assert sorted(asyncio.run(scenario())) == ["big", "big", "big", "late"]


def test_a_reply_with_nul_and_control_bytes_is_stored_clean(database_url: str, clock: Any) -> None:
    """A partner answering with NUL and escape bytes has its excerpt stored as plain text; every
    other partner keeps receiving."""
    with Receiver(Reply(503, "bad\x00news\x1b[31m!\r\n")) as hostile, Receiver() as healthy:

        async def scenario() -> list[str | None]:
            engine = create_engine(database_url)
            config = Settings(database_url=database_url, **settings())
            targets = [("hostile", hostile.url(), None), ("healthy", healthy.url(), None)]
            await seed_outbox(engine, clock, targets, 5, load_keyring(config))
            async with wiring.worker(engine, config, clock=clock) as worker:
                assert await worker.drain() == 10
            async with engine.connect() as conn:
                excerpts = (await conn.execute(select(delivery_attempts.c.response_excerpt))).scalars().all()
            await engine.dispose()
            return list(excerpts)

        excerpts = asyncio.run(scenario())
    assert len(healthy.requests) == 5
    assert sorted(set(excerpts), key=str) == ["bad\ufffdnews\ufffd[31m!\ufffd\ufffd", "ok"]


def test_a_turns_attempts_are_logged_in_one_statement_exactly_as_they_happened(
    database_url: str, clock: Any
) -> None:
    """However many attempts a turn logs, they go in as one statement (an INSERT on SQLite, a COPY
    on PostgreSQL), and every value comes back as it was: text that quotes, escapes or looks like
    JSON paths, any Unicode, no answer at all, and start times to the microsecond."""


    excerpts = ['"quoted" and \\back\\slash', "ünïcødé ✓ 🚀", "$[0] [1, \"x\"] {}", "'; --", None]

    async def scenario() -> tuple[list[bool], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        engine = create_engine(database_url)
        jobs = await _claimed(engine, clock, "logged", 5)
        records = [
            Settlement(
                job,
                clock() + timedelta(microseconds=123457 * number),
                number,
                None if excerpt is None else 500 + number,
                "timeout" if excerpt is None else f"http_{500 + number}",
                excerpt,
                AttemptOutcome.RETRY,
                clock(),
                clock() + timedelta(minutes=1),
            )
            for number, (job, excerpt) in enumerate(zip(jobs, excerpts, strict=True))
        ]
        inserts = await _recorded(engine, records, ("INSERT", "COPY"))
        columns = [column for column in delivery_attempts.c if column.name != "id"]  # in table order
        async with engine.connect() as conn:
            stored = [tuple(row) for row in await conn.execute(select(*columns).order_by(delivery_attempts.c.id))]
        await engine.dispose()
        expected = [
            (
                record.job.delivery_id,
                record.job.event_id,
                record.job.kind,
                record.job.partner_id,
                record.job.attempt,
                record.started_at,
                record.duration_ms,
                record.status_code,
                record.error_class,
                record.response_excerpt,
                "retry",
            )
            for record in records
        ]
        return inserts, stored, expected

    inserts, stored, expected = asyncio.run(scenario())
    assert inserts == [False]
    assert sorted(stored, key=str) == sorted(expected, key=str)


def test_a_turns_attempt_log_goes_in_and_out_with_its_transaction(database_url: str, clock: Any) -> None:
    """The log rows are written in the turn's transaction (on PostgreSQL a COPY on the driver's
    own connection): rolled back, the turn leaves no attempt logged and its deliveries claimed."""
    from service.db.tables import deliveries
    from service.webhooks.breaker import BreakerPolicy

    async def scenario() -> tuple[int, list[str]]:
        engine = create_engine(database_url)
        jobs = await _claimed(engine, clock, "rolled back", 3)
        outcomes = [AttemptOutcome.DELIVERED, AttemptOutcome.RETRY, AttemptOutcome.FAILED]
        records = [
            Settlement(job, clock(), 5, 200, None, "ok", outcome, clock(), clock() + timedelta(minutes=1))
            for job, outcome in zip(jobs, outcomes, strict=True)
        ]
        async with engine.connect() as conn:
            transaction = await conn.begin()
            await settle.record(conn, records, breaker=BreakerPolicy())
            await transaction.rollback()
        async with engine.connect() as conn:
            logged = (await conn.execute(select(func.count()).select_from(delivery_attempts))).scalar_one()
            statuses = (await conn.execute(select(deliveries.c.status))).scalars().all()
        await engine.dispose()
        return logged, list(statuses)

    logged, statuses = asyncio.run(scenario())
    assert logged == 0
    assert statuses == ["delivering"] * 3


def test_a_turns_retries_and_failures_settle_in_one_statement_and_spare_a_claim_taken_since(
    database_url: str, clock: Any
) -> None:
    """Attempts that did not deliver settle their deliveries in one UPDATE, each with its own state
    and next attempt to the microsecond; a delivery another worker claimed since (another token)
    is left as that worker holds it."""
    from sqlalchemy import update

    from service.db.tables import deliveries

    outcomes = [AttemptOutcome.RETRY, AttemptOutcome.FAILED, AttemptOutcome.PAUSED, AttemptOutcome.RETRY]

    async def scenario() -> tuple[list[bool], dict[str, tuple[Any, ...]], list[Settlement]]:
        engine = create_engine(database_url)
        jobs = await _claimed(engine, clock, "failing", 4)
        records = [
            Settlement(
                job,
                clock(),
                number,
                500,
                "http_500",
                "no",
                outcome,
                clock() + timedelta(microseconds=7 * number),
                clock() + timedelta(minutes=number, microseconds=123457) if outcome is AttemptOutcome.RETRY else None,
            )
            for number, (job, outcome) in enumerate(zip(jobs, outcomes, strict=True))
        ]
        stolen = records[-1].job.delivery_id  # its lease ran out and another worker claimed it
        async with engine.begin() as conn:
            await conn.execute(update(deliveries).where(deliveries.c.id == stolen).values(claim_token="other"))
        updates = await _recorded(engine, records, "UPDATE DELIVERIES")
        columns = (
            deliveries.c.id,
            deliveries.c.status,
            deliveries.c.next_attempt_at,
            deliveries.c.attempts,
            deliveries.c.claim_token,
            deliveries.c.claimed_until,
            deliveries.c.updated_at,
        )
        async with engine.connect() as conn:
            rows = {row[0]: tuple(row[1:]) for row in await conn.execute(select(*columns))}
        await engine.dispose()
        return updates, rows, records

    updates, rows, records = asyncio.run(scenario())
    assert updates == [False]
    for record in records[:-1]:
        due = record.next_attempt_at or record.finished_at
        status = {"retry": "pending", "failed": "failed", "paused": "pending"}[str(record.outcome)]
        assert rows[record.job.delivery_id] == (status, due, 1, None, None, record.finished_at)
    stolen = rows[records[-1].job.delivery_id]
    assert (stolen[0], stolen[2], stolen[3]) == ("delivering", 0, "other")


def test_only_a_delivering_row_carries_a_claim_token(database_url: str, clock: Any) -> None:
    """Settling matches a delivery by id and claim token alone, so no way out of a claim may leave
    a token behind: delivered, retried, failed, paused, handed back unsent, requeued by an admin,
    resent, or cancelled with its partner removed while claimed."""
    from sqlalchemy import update

    from service.db.tables import deliveries
    from service.webhooks import requeue
    from service.webhooks.breaker import BreakerPolicy

    outcomes = [AttemptOutcome.DELIVERED, AttemptOutcome.RETRY, AttemptOutcome.FAILED, AttemptOutcome.PAUSED]

    async def statuses_and_tokens(engine: Any) -> list[tuple[str, str | None]]:
        async with engine.connect() as conn:
            return [tuple(row) for row in await conn.execute(select(deliveries.c.status, deliveries.c.claim_token))]

    async def scenario() -> tuple[list[tuple[str, str | None]], list[tuple[str, str | None]]]:
        engine = create_engine(database_url)
        jobs = await _claimed(engine, clock, "ways out", 7)
        settled, handed_back, expired, held = jobs[:4], jobs[4], jobs[5], jobs[6]
        records = [
            Settlement(
                job, clock(), 5, 200 if outcome is AttemptOutcome.DELIVERED else 500, None, "x", outcome, clock(),
                clock() + timedelta(minutes=1) if outcome in (AttemptOutcome.RETRY, AttemptOutcome.PAUSED) else None,
            )
            for job, outcome in zip(settled, outcomes, strict=True)
        ]  # fmt: skip
        async with engine.begin() as conn:
            await settle.record(conn, records, breaker=BreakerPolicy())
            await claim_module.release(conn, [handed_back], now=clock())
            # A lease that ran out (its worker died) is resent by an admin.
            await conn.execute(
                update(deliveries)
                .where(deliveries.c.id == expired.delivery_id)
                .values(next_attempt_at=clock() - timedelta(seconds=1), claimed_until=clock() - timedelta(seconds=1))
            )
        async with engine.begin() as conn:
            assert await requeue.resend(conn, expired.delivery_id, now=clock()) is requeue.Resent.REQUEUED
            assert await requeue.retry_failed(conn, held.partner_id, now=clock()) == 1
        before = await statuses_and_tokens(engine)
        async with engine.begin() as conn:
            await partners.remove_partner(conn, held.partner_id, now=clock())
        after = await statuses_and_tokens(engine)
        await engine.dispose()
        return before, after

    before, after = asyncio.run(scenario())
    assert sorted(status for status, token in before if token is not None) == ["delivering"]
    assert sorted(status for status, _ in before) == ["delivered", "delivering", *["pending"] * 5]
    assert {token for _, token in after} == {None}


def test_a_row_the_database_refuses_is_stored_without_it(
    postgres_database: str, clock: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should an excerpt the database refuses reach the log (here: NUL, cleaning switched off), the
    batch is split, that attempt is logged without its excerpt, and everyone else's land."""
    from tests.conftest import _empty_tables

    asyncio.run(_empty_tables(postgres_database))
    monkeypatch.setattr(send, "readable", lambda text: text)
    keyring = fixed_keyring()
    with Receiver(Reply(503, "nul\x00")) as hostile, Receiver() as healthy:

        async def scenario() -> list[tuple[str | None, str]]:
            engine = create_engine(postgres_database)
            targets = [("hostile", hostile.url(), None), ("healthy", healthy.url(), None)]
            await seed_outbox(engine, clock, targets, 3, keyring)
            config = Settings(database_url=postgres_database, **settings())
            async with wiring.worker(engine, config, clock=clock, keyring=keyring) as worker:
                await worker.drain()
            async with engine.connect() as conn:
                rows = await conn.execute(
                    select(delivery_attempts.c.response_excerpt, delivery_attempts.c.outcome)
                )
                logged = [(excerpt, outcome) for excerpt, outcome in rows]
            await engine.dispose()
            return logged

        with caplog.at_level(logging.WARNING, logger="service.webhooks.worker"):
            logged = asyncio.run(asyncio.wait_for(scenario(), 60))  # never retried forever
    assert sorted(logged, key=str) == sorted([("ok", "delivered")] * 3 + [(None, "retry")] * 3, key=str)
    assert sum("without the response excerpt" in record.message for record in caplog.records) == 3


def _partner(client: Any, partner_id: str) -> dict[str, Any]:
    document: dict[str, Any] = client.get(f"/admin/partners/{partner_id}", headers=AUTH).json
    return document


def test_the_circuit_opens_holds_probes_and_closes(
    make_client: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Three failures open the circuit: held deliveries keep their schedule and nothing is sent
    until the cool-down ends; a failed probe doubles it; a good probe closes it and the backlog goes."""
    options = settings(
        webhook_breaker_failures=3, webhook_breaker_cooldown=30, webhook_retry_schedule=(10,) * 8
    )
    with Receiver(Reply(500)) as receiver, make_client(**options) as client:
        partner = onboard(client, receiver.url())
        for index in range(6):
            publish(client, room_claimed(f"room-{index}"))
        with caplog.at_level(logging.WARNING, logger="service.webhooks.worker"):
            assert drain(client) == 6
        assert "a partner's circuit opened" in caplog.text
        shown = _partner(client, partner["id"])
        assert (shown["circuit"], shown["consecutiveFailures"]) == ("open", 6)
        assert shown["failingSince"] == "2026-06-29T12:00:00.000000Z"

        clock.advance(10)  # every retry is due, but the circuit is open
        assert drain(client) == 0
        clock.advance(20)  # the cool-down is over: one probe, which fails
        assert _partner(client, partner["id"])["circuit"] == "half-open"
        assert drain(client) == 1
        assert _partner(client, partner["id"])["circuit"] == "open"
        clock.advance(59)
        assert drain(client) == 0  # the cool-down doubled to 60 s
        receiver.default = Reply()
        clock.advance(1)
        assert drain(client) == 6  # the probe succeeds, and the held five follow
        shown = _partner(client, partner["id"])
        assert (shown["circuit"], shown["consecutiveFailures"], shown["failingSince"]) == ("closed", 0, None)
        assert {delivery["status"] for delivery in deliveries(client)} == {"delivered"}
        # No delivery spent more of its schedule than the attempts really made.
        assert sorted(len(delivery["attempts"]) for delivery in deliveries(client)) == [2, 2, 2, 2, 2, 3]
    assert len(receiver.requests) == 6 + 1 + 6


def test_a_partner_failing_for_too_long_is_disabled_until_resumed(
    make_client: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Failing without a break for SERVICE_WEBHOOK_DISABLE_AFTER disables the partner (a warning says
    so); deliveries wait; resume lifts it and they go out."""
    options = settings(
        webhook_breaker_failures=1, webhook_breaker_cooldown=30, webhook_disable_after=100,
        webhook_retry_schedule=(10,) * 20,
    )  # fmt: skip
    with Receiver(Reply(500)) as receiver, make_client(**options) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        with caplog.at_level(logging.WARNING, logger="service.webhooks.worker"):
            for _ in range(12):  # probes at 30 s, 90 s, 210 s: the last is past disable_after
                drain(client)
                clock.advance(30)
        assert "a partner was disabled" in caplog.text
        shown = _partner(client, partner["id"])
        assert shown["status"] == "disabled"
        sent = len(receiver.requests)
        clock.advance(3600)
        assert drain(client) == 0 and len(receiver.requests) == sent
        receiver.default = Reply()
        resumed = client.post(f"/admin/partners/{partner['id']}/resume", headers=AUTH).json
        assert (resumed["status"], resumed["circuit"], resumed["consecutiveFailures"]) == (
            "active",
            "closed",
            0,
        )
        assert drain(client) == 1
        assert [delivery["status"] for delivery in deliveries(client)] == ["delivered"]


def test_a_delivery_ending_failed_is_a_warning_and_a_metric(
    make_client: Any, clock: Any, caplog: Any
) -> None:
    """When the schedule is spent the operator hears of it: a WARNING line and a counter by partner."""
    with Receiver(Reply(500)) as receiver, make_client(**settings(webhook_retry_schedule=())) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        with caplog.at_level(logging.WARNING, logger="service.webhooks.worker"):
            assert drain(client) == 1
        [line] = [record for record in caplog.records if record.message == "webhook delivery failed for good"]
        assert line.levelno == logging.WARNING and line.partner == partner["id"]  # type: ignore[attr-defined]
        text = client.get("/admin/metrics", headers=AUTH).text
        assert f'service_webhook_deliveries_failed_total{{partner="{partner["id"]}"}} 1.0' in text


def test_a_batch_of_successes_closes_an_open_circuit_and_leaves_a_closed_one_alone(
    database_url: str, clock: Any
) -> None:
    """A delivered attempt closes its partner's open circuit and forgets its failures (reported
    once, as closed); a partner already closed and reset is left as it is, with nothing reported."""
    from service.states import CircuitChange
    from service.webhooks.breaker import BreakerPolicy

    lease = timedelta(seconds=30)

    def delivered(job: Job) -> Settlement:
        return Settlement(job, clock(), 5, 200, None, "ok", AttemptOutcome.DELIVERED, clock())

    async def settle_one(conn: Any, record: Settlement) -> list[tuple[str, CircuitChange]]:
        effects = (await settle.record(conn, [record], breaker=BreakerPolicy())).effects
        await partners.apply(conn, effects, now=clock())
        return settle.changes(effects)

    async def scenario() -> tuple[list[Any], list[Any], tuple[Any, ...]]:
        engine = create_engine(database_url)
        await seed_outbox(
            engine, clock, [("recovering", "https://partner.example/hook", None)], 2, fixed_keyring()
        )
        async with engine.begin() as conn:
            jobs = await claim_due(
                conn, now=clock(), limit=10, lease=lease, default_cap=8, keyring=fixed_keyring()
            )
            partner_id = jobs[0].partner_id
            await conn.execute(
                partners.partners.update().values(
                    consecutive_failures=4,
                    failing_since=clock(),
                    circuit_open_until=clock() - timedelta(seconds=1),
                    circuit_cooldown=30.0,
                )
            )
        async with engine.begin() as conn:
            first = await settle_one(conn, delivered(jobs[0]))
        async with engine.begin() as conn:
            second = await settle_one(conn, delivered(jobs[1]))
            row = (
                await conn.execute(
                    select(
                        partners.partners.c.consecutive_failures,
                        partners.partners.c.failing_since,
                        partners.partners.c.circuit_open_until,
                        partners.partners.c.circuit_cooldown,
                    ).where(partners.partners.c.id == partner_id)
                )
            ).one()
        await engine.dispose()
        assert first == [(partner_id, CircuitChange.CLOSED)]
        return first, second, tuple(row)

    _, second, row = asyncio.run(scenario())
    assert second == []
    assert row == (0, None, None, None)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def _explained(
    engine: Any, statement: Any, values: dict[str, Any], *, generic: bool = False, seqscan: bool = True
) -> dict[str, Any]:
    """PostgreSQL's plan of ``statement`` run with ``values`` (EXPLAIN ANALYZE, rolled back);
    ``generic``: the plan a prepared statement runs once it settles on one plan for any values,
    as the worker's statements do after their first runs; without ``seqscan``, as for a table too
    large to read whole."""
    from sqlalchemy.dialects import postgresql

    compiled = statement.compile(dialect=postgresql.asyncpg.dialect())
    params = compiled.construct_params(values)
    args = [params[name] for name in compiled.positiontup or ()]
    explain = "EXPLAIN (ANALYZE, FORMAT JSON)"
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        transaction = raw.transaction()
        await transaction.start()
        prepared = False
        try:
            if not seqscan:
                await raw.execute("SET LOCAL enable_seqscan = off")
            if generic:
                await raw.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                await raw.execute(f"PREPARE explained AS {compiled}")
                prepared = True
                # EXECUTE takes no bound parameters: each value as a literal of the type the
                # prepared statement gave its parameter.
                literals = ", ".join(_literal(arg) for arg in args)
                query, args = f"{explain} EXECUTE explained({literals})", []
            else:
                query = f"{explain} {compiled}"
            # SQLAlchemy's asyncpg connections decode json themselves.
            [plan] = await raw.fetchval(query, *args)
        finally:
            await transaction.rollback()  # a claim ran: leave nothing claimed
            if prepared:  # a prepared statement outlives the transaction
                await raw.execute("DEALLOCATE explained")
    return plan["Plan"]  # type: ignore[no-any-return]


def _literal(value: Any) -> str:
    """``value`` as an untyped SQL literal (test values only: no quotes inside)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool | int):
        return str(value).lower()
    if isinstance(value, list):
        return "'{" + ",".join(f'"{item}"' for item in value) + "}'"
    return f"'{value}'"


def _claim_values(clock: Any, **values: Any) -> dict[str, Any]:
    """The claim statement's parameters, times as the columns store them (naive UTC)."""
    now = clock().astimezone(UTC).replace(tzinfo=None)
    return {
        "b_now": now, "b_limit": 10, "b_token": "t", "b_until": now + timedelta(seconds=30), "b_cap": 8,
        "b_holder": "h", "b_depth": 1, "b_all_deep": True, "b_deep": [], "b_depths": [], "b_each": 10,
        **values,
    }  # fmt: skip


def _rows_scanned(plan: dict[str, Any], alias: str) -> int:
    """Rows every scan of ``alias`` read, whatever the scan (by index or whole), over all its
    loops: those it returned and those its filter removed."""
    return sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in _nodes(plan)
        if node.get("Alias") == alias and node["Node Type"].endswith("Scan")
    )


def _rows_read(plan: dict[str, Any], index: str, alias: str) -> list[int]:
    """Rows each scan of ``index`` as ``alias`` returned, over all its loops."""
    return [
        node["Actual Rows"] * node["Actual Loops"]
        for node in _nodes(plan)
        if node.get("Index Name") == index and node.get("Alias") == alias
    ]


def test_postgres_settles_delivered_attempts_by_primary_key_beside_many_live_claims(
    fresh_postgres: str, clock: Any
) -> None:
    """Ten of forty claimed deliveries settled as delivered, in the generic plan a worker's prepared
    statement runs: found by primary key, not by reading every live claim through
    ix_deliveries_in_flight and comparing each with the array of ids (14 of the 36 ms settling
    348 rows beside 1,024 claims)."""

    async def scenario() -> set[str]:
        engine = create_engine(fresh_postgres)
        await seed_outbox(engine, clock, [("settled", "https://settled.example/hook", 100)], 40, fixed_keyring())
        async with engine.begin() as conn:
            jobs = await claim_due(
                conn, now=clock(), limit=40, lease=timedelta(seconds=30), default_cap=8, keyring=fixed_keyring()
            )
        assert len(jobs) == 40
        values = {
            "b_ids": [job.delivery_id for job in jobs[:10]],
            "b_tokens": [jobs[0].claim_token],
            "b_at": clock().astimezone(UTC).replace(tzinfo=None),
        }
        # Forty rows would be read whole; a worker's table is far too large for that.
        statement = settle._MARK_DELIVERED["postgresql"]
        plan = await _explained(engine, statement, values, generic=True, seqscan=False)
        await engine.dispose()
        return {node["Index Name"] for node in _nodes(plan) if "Index Name" in node}

    assert asyncio.run(scenario()) == {"pk_deliveries"}


def test_postgres_claim_reads_no_more_due_rows_than_it_takes_from_a_burst(
    fresh_postgres: str, clock: Any
) -> None:
    """Thirty deliveries made due at one moment (a burst) for a partner with four slots: the claim's
    scan of the partner's due rows stops at four. Numbered in RANGE mode, every row sharing the
    due time is a peer, and PostgreSQL 15 read all thirty before numbering the first."""

    async def scenario() -> list[int]:
        engine = create_engine(fresh_postgres)
        await seed_outbox(engine, clock, [("burst", "https://burst.example/hook", 4)], 30, fixed_keyring())
        plan = await _explained(engine, claim_module._CLAIM["postgresql"], _claim_values(clock))
        await engine.dispose()
        return _rows_read(plan, "ix_deliveries_partner_claimable", "due")

    assert asyncio.run(scenario()) == [4]


def test_postgres_claim_reads_each_deep_partner_its_share(fresh_postgres: str, clock: Any) -> None:
    """Three deep partners with room for thirty each share a claim of twelve: the claim reads four
    due rows of each (its share), not twelve of each to rank thirty-six."""

    async def scenario() -> list[int]:
        engine = create_engine(fresh_postgres)
        targets = [(name, f"https://{name}.example/hook", 30) for name in ("a", "b", "c")]
        await seed_outbox(engine, clock, targets, 30, fixed_keyring())
        async with engine.begin() as conn:
            ids = [row.id for row in await conn.execute(select(partners.partners.c.id))]
        each = claim_module._share(12, ids)
        values = _claim_values(
            clock, b_limit=12, b_each=each, b_all_deep=False, b_deep=ids, b_depths=[4] * len(ids)
        )
        plan = await _explained(engine, claim_module._CLAIM["postgresql"], values)
        await engine.dispose()
        return _rows_read(plan, "ix_deliveries_partner_claimable", "due")

    assert asyncio.run(scenario()) == [12]


def test_postgres_reads_a_claims_jobs_counting_live_claims_once(fresh_postgres: str, clock: Any) -> None:
    """The jobs a claim of thirty took are read with their partners' slots, the live claims counted
    once. Planned from statistics gathered while nothing was claimed, PostgreSQL expected one row
    for the claim's token and counted the live claims again for each of the thirty (900 rows
    read; a claim of 270 took 36 ms to read back, against 2.4 ms)."""
    from sqlalchemy import text

    async def scenario() -> int:
        engine = create_engine(fresh_postgres)
        await seed_outbox(engine, clock, [("many", "https://many.example/hook", 100)], 30, fixed_keyring())
        async with engine.begin() as conn:
            # Settled deliveries beside them, as any worker's table has: reading it whole shows.
            await conn.execute(_BULK_EVENTS)
            await conn.execute(_BULK_DELIVERIES)
            await conn.execute(text("ANALYZE deliveries"))  # as autovacuum would, before the claim
        token = claim_module.new_claim_token()
        async with engine.begin() as conn:
            jobs = await claim_due(
                conn, now=clock(), limit=30, lease=timedelta(seconds=30), default_cap=8,
                keyring=fixed_keyring(), token=token, holder="h",
            )  # fmt: skip
        assert len(jobs) == 30
        until = jobs[0].claimed_until.astimezone(UTC).replace(tzinfo=None)
        values = _claim_values(clock, b_token=token, b_until=until, b_holder="h")
        plan = await _explained(engine, claim_module._CLAIMED_JOBS, values)
        await engine.dispose()
        return _rows_scanned(plan, "deliveries_1")  # the live claims, through their index or not

    assert asyncio.run(scenario()) == 30


def test_postgres_claim_finds_its_rows_by_primary_key_in_a_table_never_analyzed(
    fresh_postgres: str, clock: Any
) -> None:
    """A burst of 300 due deliveries, before autovacuum ever analyzed the table: the claim of ten
    writes the rows it chose found by primary key. With no statistics, PostgreSQL took the claim's
    re-check of the row (status and due time) for an index condition on a partial index of the
    claimable rows, read every due row through it and compared each with the chosen ids: 137 ms
    to claim 512 of 10,000."""

    async def scenario() -> set[str]:
        engine = create_engine(fresh_postgres)
        await seed_outbox(engine, clock, [("burst", "https://burst.example/hook", 16)], 300, fixed_keyring())
        # Three hundred rows would be read whole; a backlog is far too large for that.
        plan = await _explained(
            engine, claim_module._CLAIM["postgresql"], _claim_values(clock), seqscan=False
        )
        await engine.dispose()
        # The outer scan finds the rows to write; its bitmap index scans name no alias of their own.
        return {
            node["Index Name"]
            for scan in _nodes(plan)
            if scan.get("Alias") == "deliveries" and scan["Node Type"] != "ModifyTable"
            for node in _nodes(scan)
            if "Index Name" in node
        }

    assert asyncio.run(scenario()) == {"pk_deliveries"}


def test_postgres_claim_is_planned_for_the_table_as_it_is_not_as_it_was(
    fresh_postgres: str, clock: Any
) -> None:
    """A worker's claims are prepared statements. Once PostgreSQL settles on a generic plan for one,
    it keeps it until the table is analyzed again. A generic plan made while the table held a few
    rows (a new deployment, a worker started on a quiet outbox) reads the whole table, which is
    right for a few rows; after a burst, before autovacuum's next look, every claim then compared
    every due row with the chosen ids: 743 ms to claim 512 of a 30,000 backlog, against 24 ms
    planned for the table as it is. Here the session settles at once (force_generic_plan), on five
    rows; then 20,000 rows arrive, and the next claim must not read the table whole."""

    async def scenario() -> tuple[tuple[int, int], tuple[int, int]]:
        engine = create_engine(fresh_postgres)
        await seed_outbox(engine, clock, [("burst", "https://burst.example/hook", 16)], 5, fixed_keyring())

        async def claimed(conn: Any) -> tuple[int, int]:
            """Deliveries claimed, and the scans of the deliveries table that read it whole."""
            async with conn.begin():
                # Counted by this session (its counts not yet reported included), before and after.
                before = await conn.scalar(_SEQUENTIAL_SCANS)
                jobs = await claim_due(
                    conn, now=clock(), limit=1, lease=timedelta(seconds=30), default_cap=8,
                    keyring=fixed_keyring(),
                )  # fmt: skip
                after = await conn.scalar(_SEQUENTIAL_SCANS)
            return len(jobs), after - before

        async with engine.connect() as conn:
            await conn.execute(text("SET plan_cache_mode = force_generic_plan"))
            await conn.commit()
            small = await claimed(conn)
            async with engine.begin() as other:  # settled ones: the claim has no business reading them
                await other.execute(_BULK_EVENTS)
                await other.execute(_BULK_DELIVERIES)
            large = await claimed(conn)
        await engine.dispose()
        return small, large

    small, large = asyncio.run(scenario())
    assert small[0] == large[0] == 1
    assert large[1] == 0, f"the claim read the deliveries table whole {large[1]} times"


_SEQUENTIAL_SCANS = text("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'deliveries'")
# Twenty thousand settled deliveries (and their events), written by the database itself.
_BULK_EVENTS = text(
    "INSERT INTO events (id, kind, dedupe_key, payload, occurred_at, created_at) "
    "SELECT 'bulk-' || n, 'room.claimed', 'bulk-' || n, '{}', now(), now() FROM generate_series(1, 20000) AS n"
)
_BULK_DELIVERIES = text(
    "INSERT INTO deliveries "
    "(id, event_id, partner_id, status, attempts, next_attempt_at, created_at, updated_at) "
    "SELECT 'bulk-' || n, 'bulk-' || n, (SELECT id FROM partners), 'delivered', 1, now(), now(), now() "
    "FROM generate_series(1, 20000) AS n"
)
