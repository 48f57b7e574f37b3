"""When the worker claims and logs (``webhooks/pacing.py``), and what it gives a partner at its cap."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from webhook_helpers import Receiver, Reply, room_claimed, settings

from service.db.engine import create_engine
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.webhooks import outbox, partners, wiring
from service.webhooks.pacing import WAIT, Moment, Pace, Turn, decide, idle

PACE = Pace(batch=256, capacity=768, log_delay=0.02)


@pytest.mark.parametrize(
    ("moment", "turn"),
    [
        # A worker just started: nothing is parked, so it claims two batches (one for the senders
        # to send while the next turn runs, one to have at hand when it ends).
        (Moment(), Turn(now=True, claim=512)),
        # A batch parked or more: one batch; less: two.
        (Moment(in_flight=16, parked=256), Turn(now=True, claim=256)),
        (Moment(in_flight=16, parked=255), Turn(now=True, claim=512)),
        # Two batches never take more than the worker may let out.
        (Moment(queued=100, in_flight=400), Turn(now=True, claim=268)),
        # Nothing was claimable, nothing has happened since: wait for a nudge or the poll.
        (Moment(drained=True), WAIT),
        # A partner at its cap answering quickly: 15 attempts are back, one is out. They wait to
        # share a commit no longer than a turn takes ...
        (
            Moment(finished=15, in_flight=1, parked=100, drained=True, oldest=0.005, turn_seconds=0.01),
            Turn(now=False, wait=0.005),
        ),
        (
            Moment(finished=15, in_flight=1, parked=100, drained=True, oldest=0.01, turn_seconds=0.01),
            Turn(now=True, claim=512),
        ),
        # ... and no longer than the log delay.
        (
            Moment(finished=15, in_flight=1, parked=100, drained=True, oldest=0.005, turn_seconds=0.5),
            Turn(now=False, wait=0.015),
        ),
        (
            Moment(finished=15, in_flight=1, drained=True, oldest=0.02, turn_seconds=0.5),
            Turn(now=True, claim=512),
        ),
        # All are back and nothing is out: log them and refill the lanes at once.
        (Moment(finished=16, drained=True, oldest=0.001), Turn(now=True, claim=512)),
        # Parked jobs do not take room: hanging partners' lanes leave every claim its batch.
        (Moment(in_flight=400, parked=2800), Turn(now=True, claim=256)),
        # Partners hanging from older claims are not waited for.
        (Moment(finished=8, in_flight=80, drained=True), Turn(now=True, claim=512)),
        # Nor are partners that are not answering, however long turns take: ten hanging partners'
        # 80 attempts would otherwise hold a healthy partner's logging a turn long.
        (
            Moment(finished=8, in_flight=80, silent=80, drained=True, turn_seconds=0.02),
            Turn(now=True, claim=512),
        ),
        # ... while attempts to a partner that is answering are waited for as before.
        (
            Moment(finished=8, in_flight=88, silent=80, drained=True, oldest=0.005, turn_seconds=0.02),
            Turn(now=False, wait=0.015),
        ),
        # A backlog: claimed work waits for senders, a few attempts finished: they share a commit.
        (Moment(finished=10, queued=500, in_flight=32, oldest=0.005), Turn(now=False, wait=0.015)),
        # ... until a batch of them has finished; the turn tops up the queue.
        (Moment(finished=256, queued=500, in_flight=32), Turn(now=True, claim=236)),
        # ... or the oldest has waited the log delay.
        (Moment(finished=10, queued=500, in_flight=32, oldest=0.02), Turn(now=True, claim=236)),
        # Room for a whole batch: claim, whatever else waits (two batches, as none is parked).
        (Moment(queued=200, in_flight=32), Turn(now=True, claim=512)),
        # Less than a batch of room while senders are busy: no claim on its own.
        (Moment(queued=500, in_flight=32), WAIT),
        # The worker holds all it may: log, claim nothing.
        (Moment(finished=3, queued=736, in_flight=32, oldest=0.03), Turn(now=True, claim=0)),
        # Claims to hand back go at once; after a short claim there is nothing to claim with them.
        (Moment(expired=2, drained=True), Turn(now=True, claim=0)),
        # A short claim, then an attempt logged: its slot is free, so the turn claims again.
        (Moment(finished=1, drained=True), Turn(now=True, claim=512)),
    ],
)
def test_when_the_worker_claims_and_logs(moment: Moment, turn: Turn) -> None:
    """The decision over the worker's state, case by case."""
    decided = decide(moment, PACE)
    assert (decided.now, decided.claim) == (turn.now, turn.claim)
    if turn.wait is None:
        assert decided.wait is None
    else:
        assert decided.wait == pytest.approx(turn.wait)


@pytest.mark.parametrize(
    ("moment", "done"),
    [
        (Moment(drained=True), True),
        (Moment(), False),  # a claim may still find work
        (Moment(drained=True, in_flight=1), False),
        (Moment(drained=True, queued=1), False),
        (Moment(drained=True, finished=1), False),
        (Moment(drained=True, parked=1), False),
        (Moment(drained=True, expired=1), False),
    ],
)
def test_a_drain_ends_only_when_nothing_is_left(moment: Moment, done: bool) -> None:
    """``drain()`` stops when nothing is claimable, held, finished or to be handed back."""
    assert idle(moment) is done


