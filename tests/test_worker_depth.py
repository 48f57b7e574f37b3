"""Depth counts in seconds: a worker claims ahead for a partner only as much as the partner sends
within half the time a claimed job has to start in, judged by how long its attempts took and the
part of its slots its lane may use. At a fixed depth a partner answering slowly held more than it could send before its claims'
leases ran out, and every claim's tail was handed back unsent and claimed again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from webhook_helpers import Receiver, room_claimed, settings

from service.clock import ManualClock
from service.db.engine import create_engine
from service.db.tables import deliveries
from service.events import parse_event
from service.keyring import load_keyring
from service.settings import Settings
from service.states import AttemptOutcome
from service.webhooks import claim as claim_module
from service.webhooks import outbox, partners, wiring
from service.webhooks import worker as worker_module
from service.webhooks.claim import Job
from service.webhooks.lanes import Lanes
from service.webhooks.settle import Settlement
from service.webhooks.worker import DEPTH, depth_within

TIMEOUT = 10.0  # a lease of 2 x 10 + 5 = 25 s; a job starts within 25 - 11 = 14 s, half of it 7 s
CAP = 2
EVENTS = 30


@pytest.mark.parametrize(
    ("seconds", "horizon", "most", "depth"),
    [
        (0.002, 7.0, DEPTH, DEPTH),  # on loopback: the whole depth
        (0.0, 7.0, DEPTH, DEPTH),  # faster than the log's milliseconds tell
        (0.3, 7.0, DEPTH, 24),  # 23 attempts a slot beyond the one in flight: 6.9 s
        (2.0, 7.0, DEPTH, 4),
        (3.5, 7.0, DEPTH, 3),  # exactly the horizon
        (7.0, 7.0, DEPTH, 2),
        (8.0, 7.0, DEPTH, 1),  # slower than the horizon: its slots only
        (0.1, 7.0, 8, 8),  # never past the worker's own depth
    ],
)
def test_a_partners_depth_is_what_it_sends_within_the_horizon(
    seconds: float, horizon: float, most: int, depth: int
) -> None:
    assert depth_within(seconds, horizon, most) == depth


def _attempt(
    partner: str, duration_ms: int, outcome: AttemptOutcome = AttemptOutcome.DELIVERED
) -> Settlement:
    at = datetime(2026, 11, 29, tzinfo=UTC)
    job = Job("dlv", "evt", "room.claimed", partner, "https://x.example/", b"{}", 1, ("s",), "tok", at)
    return Settlement(job, at, duration_ms, 200, None, None, outcome, at)


def test_a_partners_pace_is_the_mean_of_its_attempts_whatever_they_ended_in() -> None:
    """A failed attempt held its slot as long as it took: a partner answering half its attempts in
    50 ms and timing out on the others at 15 s sends what it holds at the pace of both."""
    records = [
        _attempt("a", 50),
        _attempt("a", 15_000, AttemptOutcome.RETRY),
        _attempt("b", 5),
        _attempt("c", 10, AttemptOutcome.RETRY),  # delivered nothing: not deep at all
    ]
    assert worker_module._delivering(records) == {"a": 7.525, "b": 0.005}


def _worker(database_url: str, clock: ManualClock) -> worker_module.Worker:
    config = Settings(database_url=database_url, **settings(receiver_timeout=TIMEOUT))
    return wiring.worker(create_engine(database_url), config, clock=clock)


def test_a_partner_held_to_a_share_of_its_slots_is_claimed_ahead_for_that_share(
    sqlite_url: str, clock: ManualClock
) -> None:
    """Held to half its slots (two partners wanting 4 each of a pool of 4), a partner's lane sends at
    half the pace its attempts' durations alone say, and its depth follows: 1 + 7 // (0.5 / 0.5) = 8,
    not 15; a partner whose depth comes to 1 is not named deep at all."""
    worker = _worker(sqlite_url, clock)
    lanes: Lanes[Job] = Lanes(lambda started: None, pool=4, senders=8)
    at = datetime(2026, 11, 29, tzinfo=UTC)
    for partner in ("held", "other"):
        job = Job(
            "dlv", "evt", "room.claimed", partner, "https://x.example/", b"{}", 1, ("s",), "t", at, slots=4
        )
        lanes.add([job] * 4, start_by=0.0)
    assert (lanes.held_to("held"), lanes.held_to("absent")) == (0.5, 1.0)
    worker.lanes = lanes
    assert worker._depths({"held": 0.5, "free": 0.5, "slow": 8.0}) == {"held": 8, "free": 15}


def test_a_partner_whose_attempts_take_long_is_claimed_ahead_only_what_it_sends_in_time(
    database_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its attempts logged as taking 3 s each (the receiver answers at once; the logged duration is
    what the worker goes by), a partner at cap 2 is claimed at depth 1 + 7 // 3 = 3 once its first
    attempts are logged: never more than 6 of its deliveries held at once, where the worker's depth
    (64) would have claimed all 30."""
    claim_due = claim_module.claim_due
    depths: list[dict[str, int] | None] = []
    taken: list[int] = []

    async def noted(conn: Any, **options: Any) -> list[Job]:
        jobs = await claim_due(conn, **options)
        depths.append(options["deep"])
        held = select(func.count()).where(deliveries.c.status == "delivering")
        taken.append(await conn.scalar(held))  # claimed and not yet logged, this claim's among them
        return jobs

    monkeypatch.setattr(worker_module, "claim_due", noted)

    async def scenario(receiver: Receiver) -> tuple[int, str]:
        config = Settings(database_url=database_url, **settings(receiver_timeout=TIMEOUT))
        engine = create_engine(database_url)
        async with engine.begin() as conn:
            partner = await partners.create_partner(
                conn, partners.NewPartner("slow", receiver.url("/p"), None, CAP), now=clock(),
                keyring=load_keyring(config),
            )  # fmt: skip
        for index in range(EVENTS):
            await outbox.publish_event(
                engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock()
            )
        try:
            async with wiring.worker(engine, config, clock=clock) as worker:
                attempt = worker.attempt

                async def slow(job: Job) -> Settlement:
                    return (await attempt(job))._replace(duration_ms=3000)

                worker.attempt = slow  # type: ignore[method-assign]
                return await worker.drain(), partner.id
        finally:
            await engine.dispose()

    with Receiver() as receiver:
        logged, partner_id = asyncio.run(scenario(receiver))
    assert logged == EVENTS
    assert depths[0] == {}  # nothing delivered yet: its slots only
    assert taken[0] == CAP
    named = [deep for deep in depths if deep]
    assert named, "no claim filled ahead"
    assert all(deep == {partner_id: 3} for deep in named)
    assert max(taken) <= CAP * 3
