"""A failed turn's attempts are logged once. The worker puts a failed turn's records back for the
next turn; when the turn failed after its COMMIT landed (the connection cut before the answer came
back), its attempts are logged already, and logging them again wrote a second attempt row for each
and counted each failure twice against the partner's circuit. The next turn now first reads which
of those deliveries still hold the claims the records were made under, and logs only those: a turn
that failed before its COMMIT still holds them, and its attempts are logged as before.

The cut is the worker's held connection, made to fail the first turn that logs attempts just after
its COMMIT, or just before it, with ``ConnectionLost`` (what a held connection cut at COMMIT
raises): the worker turns again at once. So it does when PostgreSQL ends the turn to break a
deadlock, where the cut raises the driver's error instead (nothing was written: the next turn logs
the records without a look, even when the removal that ended the turn has taken their claims). The
partner answers 500 to everything; the test clock does not move, so the retries are never due, and
nothing sleeps but the worker's own 10 ms poll interval after two deadlocks in a row."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import asyncpg.exceptions
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from webhook_helpers import Receiver, Reply, room_claimed, settings

from service.clock import ManualClock
from service.db.engine import ConnectionLost, HeldConnection, create_engine
from service.db.tables import deliveries, delivery_attempts, partners
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.webhooks import outbox, settle, wiring
from service.webhooks.partners import NewPartner, create_partner, remove_partner
from service.webhooks.settle import Settlement

EVENTS = 3  # fewer than the failures that open a circuit (5): each one counts
DRAINED_WITHIN = 60.0  # seconds: a drain that waited for the poll interval (an hour) fails


def _deadlocked() -> Exception:
    """What the driver raises when PostgreSQL ends a transaction to break a deadlock, as SQLAlchemy
    wraps it (tests/test_scale_races.py holds it to a real one)."""
    deadlock = asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
    return DBAPIError("UPDATE deliveries ...", {}, deadlock)


class _Cut(HeldConnection):
    """The worker's held connection, cutting the first ``cuts`` transactions that log attempts
    (``logging``, set by the test): ``after`` their COMMIT, which lands, or before it, which never
    comes (with ``error``: ``ConnectionLost`` unless given). ``meanwhile`` runs once, after the
    last cut before a COMMIT has been rolled back: another transaction that went on."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        after: bool,
        error: Callable[[], Exception] | None = None,
        cuts: int = 1,
        meanwhile: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(engine)
        self.after = after
        self.error = error or (lambda: ConnectionLost("cut before COMMIT"))
        self.cuts = cuts
        self.meanwhile = meanwhile
        self.logging = False
        self.made = 0

    @property
    def cut(self) -> bool:
        return self.made == self.cuts

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        cutting = False
        try:
            async with super().transaction() as conn:
                yield conn
                if not self.after and self._due():
                    cutting = True
                    raise self.error()
        finally:
            if cutting and self.made == self.cuts and self.meanwhile is not None:
                meanwhile, self.meanwhile = self.meanwhile, None
                await meanwhile()
        if self.after and self._due():
            raise ConnectionLost("cut after COMMIT: the answer was lost")

    def _due(self) -> bool:
        due = self.logging and self.made < self.cuts
        self.made += due
        return due


class Outcome:
    def __init__(self) -> None:
        self.logged: list[list[str]] = []  # the deliveries settle.record logged, call by call
        self.reads = 0  # statements that read the deliveries' claim tokens
        self.sent: Counter[str] = Counter()  # requests per delivery
        self.rows: Counter[str] = Counter()  # attempt rows per delivery
        self.settled: list[tuple[str, int]] = []  # each delivery's status and attempts
        self.failures = 0  # the partner's consecutive_failures


def _reads_claims(statement: str) -> bool:
    """Whether a statement reads claim tokens: a SELECT returning ``deliveries.claim_token``."""
    columns = statement.partition("FROM")[0]
    return columns.lstrip().upper().startswith("SELECT") and "deliveries.claim_token" in columns


