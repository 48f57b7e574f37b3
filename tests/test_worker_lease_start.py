"""A claimed delivery starts only while its lease still has room for a whole attempt, and the lease
counts from when the claim holds its lock: a delivery is never sent while another worker may take
it again (the lease ended mid-attempt), and a wait for the claim lock does not shorten the lease.

The waits are the injected clock's: it is moved where the wait would be, and nothing sleeps."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from webhook_helpers import Receiver, room_claimed, settings

from service.clock import ManualClock
from service.db import locks
from service.db.engine import create_engine
from service.events import parse_event
from service.keyring import load_keyring
from service.metrics import Metrics
from service.settings import Settings
from service.states import HandedBack
from service.webhooks import claim as claim_module
from service.webhooks import outbox, partners, wiring
from service.webhooks import worker as worker_module
from service.webhooks.claim import Job
from service.webhooks.partners import NewPartner
from service.webhooks.settle import Settlement

TIMEOUT = 2.0  # the webhook timeout: a lease of 2 x 2 + 5 = 9 s
EVENTS = 6


async def _drained(
    database_url: str, clock: ManualClock, receiver: Receiver, metrics: Metrics | None = None
) -> tuple[list[int], list[tuple[datetime, datetime]], float]:
    """Drain EVENTS deliveries to one partner at cap 2, twice (the second finds nothing left: a
    drain claims again what it handed back unsent); the attempts each drain logged, and for each
    attempt made, the clock's time as it started and its lease's end; and the lease in seconds."""
    config = Settings(database_url=database_url, **settings(receiver_timeout=TIMEOUT))
    engine = create_engine(database_url)
    async with engine.begin() as conn:
        await partners.create_partner(
            conn, NewPartner("p", receiver.url("/p"), None, 2), now=clock(), keyring=load_keyring(config)
        )
    for index in range(EVENTS):
        await outbox.publish_event(
            engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
        )
    started: list[tuple[datetime, datetime]] = []
    try:
        async with wiring.worker(engine, config, clock=clock, metrics=metrics) as worker:
            attempt = worker.attempt

            async def noted(job: Job) -> Settlement:
                started.append((clock(), job.claimed_until))
                return await attempt(job)

            worker.attempt = noted  # type: ignore[method-assign]
            logged = [await worker.drain(), await worker.drain()]
            return logged, started, worker.lease.total_seconds()
    finally:
        await engine.dispose()


def test_a_claim_that_comes_back_with_less_than_an_attempt_left_is_handed_back_unsent(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first claim takes 7.5 s of its 9 s lease to come back (a commit or a write lock waited,
    after the lease was counted): its jobs have less than an attempt's timeout left, so none is
    sent; they are handed back and go out under the next claim, in the same drain (a worker that
    has handed deliveries back claims again, however short its last claim came back). Every attempt
    starts with a timeout and a second to spare, and every delivery is sent once. Before, the start-by moment
    was counted from the commit: the jobs went out with 1.5 s of lease left for a 2 s attempt."""
    claim_due = claim_module.claim_due
    calls: list[int] = []

    async def slow(conn: Any, **options: Any) -> list[Job]:
        jobs = await claim_due(conn, **options)
        calls.append(len(jobs))
        if len(calls) == 1:
            clock.advance(9 - TIMEOUT + 0.5)
        return jobs

    monkeypatch.setattr(worker_module, "claim_due", slow)
    metrics = Metrics()
    with Receiver() as receiver:
        logged, started, lease = asyncio.run(_drained(database_url, clock, receiver, metrics))
        sent = Counter(request.headers["webhook-id"] for request in receiver.requests)
    assert lease == 9
    assert calls[0] > 0  # the slow claim took jobs, and none of them went out
    handed = {
        reason: metrics.registry.get_sample_value("service_webhook_handed_back_total", {"reason": reason})
        for reason in HandedBack
    }
    assert handed == {**dict.fromkeys(HandedBack, 0.0), HandedBack.LATE: calls[0]}  # counted as late
    left = [(until - at).total_seconds() for at, until in started]
    assert min(left) >= TIMEOUT + 1, f"attempts started with {sorted(left)} s of their lease left"
    assert logged == [EVENTS, 0]  # handed back unsent, then claimed again by the same drain
    assert len(started) == len(sent) == EVENTS
    assert set(sent.values()) == {1}


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_wait_for_the_claim_lock_does_not_shorten_the_lease(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first claim waits 7 s of the 9 s lease for the claim lock (another worker's claim holds
    it): the lease is counted from when the lock is taken, so its jobs start with the whole lease
    left, and none is handed back. Before, it was counted from before the wait: the jobs went out
    with 2 s of lease left, and a job parked in its lane could still be in flight when the lease
    ended and another worker claimed it again."""
    take = locks.take
    waits: list[int] = []

    async def waited(conn: Any, key: int, **options: Any) -> list[int]:
        if not waits:
            waits.append(7)
            clock.advance(7)
        return await take(conn, key, **options)

    monkeypatch.setattr(locks, "take", waited)
    with Receiver() as receiver:
        logged, started, lease = asyncio.run(_drained(database_url, clock, receiver))
        sent = Counter(request.headers["webhook-id"] for request in receiver.requests)
    assert waits == [7]
    assert logged == [EVENTS, 0]  # none handed back
    assert len(started) == len(sent) == EVENTS
    assert {(until - at).total_seconds() for at, until in started} == {lease}
    assert set(sent.values()) == {1}
