"""One partner never holds every sender: whatever its cap, a worker gives one partner at most its
senders less a reserve (``worker.most_slots``), so a partner whose ``maxInFlight`` reaches the
worker's concurrency and hangs leaves senders to the others."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from webhook_helpers import Receiver, Reply, fixed_keyring, room_claimed, seed_outbox, settings

from service.db.engine import create_engine
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.webhooks import outbox, partners, wiring
from service.webhooks.claim import claim_due
from service.webhooks.partners import MAX_IN_FLIGHT_LIMIT
from service.webhooks.worker import CONCURRENCY, most_slots


@pytest.mark.parametrize(
    ("concurrency", "most"),
    [(1, 1), (2, 1), (3, 2), (4, 3), (8, 6), (32, 24), (CONCURRENCY, 384)],
)
def test_one_partner_gets_the_senders_less_a_quarter_kept_for_the_others(concurrency: int, most: int) -> None:
    """A quarter of the senders (at least one, while there are two) is never one partner's."""
    assert most_slots(concurrency) == most


def test_the_default_worker_bounds_a_partner_below_the_largest_cap() -> None:
    assert most_slots(CONCURRENCY) < CONCURRENCY < MAX_IN_FLIGHT_LIMIT


def test_a_claim_gives_a_partner_no_more_slots_than_the_holders_bound(database_url: str, clock: Any) -> None:
    """A partner at cap 1,000 is claimed for at most ``max_slots`` in flight: its slots only when not
    claimed ahead, depth times them when it is; the bound is the holder's, so a second holder still
    gets the slots the cap leaves after the first one's rows."""

    async def scenario() -> list[tuple[int, set[int]]]:
        engine = create_engine(database_url)
        await seed_outbox(engine, clock, [("wide", "https://wide.example/hook", 1000)], 60, fixed_keyring())
        seen = []
        for holder, deep in (("a", set()), ("b", None)):
            async with engine.begin() as conn:
                jobs = await claim_due(
                    conn, now=clock(), limit=100, lease=timedelta(seconds=30), default_cap=8,
                    keyring=fixed_keyring(), holder=holder, depth=4, deep=deep, max_slots=5,
                )  # fmt: skip
            seen.append((len(jobs), {job.slots for job in jobs}))
        await engine.dispose()
        return seen

    # a: not deep, its 5 slots only; b: 995 left by the cap, bounded at 5, claimed 4 deep.
    assert asyncio.run(scenario()) == [(5, {5}), (20, {5})]


def test_a_partner_whose_cap_passes_the_concurrency_hanging_leaves_senders_to_the_others(
    database_url: str, clock: Any
) -> None:
    """A partner at cap 1,000 holds every request until the test lets go, beside a healthy partner
    at the default cap; the worker has 8 senders. Unbounded, the wide partner's jobs took all 8 and
    the healthy partner got nothing until an attempt timed out (30 s here); bounded, the wide one
    holds 6 at most (3, its share, while the healthy one has work too) and the healthy one gets all
    its events while it hangs."""
    events = 20
    concurrency = 8
    config = Settings(database_url=database_url, **settings(receiver_timeout=30.0))
    release = threading.Event()
    with Receiver(Reply(hold=release)) as stuck, Receiver() as healthy:

        async def scenario() -> bool:
            engine = create_engine(database_url)
            # The wide partner first: its lane is filled first, its jobs queued ahead of the others.
            targets = [("wide", stuck.url("/wide"), 1000), ("healthy", healthy.url(), None)]
            await seed_outbox(engine, clock, targets, events, load_keyring(config))
            worker = wiring.worker(engine, config, clock=clock, concurrency=concurrency)
            await worker.start()
            try:
                # Waiting for the deliveries to arrive, not for time to pass: they come in
                # milliseconds, or (unbounded) not before the held requests are let go.
                return await asyncio.to_thread(healthy.wait_for, lambda got: len(got) >= events, 10)
            finally:
                release.set()
                await worker.stop(grace=0)
                await engine.dispose()

        arrived = asyncio.run(scenario())
        peak = stuck.peak["/wide"]
    assert arrived, f"the healthy partner got {len(healthy.requests)} of {events} while the wide one hung"
    assert peak == most_slots(concurrency) == 6