async def _run(
    database_url: str,
    clock: ManualClock,
    *,
    after: bool,
    monkeypatch: pytest.MonkeyPatch,
    error: Callable[[], Exception] | None = None,
    cuts: int = 1,
    removed_meanwhile: bool = False,
    poll_interval: float = 3600,
) -> Outcome:
    outcome = Outcome()
    config = Settings(database_url=database_url, **settings())
    engine = create_engine(database_url)
    record = settle.record

    async def noted(conn: AsyncConnection, records: Sequence[Settlement], **options: Any) -> Any:
        if records:
            outcome.logged.append([settled.job.delivery_id for settled in records])
            cut.logging = True
        return await record(conn, records, **options)

    def statement(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        outcome.reads += _reads_claims(sql)

    async def remove() -> None:  # what a partner's removal does, its claims taken
        async with engine.begin() as conn:
            await remove_partner(conn, partner.id, now=clock())

    monkeypatch.setattr(settle, "record", noted)
    cut = _Cut(engine, after=after, error=error, cuts=cuts, meanwhile=remove if removed_meanwhile else None)
    try:
        with Receiver(Reply(status=500)) as receiver:
            async with engine.begin() as conn:
                new = NewPartner("p", receiver.url("/p"), None, EVENTS)
                partner = await create_partner(conn, new, now=clock(), keyring=load_keyring(config))
            for index in range(EVENTS):
                await outbox.publish_event(
                    engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
                )
            event.listen(engine.sync_engine, "before_cursor_execute", statement)
            async with wiring.worker(engine, config, clock=clock, concurrency=4) as worker:
                worker.connection = cut
                # A turn that failed waits this long before the next unless it turns again at once
                # (an hour unless given); bounded here so that a wait fails the test, never hangs it.
                worker.poll_interval = poll_interval
                await asyncio.wait_for(worker.drain(), DRAINED_WITHIN)
            event.remove(engine.sync_engine, "before_cursor_execute", statement)
            outcome.sent = Counter(request.headers["webhook-id"] for request in receiver.requests)
        async with engine.connect() as conn:
            outcome.rows = Counter((await conn.scalars(select(delivery_attempts.c.delivery_id))).all())
            found = await conn.execute(select(deliveries.c.status, deliveries.c.attempts))
            outcome.settled = [(str(status), attempts) for status, attempts in found]
            outcome.failures = await conn.scalar(select(func.max(partners.c.consecutive_failures))) or 0
    finally:
        await engine.dispose()
    assert cut.cut, "no turn logged attempts"
    return outcome


def test_a_turn_whose_commit_landed_but_whose_answer_was_lost_is_not_logged_again(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first turn that logs attempts commits, and its answer is lost: its records are put back,
    and the next turn finds their deliveries settled (no claim token left) and drops them, with an
    INFO line. Each attempt sent has one row, and the partner's failures in a row are the real
    ones. Before, the next turn logged them again: two rows for each, and each failure counted twice
    (a circuit would open after half the failures it is set to)."""
    with caplog.at_level(logging.INFO, logger="service.webhooks.worker"):
        outcome = asyncio.run(_run(database_url, clock, after=True, monkeypatch=monkeypatch))
    assert sum(outcome.sent.values()) == EVENTS and set(outcome.sent.values()) == {1}
    assert outcome.rows == outcome.sent
    assert outcome.failures == EVENTS
    assert outcome.settled == [("pending", 1)] * EVENTS  # retries, due when the clock has moved
    lost, later = outcome.logged[0], [delivery for logged in outcome.logged[1:] for delivery in logged]
    assert not set(lost) & set(later), "attempts whose commit landed went to settle.record again"
    dropped = [entry for entry in caplog.records if "not logged again" in entry.getMessage()]
    assert [entry.__dict__["attempts"] for entry in dropped] == [len(lost)]
    assert outcome.reads == 1  # by the turn after the cut, and by no other


def test_a_turn_that_failed_before_its_commit_is_logged_once_by_the_next_after_reading_its_claims(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first turn that logs attempts is cut before its COMMIT: rolled back, its deliveries still
    hold their claims, and the next turn logs every one of its records, once, after one read of
    their claims (no other turn reads them: a turn that follows no failure costs nothing more).
    Without that read a turn whose commit landed logged its attempts again (the test above)."""
    outcome = asyncio.run(_run(database_url, clock, after=False, monkeypatch=monkeypatch))
    assert sum(outcome.sent.values()) == EVENTS and set(outcome.sent.values()) == {1}
    assert outcome.rows == outcome.sent
    assert outcome.failures == EVENTS
    assert outcome.settled == [("pending", 1)] * EVENTS
    failed, next_turn = outcome.logged[0], outcome.logged[1]
    assert set(failed) <= set(next_turn), "records of a turn rolled back were not logged by the next"
    assert outcome.reads == 1


def test_a_turn_the_database_rolled_back_turns_again_at_once_and_logs_its_records_once(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first turn that logs attempts is ended by PostgreSQL to break a deadlock (another
    transaction locked the same rows in another order): nothing of it was written. The worker
    turns again at once, not after its poll interval as after an outage, with a warning and no
    error logged, and the next turn logs every record once."""
    with caplog.at_level(logging.INFO, logger="service.webhooks.worker"):
        run = _run(database_url, clock, after=False, monkeypatch=monkeypatch, error=_deadlocked)
        outcome = asyncio.run(run)
    assert sum(outcome.sent.values()) == EVENTS and set(outcome.sent.values()) == {1}
    assert outcome.rows == outcome.sent
    assert outcome.failures == EVENTS
    assert outcome.settled == [("pending", 1)] * EVENTS
    failed, next_turn = outcome.logged[0], outcome.logged[1]
    assert set(failed) <= set(next_turn)
    lines = [(entry.levelname, entry.getMessage()) for entry in caplog.records]
    assert [line for line in lines if "rolled a turn back" in line[1]] == [
        ("WARNING", "the database rolled a turn back for another transaction; turning again")
    ]
    assert not [line for line in lines if line[0] in ("ERROR", "CRITICAL")], lines


@pytest.mark.parametrize("cut_first", [False, True], ids=["rolled-back", "cut-then-rolled-back"])
def test_attempts_of_a_turn_rolled_back_for_a_partners_removal_are_logged_though_it_took_their_claims(
    database_url: str,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    cut_first: bool,
) -> None:
    """The turn logging the attempts is ended to break a deadlock, and the partner's removal
    commits meanwhile, taking the deliveries' claims. The turn run again logs every attempt sent
    (they reached the partner), and settles none: the deliveries stay cancelled. Before, the next
    turn took them for a turn whose commit had landed and dropped them unlogged. So too when a cut
    before COMMIT left them in doubt first: the turn rolled back had looked, and found their claims
    held (none logged); the turn after does not look again."""
    errors = iter([ConnectionLost("cut before COMMIT")] if cut_first else [])

    def error() -> Exception:
        return next(errors, None) or _deadlocked()

    with caplog.at_level(logging.INFO, logger="service.webhooks.worker"):
        run = _run(
            database_url, clock, after=False, monkeypatch=monkeypatch, error=error, cuts=1 + cut_first,
            removed_meanwhile=True,
        )  # fmt: skip
        outcome = asyncio.run(run)
    assert sum(outcome.sent.values()) == EVENTS and set(outcome.sent.values()) == {1}
    assert outcome.rows == outcome.sent
    assert outcome.settled == [("cancelled", 0)] * EVENTS
    assert not [entry for entry in caplog.records if "not logged again" in entry.getMessage()]
    assert outcome.reads == cut_first  # by the turn after the cut alone: a rollback wrote nothing


def test_a_second_turn_rolled_back_in_a_row_waits_as_after_an_outage(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two turns in a row ended by the database: the first runs again at once, the second waits
    the poll interval (here 10 ms) with a warning and its traceback; the next logs every record once."""
    with caplog.at_level(logging.INFO, logger="service.webhooks.worker"):
        run = _run(
            database_url, clock, after=False, monkeypatch=monkeypatch, error=_deadlocked, cuts=2,
            poll_interval=0.01,
        )  # fmt: skip
        outcome = asyncio.run(run)
    assert outcome.rows == outcome.sent and sum(outcome.sent.values()) == EVENTS
    assert outcome.settled == [("pending", 1)] * EVENTS
    lines = [(entry.levelname, entry.getMessage(), entry.exc_info is not None) for entry in caplog.records]
    assert [line for line in lines if "rolled" in line[1]] == [
        ("WARNING", "the database rolled a turn back for another transaction; turning again", False),
        ("WARNING", "the database rolled back two turns in a row; trying again shortly", True),
    ]
    assert not [line for line in lines if line[0] in ("ERROR", "CRITICAL")], lines


def test_the_last_turn_on_stopping_runs_once_more_when_the_database_rolled_it_back(
    database_url: str, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping, the worker logs what finished in a last turn; one the database ended to break a
    deadlock runs once more (its attempts would otherwise go out again when their leases end)."""
    calls: list[int] = []

    async def stop_with_a_rolled_back_last_turn() -> None:
        engine = create_engine(database_url)
        try:
            worker = wiring.worker(engine, Settings(database_url=database_url, **settings()), clock=clock)
            real = worker._turn

            async def turn(claim: int) -> Any:
                calls.append(claim)
                if len(calls) == 1:
                    raise _deadlocked()
                return await real(claim)

            worker._turn = turn  # type: ignore[method-assign]
            await worker._final_turn()
        finally:
            await engine.dispose()

    with caplog.at_level(logging.WARNING):
        asyncio.run(stop_with_a_rolled_back_last_turn())
    assert calls == [0, 0]
    assert not [entry for entry in caplog.records if entry.levelno >= logging.ERROR]