async def _backlog(
    engine: Any, config: Settings, clock: Any, *, name: str, url: str, cap: int | None, events: int
) -> None:
    """One partner (capped at ``cap``) and ``events`` events for it."""
    async with engine.begin() as conn:
        new = partners.NewPartner(name, url, None, cap)
        await partners.create_partner(conn, new, now=clock(), keyring=load_keyring(config))
    for index in range(events):
        await outbox.publish_event(
            engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
        )


async def _answer_in_order(receiver: Receiver, answers: list[threading.Event], cap: int) -> bool:
    """Answer the oldest request still out each time the cap's worth are in progress; whether every
    request arrived."""

    async def arrived(count: int) -> bool:
        return await asyncio.to_thread(receiver.wait_for, lambda got: len(got) >= count, 10)

    for count in range(cap, len(answers)):
        if not await arrived(count):
            return False
        answers[count - cap].set()
    return await arrived(len(answers))


def test_a_capped_partner_keeps_its_cap_full_under_a_backlog(database_url: str, clock: Any) -> None:
    """A backlog for a partner capped at 4 that answers one request at a time: each answer frees a
    slot the worker fills while the other three are still out, so the receiver sees 4 requests in
    progress at every arrival after the first round, and never more."""
    cap, events = 4, 12
    config = Settings(database_url=database_url, **settings())
    answers = [threading.Event() for _ in range(events)]
    with Receiver() as receiver:
        receiver.script("/hook", *(Reply(hold=answer) for answer in answers))

        async def scenario() -> tuple[bool, int]:
            engine = create_engine(database_url)
            worker = wiring.worker(engine, config, clock=clock)
            try:
                await _backlog(
                    engine, config, clock, name="capped", url=receiver.url(), cap=cap, events=events
                )
                await worker.start()
                refilled = await _answer_in_order(receiver, answers, cap)
            finally:
                for answer in answers:
                    answer.set()
                await worker.stop()
                await engine.dispose()
            return refilled, worker.logged

        refilled, settled = asyncio.run(scenario())
    assert refilled, f"{len(receiver.requests)} of {events} requests arrived"
    assert settled == events
    assert receiver.peak["/hook"] == cap
    assert [request.in_progress for request in receiver.requests] == [1, 2, 3] + [cap] * (events - 3)


def test_two_workers_claiming_ahead_never_exceed_a_partners_cap_together(
    database_url: str, clock: Any
) -> None:
    """Two workers, each claiming ahead of its free slots, drain one partner capped at 3 that
    answers one request at a time: the receiver never sees more than 3 in progress, and every
    delivery arrives exactly once."""
    cap, events = 3, 18
    config = Settings(database_url=database_url, **settings())
    answers = [threading.Event() for _ in range(events)]
    with Receiver() as receiver:
        receiver.script("/hook", *(Reply(hold=answer) for answer in answers))

        async def scenario() -> tuple[bool, int]:
            engines = [create_engine(database_url) for _ in range(2)]
            workers = [
                wiring.worker(engine, config, clock=clock, depth=2, poll_interval=0.05) for engine in engines
            ]
            try:
                await _backlog(
                    engines[0], config, clock, name="capped", url=receiver.url(), cap=cap, events=events
                )
                for worker in workers:
                    await worker.start()
                progressed = await _answer_in_order(receiver, answers, cap)
            finally:
                for answer in answers:
                    answer.set()
                for worker in workers:
                    await worker.stop()
                for engine in engines:
                    await engine.dispose()
            return progressed, sum(worker.logged for worker in workers)

        progressed, logged = asyncio.run(scenario())
    assert progressed, f"{len(receiver.requests)} of {events} requests arrived"
    assert logged == events
    assert receiver.peak["/hook"] == cap
    assert len({request.headers["webhook-id"] for request in receiver.requests}) == events


def test_a_partner_failing_every_attempt_gets_no_more_than_its_cap_before_its_circuit_opens(
    database_url: str, clock: Any
) -> None:
    """Claimed ahead, a failing partner's jobs still wait: a failed attempt's slot stays empty
    until the turn logs it, the turn opens the circuit, and the parked jobs are handed back
    unsent."""
    from sqlalchemy import func, select

    from service.db.tables import deliveries

    config = Settings(database_url=database_url, **settings(webhook_breaker_failures=5))
    with Receiver(Reply(status=500)) as receiver:

        async def scenario() -> dict[str, int]:
            engine = create_engine(database_url)
            worker = wiring.worker(engine, config, clock=clock)
            try:
                await _backlog(engine, config, clock, name="failing", url=receiver.url(), cap=None, events=40)
                async with worker:
                    await worker.drain()
                async with engine.connect() as conn:
                    rows = await conn.execute(
                        select(deliveries.c.status, func.count()).group_by(deliveries.c.status)
                    )
                    return {status: count for status, count in rows}
            finally:
                await engine.dispose()

        states = asyncio.run(scenario())
    assert len(receiver.requests) == config.webhook_max_in_flight
    assert states == {"pending": 40}  # the failed ones wait for their retry, the rest for the circuit