async def _onboard_and_publish(engine: Any, clock: Any, keyring: Any, name: str, url: str, count: int) -> None:
    """Onboard a partner at the default cap, then publish ``count`` events (to every partner)."""
    async with engine.begin() as conn:
        await partners.create_partner(conn, partners.NewPartner(name, url, None, None), now=clock(), keyring=keyring)
    for index in range(count):
        await outbox.publish_event(engine, parse_event(room_claimed(f"{name}-{index}"), now=clock()), now=clock())


def test_partners_hanging_together_leave_a_quarter_of_the_senders_to_a_partner_that_comes_later(
    database_url: str, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Two partners at the default cap hang (each held under three quarters of 8 senders: 6 and 6,
    12 in all); a healthy partner's events come only once they hang. Without shares the two held
    all 8 senders and the healthy partner waited an attempt's timeout (30 s here); shared, the two
    hold 6 between them (3 each), and the healthy partner's events go out on the 2 left while they
    hang."""
    events = 20
    concurrency = 8
    config = Settings(database_url=database_url, **settings(receiver_timeout=30.0))
    release = threading.Event()
    with Receiver(Reply(hold=release)) as stuck, Receiver() as healthy:

        async def scenario() -> bool:
            engine = create_engine(database_url)
            keyring = load_keyring(config)
            await seed_outbox(engine, clock, [("a", stuck.url("/a"), None), ("b", stuck.url("/b"), None)], 10, keyring)
            worker = wiring.worker(engine, config, clock=clock, concurrency=concurrency)
            await worker.start()
            try:
                pool = most_slots(concurrency)
                hanging = await asyncio.to_thread(stuck.wait_for, lambda got: len(got) >= pool, 10)
                assert hanging, f"the hanging partners got {len(stuck.requests)} attempts, not {pool}"
                await _onboard_and_publish(engine, clock, keyring, "healthy", healthy.url(), events)
                worker.wake.set()
                return await asyncio.to_thread(healthy.wait_for, lambda got: len(got) >= events, 10)
            finally:
                release.set()
                await worker.stop(grace=0)
                await engine.dispose()

        arrived = asyncio.run(scenario())
        peaks = (stuck.peak["/a"], stuck.peak["/b"])
    assert arrived, f"the healthy partner got {len(healthy.requests)} of {events} while two partners hung"
    assert peaks == (3, 3)
    # The operator is told once that partners are held to their shares, and what to do if they answer.
    said = [record for record in caplog.records if "held to a fair share" in record.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"


def test_the_line_saying_partners_are_held_to_their_shares_comes_once_an_hour_at_most(
    tmp_path: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Partners near the pool may want more than it and then less, turn after turn: the warning
    and the line that it ended are written once, and again only an hour (by the clock) later."""
    config = Settings(database_url=f"sqlite:///{tmp_path / 'service.db'}", **settings())
    worker = wiring.worker(create_engine(config.database_url), config, clock=clock, concurrency=8)
    caplog.set_level(logging.INFO, logger="service.webhooks.worker")
    said = []
    for minutes, contended in [(0, True), (1, False), (2, True), (3, False), (4, True), (65, False), (66, True), (67, False)]:
        clock.set(datetime(2026, 6, 29, 12, 0, tzinfo=UTC) + timedelta(minutes=minutes))
        worker.lanes.contended = contended
        caplog.clear()
        worker._note_contention()
        said.append([record.levelname for record in caplog.records])
    assert said == [["WARNING"], ["INFO"], [], [], [], [], ["WARNING"], ["INFO"]]


def test_a_partner_that_starts_hanging_after_another_takes_only_a_loan_of_the_senders_left(
    database_url: str, clock: Any
) -> None:
    """8 senders: a hangs and holds the pool (6). b starts hanging after it: its share is 3, but the
    pool is full, so the reserve lends it one sender, not three. Before loans b took 3, every sender
    was held, and a healthy partner onboarded next waited an attempt's timeout (30 s here); now its
    20 events go out on the sender the reserve still has while both hang."""
    events = 20
    concurrency = 8
    config = Settings(database_url=database_url, **settings(receiver_timeout=30.0))
    release = threading.Event()
    with Receiver(Reply(hold=release)) as stuck, Receiver() as healthy:

        async def scenario() -> bool:
            engine = create_engine(database_url)
            keyring = load_keyring(config)
            worker = wiring.worker(engine, config, clock=clock, concurrency=concurrency)
            await worker.start()
            try:
                pool = most_slots(concurrency)
                await _onboard_and_publish(engine, clock, keyring, "a", stuck.url("/a"), 10)
                worker.wake.set()
                assert await asyncio.to_thread(stuck.wait_for, lambda got: len(got) >= pool, 10)
                await _onboard_and_publish(engine, clock, keyring, "b", stuck.url("/b"), 10)
                worker.wake.set()
                assert await asyncio.to_thread(stuck.wait_for, lambda got: len(got) > pool, 10)
                await _onboard_and_publish(engine, clock, keyring, "healthy", healthy.url(), events)
                worker.wake.set()
                return await asyncio.to_thread(healthy.wait_for, lambda got: len(got) >= events, 10)
            finally:
                release.set()
                await worker.stop(grace=0)
                await engine.dispose()

        arrived = asyncio.run(scenario())
        peaks = (stuck.peak["/a"], stuck.peak["/b"])
    assert arrived, f"the healthy partner got {len(healthy.requests)} of {events} while two partners hung"
    assert peaks == (6, 1)


def test_an_attempt_that_raises_gives_its_slot_back_at_once(database_url: str, clock: Any) -> None:
    """A partner at cap 1 is claimed ahead once its first delivery lands; its second attempt
    raises. Nothing is logged for it (its claim holds until its lease ends), so no turn would free
    its slot: the partner's jobs claimed ahead stayed parked until the worker stopped. Now the slot
    goes on at once and they are delivered."""
    config = Settings(database_url=database_url, **settings())
    with Receiver() as receiver:

        async def scenario() -> bool:
            engine = create_engine(database_url)
            await seed_outbox(engine, clock, [("one", receiver.url(), 1)], 6, load_keyring(config))
            worker = wiring.worker(engine, config, clock=clock, concurrency=8)
            attempt, attempts = worker.attempt, []

            async def second_raises(job: Any) -> Any:
                attempts.append(job.delivery_id)
                if len(attempts) == 2:
                    raise RuntimeError("a bug in the sender")
                return await attempt(job)

            worker.attempt = second_raises  # type: ignore[method-assign]
            await worker.start()
            try:
                return await asyncio.to_thread(receiver.wait_for, lambda got: len(got) >= 4, 10)
            finally:
                await worker.stop(grace=0)
                await engine.dispose()

        assert asyncio.run(scenario()), f"{len(receiver.requests)} deliveries arrived, not the 4 claimed"


def test_a_healthy_partner_beside_partners_filling_the_pool_keeps_its_whole_cap(
    database_url: str, clock: Any
) -> None:
    """64 senders: six partners at the default cap hang and fill the pool (48). A healthy partner
    onboarded next has a share of 6 of its 8 slots, and while the pool is full the reserve lent it
    2 (a loan): it stayed at 2 in flight however long the others hung (beside 64 partners hanging
    at cap 8 with 512 senders, 5 of its 8). Once its first attempts are delivered it borrows past
    its share up to its cap: here its later requests are held, and 8 of them are in at once."""
    events = 20
    concurrency = 64
    config = Settings(database_url=database_url, **settings(receiver_timeout=30.0))
    release = threading.Event()
    with Receiver(Reply(hold=release)) as stuck, Receiver(Reply(hold=release)) as healthy:
        healthy.script("/hook", 200, 200)  # its first two attempts are delivered at once

        async def scenario() -> bool:
            engine = create_engine(database_url)
            keyring = load_keyring(config)
            hanging = [(name, stuck.url(f"/{name}"), None) for name in "abcdef"]
            await seed_outbox(engine, clock, hanging, 10, keyring)
            worker = wiring.worker(engine, config, clock=clock, concurrency=concurrency)
            await worker.start()
            try:
                pool = most_slots(concurrency)
                assert await asyncio.to_thread(stuck.wait_for, lambda got: len(got) >= pool, 10)
                await _onboard_and_publish(engine, clock, keyring, "healthy", healthy.url(), events)
                worker.wake.set()
                return await asyncio.to_thread(
                    healthy.wait_for, lambda got: any(request.in_progress >= 8 for request in got), 10
                )
            finally:
                release.set()
                await worker.stop(grace=0)
                await engine.dispose()

        at_its_cap = asyncio.run(scenario())
        peaks = [stuck.peak[f"/{name}"] for name in "abcdef"]
    assert at_its_cap, f"the healthy partner had {healthy.peak['/hook']} attempts in flight at most, not 8"
    assert peaks == [8] * 6
