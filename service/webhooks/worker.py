"""The delivery worker: one loop that claims due deliveries, sends them and logs every attempt.

Inside ``serve`` it starts after the server does and stops before it (``service.webhooks.runtime``);
``python -m service worker`` runs it alone, for scale-out on PostgreSQL. The same loop runs in
production, in the tests and in the demo generator: ``run()`` turns until ``stop()``, ``drain()``
turns until nothing is due at the clock's time and nothing is in flight.

The loop is made of standard parts:

- **claim**: the bookkeeper (``_bookkeep``), the only part that touches the database, claims due
  deliveries (``claim.claim_due``): partners in turn, each within its cap across every worker, up
  to ``depth`` times the slots the cap leaves this worker. The claimed jobs go to the partners'
  lanes (``service.webhooks.lanes``), which let a job out to the senders' queue while its partner
  has a free slot, and give a slot to the next job the moment an attempt ends: a partner at its cap
  stays there with no database round trip between one attempt and the next;
- **send**: ``concurrency`` sender tasks, in one ``asyncio.TaskGroup``, each attempting one
  delivery at a time (``service.webhooks.send``) and handing its ``Settlement`` back;
- **settle**: the bookkeeper logs every attempt finished since its last turn, settles their
  deliveries and moves their partners' circuits (``service.webhooks.settle``), in the same
  transaction as its next claim, which then tops the lanes up. Under load one commit carries
  hundreds of attempts; an idle worker turns as soon as something happens. Turns that follow each
  other run on one connection (``db.engine.HeldConnection``), given back when the worker falls idle.

A hanging partner holds only its own slots, and its lane parks the rest of what it claimed; the
sender pool is large enough that a few hanging partners' slots leave most of it free, and a partner
failing attempt after attempt soon has its circuit opened (``service.webhooks.breaker``), its
parked jobs handed back, and holds one slot at most. Whatever its cap, one partner gets at most
three quarters of the senders (``most_slots``): a partner whose cap reached the worker's
concurrency took every sender while it hung, and a healthy partner waited a whole attempt timeout.
The partners' lanes hold no more than that between them either, each its fair share while they
want more (``Lanes(pool=...)``): several partners hanging together leave a quarter of the senders
to a partner whose work arrives while they hang, and that quarter only lends (``Lanes.loan``, 16
senders to a partner), so partners that start hanging one after another cannot take it all.

A claimed job must start by its lease's end less one attempt (a timeout) and a second: the moment
is read from the claim's own ``claimed_until`` (mapped onto the event loop's clock when the claim
comes back), and the lease counts from when the claim held its lock, so neither a wait for the
lock nor a slow commit lets an attempt run past its lease while another worker takes the delivery
again. A job that can no longer start in time is handed back unsent.

The bookkeeper wakes when this process makes deliveries due (``wake``, set by the operations),
when another process does (PostgreSQL's NOTIFY, ``service.webhooks.notify``), when finished
attempts or free room add up to a batch (or the worker falls idle), and every ``poll_interval``
seconds for due retries. An attempt counts (``logged``, metrics, logs) once its row is committed.

Beside the loop, ``run()`` keeps the worker's row in the roster (``service.webhooks.roster``):
written when it starts and every ``roster.HEARTBEAT`` by the injected clock, deleted when it stops;
a failed write is logged and tried at the next beat. Each beat also measures the injected clock
against the database server's on the beat's own connection (``service.db.clockcheck``): the offset
is the gauge ``service_clock_offset_seconds``, and a warning is logged once when it passes what the
leases absorb (``clockcheck.BOUND``), a line again when it comes back. It also prunes what is past
the retention (``service.webhooks.retention``): a minute after it starts, then hourly by the
injected clock, in batches under the bookkeeper's own transaction lock, so delivery waits for one
short batch at most.
A failed pruning is logged and tried again an hour later; it never stops delivery. ``drain()``
does neither.

Bookkeeping survives what partners send back: a batch the database refuses is logged attempt by
attempt, an attempt refused alone is logged once more without its response excerpt, and one
refused even so is dropped with an error line (its claim expires and it is sent again). Nothing is
retried forever: records whose lease ran out while the database was unreachable are dropped too.
A failed turn's commit may have landed with only its answer lost: the next turn first reads which
of the records put back still have their deliveries' claims (``_still_claimed``), and logs only
those, so no attempt is logged or counted against its partner twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from service import eventloop
from service.clock import Clock
from service.db import clockcheck, faults
from service.db.engine import ConnectionLost, HeldConnection
from service.db.writer import refused_rows
from service.keyring import Keyring
from service.metrics import Metrics
from service.settings import Settings
from service.states import AttemptOutcome, CircuitChange, HandedBack
from service.webhooks import pacing, partners, retention, roster, settle
from service.webhooks.breaker import STOPPING, BreakerPolicy
from service.webhooks.claim import Job, claim_due, new_claim_token, release
from service.webhooks.lanes import Lanes
from service.webhooks.notify import Listener
from service.webhooks.recorder import Recorder
from service.webhooks.retry import RetryPolicy
from service.webhooks.send import Sender
from service.webhooks.settle import Settlement

log = logging.getLogger(__name__)
T = TypeVar("T")

# Attempts in flight per worker, each a sender task and a connection slot. Well above any one
# partner's cap (SERVICE_WEBHOOK_MAX_IN_FLIGHT, 8 by default): fifty partners hanging at their cap
# (400 slots) still leave a fifth of it to everyone else (tests/test_worker_slots.py), and an open
# circuit holds one slot at most. A server that runs the worker keeps this many descriptors aside
# (service.connections.WORKER_RESERVE).
CONCURRENCY = 512
# Whatever its cap, one partner gets at most the worker's senders less a quarter of them (at least
# one) kept for everyone else (``most_slots``; 384 of 512). A partner's cap may reach 1,000
# (partners.MAX_IN_FLIGHT_LIMIT), past the worker's concurrency, and one such partner hanging held
# every sender for a whole attempt timeout: a healthy partner's 700 deliveries took 4.4 s instead
# of 0.19 s. Bounded, one partner hanging at any cap leaves a quarter of the senders (128) to the
# others, as fifty hanging at the default cap leave a fifth. A quarter, not half: a partner at cap
# 1,000 draining a backlog alone keeps its rate with three quarters of 32 senders (10,000
# deliveries, SQLite, ten rounds side by side: 8,364/s unbounded, 8,517/s bounded, medians; CPU
# 119 µs a delivery both), where half lost some (7,477/s against 7,670/s, 6 rounds of 8 behind).
RESERVE_SHARE = 4


def most_slots(concurrency: int) -> int:
    """The most attempts one partner may have in flight in a worker of ``concurrency`` senders:
    all but a quarter of them (at least one kept back, while there are two)."""
    return max(1, concurrency - max(1, concurrency // RESERVE_SHARE))


POLL_INTERVAL = 1.0  # seconds; bounds how late a due retry or another process's publish is seen
# A claim lasts about twice the webhook timeout plus a few seconds, so a live worker always settles
# before its lease ends and a killed one's claims return soon (docs/architecture.md
# "Delivery pipeline").
LEASE_MARGIN = 5.0
# Under partial load finished attempts wait this long (seconds) to share a commit; an idle worker
# logs at once. It delays only the log row, never a delivery.
LOG_DELAY = 0.02
# Claims and log writes come in batches of up to BATCH rows, and up to WAITING claimed deliveries
# wait for a sender. Under a backlog the transactions run back to back, so each one's fixed cost
# (round trips, commit) is what bounds the rate: draining 20,000 deliveries went from 6,400/s
# (PostgreSQL) and 8,500/s (SQLite) with batches of 64 to 8,800/s and 9,900/s with 256. Under a
# backlog a turn lasts about as long as the senders take to send what the lanes hold: the database
# settles and claims rows about as fast as they are sent, and each round trip also waits on an
# event loop busy with the senders. Turns of 512 rows share the wait among twice the deliveries
# (like for like at cap 64 and for ten partners at cap 8, 6-20 % faster than 256 on both
# databases; docs/architecture.md "Slots"), and a turn that finds less than a batch parked claims
# two, so the senders do not idle at its end (pacing). A waiting delivery that could no longer
# finish inside its lease is handed back instead of sent.
BATCH = 512
WAITING = 512
# A worker claims up to DEPTH times a partner's slots, so the next of its deliveries is at hand when
# an attempt ends, for the partners whose deliveries this turn or the last logged as delivered (depth
# is earned, see _deep: a partner hanging or failing soon gets its slots only). Claims and logs run
# in turns tens of milliseconds long under a backlog, while a partner answering on loopback takes a
# millisecond or two: with 16 slots, DEPTH 64 keeps up to 1,008 deliveries parked (two turns'
# worth; claim.MAX_AHEAD bounds larger caps at 2,048). DEPTH 32 against 8 drained a partner at cap
# 16 about 30 % faster on both databases, and 64 against 32 another 6 % (docs/architecture.md
# "Slots", benchmarks/delivery.py).
DEPTH = 64
# ...and fewer times for a partner whose attempts take long, so that what it holds beyond its slots
# goes out within this share of the time a claimed job has to start in (its lease less one attempt
# and a second): depth counts in seconds, not deliveries (``depth_within``). At DEPTH, a partner
# at the default cap answering in 0.5 s held 504 deliveries beyond its slots, 32 s of its attempts,
# where a job has 19 s to start in under the default 15 s timeout: every claim's tail was handed
# back unsent and claimed again (as with a 2 s timeout, 6 s to start in, a partner answering in
# 300 ms: 600 deliveries took 1,336 claims, benchmarks/delivery.py --slow-partner 300). Half, so
# that a partner that slows down somewhat still sends what it holds.
AHEAD_SHARE = 0.5
# Pruning: the first soon after start (not in the start-up rush), then every hour.
PRUNE_FIRST = timedelta(minutes=1)
PRUNE_EVERY = timedelta(hours=1)
# The log says partners are held to their shares (and that they no longer are) at most once a while.
CONTENTION_LINES = timedelta(hours=1)


def _delivering(records: Sequence[Settlement]) -> dict[str, float]:
    """The partners these attempts delivered to, each with the seconds its attempts took on
    average, whatever they ended in: a failed attempt held its slot as long as it took."""
    spent: dict[str, list[int]] = {}
    delivered: set[str] = set()
    for record in records:
        spent.setdefault(record.job.partner_id, []).append(record.duration_ms)
        if record.outcome is AttemptOutcome.DELIVERED:
            delivered.add(record.job.partner_id)
    return {partner_id: sum(spent[partner_id]) / len(spent[partner_id]) / 1000 for partner_id in delivered}


def _deep(records: Sequence[Settlement], delivered_last: Mapping[str, float]) -> dict[str, float]:
    """The partners a claim may fill ahead, each with the seconds its attempts take (its depth,
    ``depth_within``, follows from them):
    those these attempts delivered to (as they took), and those the last turn's did (as they took
    then) that none of these failed for.

    Under a backlog a turn that claimed is followed at once by one with little or nothing to log
    (the claimed jobs have only just gone out). Filling ahead only for the partners it logs, that
    turn would claim nothing, the lanes would run dry while the next turn waited for their
    attempts to finish, and the senders would idle through every other turn. A partner that
    stops answering keeps its depth for one turn at most."""
    failed = {record.job.partner_id for record in records if record.outcome is not AttemptOutcome.DELIVERED}
    kept = {partner_id: seconds for partner_id, seconds in delivered_last.items() if partner_id not in failed}
    return kept | _delivering(records)


def depth_within(seconds: float, horizon: float, most: int = DEPTH) -> int:
    """How many times its slots a partner whose attempts take ``seconds`` each may be claimed, so
    that what it holds beyond its slots goes out within ``horizon`` seconds: at least 1 (its slots
    only), at most ``most``. Each slot sends one attempt after another, so ``depth - 1`` attempts a
    slot take ``(depth - 1) * seconds``."""
    if seconds <= 0:  # faster than the log's milliseconds can tell
        return most
    return max(1, min(most, 1 + int(horizon / seconds)))


def lease_for(settings: Settings) -> timedelta:
    return timedelta(seconds=2 * settings.webhook_timeout + LEASE_MARGIN)


def breaker_policy(settings: Settings) -> BreakerPolicy:
    return BreakerPolicy(
        failures=settings.webhook_breaker_failures,
        cooldown=settings.webhook_breaker_cooldown,
        disable_after=settings.webhook_disable_after,
    )


class Worker:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        settings: Settings,
        clock: Clock,
        sender: Sender,
        keyring: Keyring,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        wake: asyncio.Event | None = None,
        concurrency: int = CONCURRENCY,
        depth: int = DEPTH,
        poll_interval: float = POLL_INTERVAL,
        role: str = "worker",
    ) -> None:
        """``sender`` makes the attempts (``concurrency`` connections); ``keyring`` opens the
        partners' secrets. ``service.webhooks.wiring.worker`` builds both from the settings.
        ``role`` names where it runs in the roster: ``serve`` inside the server, ``worker``
        alone."""
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.engine = engine
        self.keyring = keyring
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.recorder = Recorder(metrics)
        self.rng = rng or random.Random()
        self.policy = RetryPolicy.from_schedule(settings.webhook_retry_schedule)
        self.breaker = breaker_policy(settings)
        self.lease = lease_for(settings)
        # Started by its lease's end less this (seconds), an attempt ends (one timeout) with a second
        # to spare inside its lease (see ``_start_by``).
        self._start_margin = settings.webhook_timeout + 1
        self._lease_seconds = self.lease.total_seconds()
        self.concurrency = concurrency
        self.max_slots = most_slots(concurrency)
        self.depth = depth
        self.poll_interval = poll_interval
        self.role = role
        self.wake = wake or asyncio.Event()
        self.sender = sender
        self.listener = Listener(engine, self.wake)
        self.logged = 0  # attempts logged by this worker, for benchmarks and drills
        # Deliveries it claimed, and those it handed back unsent (a lease too near its end, a
        # partner changed or stopped, the worker stopping), for benchmarks and drills likewise.
        self.claimed = 0
        self.handed_back = 0
        self._run_logged_from = 0  # self.logged when this run started (the roster's count)
        self.retention = timedelta(days=settings.retention_days)
        self.next_prune: datetime | None = None  # by the clock; set when run() starts
        self.pruned = asyncio.Event()  # set after each pruning, done or failed (for tests)
        self.last_turn = time.monotonic()  # when the bookkeeper last turned (the worker's /healthz)
        # The clock against the database server's, as the last heartbeat measured it (seconds, None
        # until measured, and on SQLite); whether it was past clockcheck.BOUND (warned once).
        self.clock_offset: float | None = None
        self._clock_skewed = False
        self.failing = False  # the last transaction failed (the server's and worker's /readyz)
        self._task: asyncio.Task[int] | None = None
        self._stopping = False
        self._grace = settings.webhook_timeout + 1  # for attempts in flight at stop
        batch = min(BATCH, 8 * concurrency)
        self.pace = pacing.Pace(
            batch=batch, capacity=concurrency + min(WAITING, 2 * batch), log_delay=LOG_DELAY
        )
        self._db_lock = asyncio.Lock()  # the worker's transactions never overlap (SQLite's lock)
        # Its turns' connection, held while they follow each other, given back when it falls idle.
        self.connection = HeldConnection(engine)
        # One run's parts (set up by `run`).
        self.holder = new_claim_token()  # this run's name on its claims (claimed_by)
        self._new_lanes()
        self._records: list[Settlement] = []
        # The deliveries of the records a failed turn put back in ``_records``: its commit may have
        # landed and settled them (``_still_claimed``).
        self._uncertain: set[str] = set()
        self._first_record_at = 0.0
        self._expired: list[Job] = []
        self._handing: Counter[HandedBack] = Counter()  # why they are handed back, counted
        self._in_flight = 0
        self._nudge = asyncio.Event()
        self._woken = False
        self._drained = False  # the last claim took all there was (see ``pacing``)
        self._turn_seconds = 0.0  # how long the last turn took
        self._turning = False  # a turn is under way: the bookkeeper decides again when it ends
        # The partners the last turn's attempts delivered to, with the seconds an attempt took them.
        self._delivered_last: dict[str, float] = {}
        # Those, and the partners with an attempt finished since: their attempts in flight are
        # likely to finish soon, so finished attempts may wait to share a commit with them; the
        # others' may be hanging (pacing.Moment.silent).
        self._answering: set[str] = set()
        self._contended = False  # the lanes held partners to their shares at the last look
        self._contention_said: datetime | None = None  # when that was last written in the log
        self._contention_told = False  # and the line that it has ended is still to be written

    # --- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        await self.sender.open()

    async def close(self) -> None:
        await self.sender.close()

    async def __aenter__(self) -> Worker:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open, then deliver in the background until ``stop``; on PostgreSQL, also listen for
        deliveries other processes make due (``service.webhooks.notify``)."""
        await self.open()
        self._task = asyncio.get_running_loop().create_task(self.run(), name="webhook-worker")
        await self.listener.start()

    async def stop(self, grace: float | None = None) -> None:
        """Stop claiming, let attempts in flight finish (up to ``grace`` s), log them, close.

        Claimed deliveries not yet started are handed back at once. Attempts still running after
        the grace period are cancelled; their deliveries stay claimed until the lease runs out and
        are then sent again under the same attempt number (at least once).
        """
        if grace is not None:
            self._grace = grace
        self._stopping = True
        await self.listener.stop()
        self._nudge.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.close()

    async def drain(self) -> int:
        """Run the loop until nothing is due at the clock's time and nothing is in flight; the
        attempts it logged. The worker must be open (``async with worker``)."""
        return await self.run(until_idle=True)

    # --- the loop -----------------------------------------------------------------------------

    async def run(self, *, until_idle: bool = False) -> int:
        """Claim, send and log until stopped (or, with ``until_idle``, until idle); attempts logged."""
        logged_before = self._run_logged_from = self.logged
        # The log's COPY on a connection the server has just ended leaves asyncpg a dropped future,
        # reported at ERROR when the connection closes: the turn's own WARNING says what happened.
        faults.quiet_orphaned_waiters(asyncio.get_running_loop())
        self.holder = new_claim_token()
        self._new_lanes()
        self._records, self._expired, self._in_flight = [], [], 0
        self._handing = Counter()
        self._nudge, self._drained = asyncio.Event(), False
        self._contended = False
        try:
            async with asyncio.TaskGroup() as group:
                senders = [
                    group.create_task(self._send(), name=f"webhook-sender-{number}")
                    for number in range(self.concurrency)
                ]
                helpers = [group.create_task(self._forward_wakes(), name="webhook-wakes")]
                if not until_idle:
                    helpers.append(group.create_task(self._prune_hourly(), name="webhook-retention"))
                    helpers.append(group.create_task(self._beat_regularly(), name="webhook-roster"))
                try:
                    await self._bookkeep(until_idle)
                finally:
                    await self._wind_down()
                    for task in (*senders, *helpers):
                        task.cancel()
            await self._final_turn()
            if not until_idle:
                await self._on_roster(lambda conn: roster.leave(conn, self.holder))
        finally:
            await self._give_back_connection()
        return self.logged - logged_before

    async def _bookkeep(self, until_idle: bool) -> None:
        """The loop's one database user: log what finished, hand back what expired, claim for room,
        as ``pacing.decide`` says.

        After a claim comes back short (nothing more is claimable) it claims again only once an
        attempt is logged, when woken from outside (a publish, a resume, a retry) or after
        ``poll_interval``.
        """
        loop = asyncio.get_running_loop()
        last_claim = -float("inf")
        rolled_back_last = False  # the last turn was one PostgreSQL rolled back
        while not self._stopping:
            self.last_turn = time.monotonic()
            if self._woken or loop.time() - last_claim >= self.poll_interval:
                self._woken, self._drained = False, False
            moment = self._moment()
            if until_idle and pacing.idle(moment):
                return
            turn = pacing.decide(moment, self.pace)
            if not turn.now:
                wait = turn.wait
                if wait is None:
                    since = loop.time() - last_claim if self._drained else 0.0
                    wait = self.poll_interval - since
                if pacing.idle(moment):  # nothing will turn it soon: the pool may have it back
                    await self._give_back_connection()
                await self._pause(wait)
                continue
            began = loop.time()
            self._turning = True
            try:
                logged, jobs = await self._turn(turn.claim)
            except ConnectionLost:
                # Its connection, held since the last turn, was gone: the turn runs again at once
                # on a fresh one (pinged at checkout), and fails as below if the database is down.
                log.warning("the database ended the connection held between turns; turning again")
                continue
            except Exception as error:
                rolled_back = faults.rolled_back(error)
                if rolled_back and not rolled_back_last:
                    # Ended to break a deadlock (another transaction locked the same rows in
                    # another order) or a serialization conflict: nothing of it was written, its
                    # records are kept, and the other transaction has gone on. A fault of the
                    # moment, not of the database: the turn runs again at once, and waits as below
                    # only should that be ended too.
                    rolled_back_last = True
                    log.warning("the database rolled a turn back for another transaction; turning again")
                    continue
                rolled_back_last = False
                if rolled_back:
                    again = "the database rolled back two turns in a row; trying again shortly"
                    log.warning(again, exc_info=True)
                else:
                    log.exception("the outbox is unreachable; trying again shortly")
                self._drop_stale_records()
                await self._pause(self.poll_interval)
                continue
            finally:
                self._turning = False
            rolled_back_last = False
            self._turn_seconds = loop.time() - began
            if turn.claim:
                last_claim, self._drained = loop.time(), len(jobs) < turn.claim
            elif logged:
                self._drained = False  # their partners' slots are free: claimable again
            if jobs:  # one claim: every job has the same lease end
                self.lanes.add(jobs, start_by=self._start_by(jobs[0].claimed_until, loop.time()))
                self._note_contention()

    def _new_lanes(self) -> None:
        """An empty queue to the senders, and lanes that fill it: the partners' shares of
        ``max_slots``, the reserve lending from the rest of the senders."""
        self._jobs: asyncio.Queue[tuple[float, Job]] = asyncio.Queue()
        self.lanes: Lanes[Job] = Lanes(self._jobs.put_nowait, pool=self.max_slots, senders=self.concurrency)

    def _start_by(self, claimed_until: datetime, now: float) -> float:
        """When (on the event loop's clock, read as ``now``) a job whose lease ends at
        ``claimed_until`` (the injected clock's time) must start: one timeout and a second before
        the lease ends, as seen now. Never later than a full lease from now allows, should the
        injected clock have gone back (a wall clock stepped by NTP)."""
        left = min((claimed_until - self.clock()).total_seconds(), self._lease_seconds)
        return now + left - self._start_margin

    def _moment(self) -> pacing.Moment:
        records = self._records
        return pacing.Moment(
            finished=len(records),
            expired=len(self._expired),
            queued=self._jobs.qsize(),
            in_flight=self._in_flight,
            silent=self._in_flight - sum(map(self.lanes.out, self._answering)),
            parked=self.lanes.parked,
            drained=self._drained,
            oldest=asyncio.get_running_loop().time() - self._first_record_at if records else 0.0,
            turn_seconds=self._turn_seconds,
        )

    async def _pause(self, timeout: float) -> None:
        """Wait until nudged or for ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._nudge.wait()
        self._nudge.clear()

    async def _forward_wakes(self) -> None:
        """Turn the shared ``wake`` (set by publishers) into the bookkeeper's nudge, marked external."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            self._woken = True
            self._nudge.set()

    async def _prune_hourly(self) -> None:
        """Prune when the clock reaches ``next_prune``; look every ``poll_interval`` seconds."""
        self.next_prune = self.clock() + PRUNE_FIRST
        while True:
            if self.clock() >= self.next_prune:
                await self.prune()
                self.next_prune = self.clock() + PRUNE_EVERY
            await asyncio.sleep(self.poll_interval)

    async def _beat_regularly(self) -> None:
        """Write this run's row in the roster now, then every ``roster.HEARTBEAT`` by the clock
        (looked at every ``poll_interval`` seconds), measuring the clock at each beat."""
        started = self.clock()
        presence = roster.Presence(
            id=self.holder,
            host=socket.gethostname(),
            pid=os.getpid(),
            role=self.role,
            loop=eventloop.name(asyncio.get_running_loop()),
            concurrency=self.concurrency,
            attempts=0,
            started_at=started,
            seen_at=started,
        )
        next_beat = started
        while True:
            now = self.clock()
            if now >= next_beat:
                presence = replace(presence, attempts=self.logged - self._run_logged_from, seen_at=now)
                offset = await self._on_roster(functools.partial(self._beat, presence=presence))
                if offset is not None:
                    self._clock_measured(offset)
                next_beat = now + roster.HEARTBEAT
            await asyncio.sleep(self.poll_interval)

    async def _beat(self, conn: AsyncConnection, presence: roster.Presence) -> clockcheck.Offset | None:
        """One beat, and the clock measured on its connection (a few ``SELECT clock_timestamp()``
        every ``roster.HEARTBEAT``; nothing on SQLite)."""
        await roster.beat(conn, presence=presence)
        return await clockcheck.measure(conn, self.clock)

    def _clock_measured(self, offset: clockcheck.Offset) -> None:
        """Report the offset, and say when it passes what the leases absorb (a warning, once) and
        when it comes back within it."""
        self.clock_offset = offset.seconds
        if self.metrics is not None:
            self.metrics.set_clock_offset(offset.seconds)
        if offset.past_bound and not self._clock_skewed:
            log.warning(
                "this machine's clock is %s; delivery leases absorb at most %g s, so another worker "
                "could send deliveries this one is still sending (or this one theirs): %s",
                offset.describe(),
                clockcheck.BOUND,
                clockcheck.FIX,
                extra={"clock_offset_seconds": round(offset.seconds, 3)},
            )
        elif self._clock_skewed and not offset.past_bound:
            log.info(
                "this machine's clock is back within %g s of the database server's (%s)",
                clockcheck.BOUND,
                offset.describe(),
                extra={"clock_offset_seconds": round(offset.seconds, 3)},
            )
        self._clock_skewed = offset.past_bound

    async def _on_roster(self, write: Callable[[AsyncConnection], Awaitable[T]]) -> T | None:
        """One short transaction on the roster, between the bookkeeper's; what ``write`` returned,
        or None: a failure is logged, and delivery goes on."""
        try:
            async with self._db_lock, self.engine.begin() as conn:
                return await write(conn)
        except Exception as error:
            log.warning("the worker roster could not be written: %s", type(error).__name__)
            return None

    async def prune(self, duty: float = retention.DUTY) -> retention.Pruned | None:
        """One pruning, under the bookkeeper's lock batch by batch; None (and an error line) if it
        failed."""
        try:
            pruned = await retention.prune(
                self.engine, now=self.clock(), older_than=self.retention, lock=self._db_lock, duty=duty
            )
        except Exception:
            log.exception("pruning past the retention failed; trying again in an hour")
            return None
        finally:
            self.pruned.set()
        log.info("pruned past the retention", extra=pruned.document())
        return pruned

    async def _send(self) -> None:
        """One sender: take the next claimed delivery, attempt it, hand its record over; repeat."""
        loop = asyncio.get_running_loop()
        handed: tuple[float, Job] | None = None  # the partner's next job, after a delivered one
        while True:
            if handed is None:
                start_by, job = await self._jobs.get()
                if not self._jobs.qsize() and pacing.decide(self._moment(), self.pace).now:
                    self._nudge.set()  # the queue ran dry: claim more now
            else:
                (start_by, job), handed = handed, None
            if self._stopping or loop.time() > start_by:
                # Its lease could run out mid-attempt: never send it.
                self._hand_back([job], HandedBack.STOPPING if self._stopping else HandedBack.LATE)
                self.lanes.done(job.partner_id)
                self._nudge.set()
                continue
            self._in_flight += 1
            record = None
            try:
                record = await self.attempt(job)
            except Exception:
                # Never expected (the sender answers every failure with an Attempt); the claim
                # holds until its lease ends and the delivery goes out again then.
                log.exception("attempting a delivery failed", extra={"delivery": job.delivery_id})
                continue
            finally:
                self._in_flight -= 1
                # Its slot goes to the partner's next job, sent by this sender (no hand-over
                # through the queue), or after a failure waits for the turn that logs it; with
                # nothing to log (the attempt raised), it goes on at once.
                if record is None:
                    self.lanes.done(job.partner_id)
                elif record.outcome is AttemptOutcome.DELIVERED:
                    handed = self.lanes.hand_on(job.partner_id)
                else:
                    self.lanes.done(job.partner_id, ok=False, answered=record.status_code is not None)
            first = not self._records
            if first:
                self._first_record_at = loop.time()
            self._records.append(record)
            self._answering.add(job.partner_id)
            # Not for every attempt: the first one waiting starts the bookkeeper's timer, later
            # ones wake it only when it has work; during a turn (back to back under a backlog)
            # none asks, as the bookkeeper decides again when the turn ends.
            if (
                first
                or self._stopping
                or (not self._turning and pacing.decide(self._moment(), self.pace).now)
            ):
                self._nudge.set()

    async def _wind_down(self) -> None:
        """Hand back what waits unsent; give attempts in flight up to the grace period to finish."""
        self._hand_back(self.lanes.take_all(), HandedBack.STOPPING)
        while not self._jobs.empty():
            self._hand_back([self._jobs.get_nowait()[1]], HandedBack.STOPPING)
        if not self._in_flight or not self._stopping:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace
        while self._in_flight and loop.time() < deadline:
            await self._pause(deadline - loop.time())

    async def _give_back_connection(self) -> None:
        """Return the turns' connection to the pool (the worker is about to wait, or stops)."""
        try:
            await self.connection.release()
        except Exception:
            log.warning("the database connection could not be given back cleanly; it was closed")

    async def _final_turn(self) -> None:
        try:
            await faults.once_more_if_rolled_back(lambda: self._turn(0), "the last turn")
        except Exception:
            log.exception("logging the last attempts failed; their leases will expire")

    # --- storage ------------------------------------------------------------------------------

    async def _turn(self, claim: int) -> tuple[int, list[Job]]:
        """Log what finished, hand back what expired, claim up to ``claim`` more: one transaction.
        The attempts logged, and the claimed deliveries."""
        records, self._records = self._records, []
        uncertain, self._uncertain = self._uncertain, set()
        expired, self._expired = self._expired, []
        handing, self._handing = self._handing, Counter()
        if not records and not expired and not claim:
            return 0, []
        answering, self._answering = self._answering, set()
        try:
            async with self._db_lock, self.connection.transaction() as conn:
                if uncertain:
                    records = await self._still_claimed(conn, records, uncertain)
                    uncertain = set()  # those kept hold their claims: none of them was logged
                changed = await self._changed_since_claim(conn)
                expired.extend(changed)
                handing[HandedBack.CHANGED] += len(changed)
                recorded = await settle.record(conn, records, breaker=self.breaker)
                await partners.apply(conn, recorded.effects, now=self.clock())
                await release(conn, expired, now=self.clock())
                deep = self._depths(_deep(records, self._delivered_last))
                jobs = await self._claim(conn, claim, deep=deep) if claim else []
        except Exception as error:
            if records and refused_rows(error):
                # A row the database will not take (whatever a partner sent back): log the
                # batch attempt by attempt so the rest lands, then claim in a turn of its own.
                # What it hands back waits for that turn (or the next, should logging fail).
                self._expired[:0] = expired
                self._handing.update(handing)
                self._answering |= answering
                await self._record_apart(records)
                _, jobs = await self._turn(claim)
                return len(records), jobs
            # Logged next turn, their claims holding meanwhile. The commit may have landed even so,
            # its answer lost: the next turn first looks which still hold their claims. Not after a
            # rollback, which wrote nothing: the transaction that went on (a partner's removal)
            # may have taken their claims, and the look would drop attempts sent and never logged.
            # Only those still in doubt from before stay so, should the turn have failed before
            # looking at them.
            self._records[:0] = records
            putback = {record.job.delivery_id for record in records}
            self._uncertain = uncertain & putback if faults.rolled_back(error) else putback
            self._expired[:0] = expired
            self._handing.update(handing)
            self._answering |= answering
            raise
        self._delivered_last = _delivering(records)
        self._answering.update(self._delivered_last)
        self.claimed += len(jobs)
        self.handed_back += len(expired)
        self.recorder.handed_back(handing)
        if expired:
            self._drained = False  # what it handed back is claimable again (a claim after it says)
        changes = settle.changes(recorded.effects)
        self._counted(records, changes, recorded.superseded)
        self._hold_back(records, changes)
        return len(records), jobs

    def _depths(self, deep: Mapping[str, float]) -> dict[str, int]:
        """Each partner a claim may fill ahead with how many times its slots: as many as it sends
        within ``AHEAD_SHARE`` of the time a claimed job has to start in, at the part of its slots
        its lane may use now (``Lanes.held_to``: less while held to a fair share). A partner whose
        depth comes to 1 is left out, as one not deep."""
        horizon = (self._lease_seconds - self._start_margin) * AHEAD_SHARE
        depths = {}
        for partner_id, seconds in deep.items():
            depth = depth_within(seconds / self.lanes.held_to(partner_id), horizon, self.depth)
            if depth > 1:
                depths[partner_id] = depth
        return depths

    async def _claim(self, conn: AsyncConnection, limit: int, *, deep: dict[str, int]) -> list[Job]:
        return await claim_due(
            conn,
            now=self.clock(),
            limit=limit,
            lease=self.lease,
            default_cap=self.settings.webhook_max_in_flight,
            keyring=self.keyring,
            holder=self.holder,
            depth=self.depth,
            deep=deep,
            max_slots=self.max_slots,
            clock=self.clock,
        )

    async def _changed_since_claim(self, conn: AsyncConnection) -> list[Job]:
        """Take back the parked jobs of partners changed since their claim (``partners.REVISED``):
        paused, disabled or removed, a circuit opened (by another worker too), a new URL, secret,
        cap or batch policy. Handed back in this turn, what is still claimable is claimed again as
        the partner now is. Only attempts let out before the turn go as they were claimed."""
        first = dict(self.lanes.first_parked())
        if not first:
            return []
        # A lane parks in claim order and a revision only grows: its first job has the oldest.
        now = await partners.revisions(conn, first)
        changed = [partner_id for partner_id, job in first.items() if now.get(partner_id) != job.revision]
        taken = [job for partner_id in changed for job in self.lanes.take_back(partner_id)]
        if taken:
            log.info(
                "partners changed since their deliveries were claimed; handing those not yet sent back",
                extra={"partners": len(changed), "deliveries": len(taken)},
            )
        return taken

    async def _still_claimed(
        self, conn: AsyncConnection, records: list[Settlement], uncertain: set[str]
    ) -> list[Settlement]:
        """``records`` less those a failed turn put back (their deliveries ``uncertain``) whose
        delivery no longer holds the claim they were made under: that turn's commit landed and only
        its answer was lost, or the delivery was settled or cancelled since. Logged again, their
        attempts would be logged twice, and counted twice against their partners' circuits."""
        unsure = [record.job.delivery_id for record in records if record.job.delivery_id in uncertain]
        if not unsure:
            return records  # dropped meanwhile (their leases ran out)
        claims = await settle.claims(conn, unsure)
        kept: list[Settlement] = []
        gone: list[Settlement] = []
        for record in records:
            job = record.job
            held = job.delivery_id not in uncertain or (job.delivery_id, job.claim_token) in claims
            (kept if held else gone).append(record)
        if gone:
            log.info(
                "attempts put back after a failed turn no longer hold their claims (its commit "
                "landed, or their deliveries were settled since); not logged again",
                extra={"attempts": len(gone)},
            )
            self._hold_back(gone, ())  # their slots are free, as if logged
        return kept

    async def _record_apart(self, records: Sequence[Settlement]) -> None:
        """Log each record in a transaction of its own; one the database refuses is tried once
        more without its response excerpt, then dropped with an error line. Should the database
        fail otherwise, the records not yet logged are kept for the next turn, as a failed turn
        keeps its own (the one whose commit failed may have landed: the next turn looks)."""
        for index, record in enumerate(records):
            for attempt in (record, record._replace(response_excerpt=None)):
                try:
                    async with self._db_lock, self.connection.transaction() as conn:
                        recorded = await settle.record(conn, [attempt], breaker=self.breaker)
                        await partners.apply(conn, recorded.effects, now=self.clock())
                except Exception as error:
                    if not refused_rows(error):
                        # Only this record's commit may have landed (a rollback wrote nothing);
                        # the records after it were never tried.
                        self._records[:0] = records[index:]
                        if not faults.rolled_back(error):
                            self._uncertain.add(record.job.delivery_id)
                        raise
                    continue
                if attempt is not record:
                    log.warning(
                        "an attempt was logged without the response excerpt the database refused",
                        extra={"delivery": record.job.delivery_id, "partner": record.job.partner_id},
                    )
                changes = settle.changes(recorded.effects)
                self._counted([attempt], changes, recorded.superseded)
                self._hold_back([attempt], changes)
                break
            else:
                log.error(
                    "an attempt could not be logged; its delivery goes out again when its claim expires",
                    extra={"delivery": record.job.delivery_id, "partner": record.job.partner_id},
                )
                self.lanes.reopen([record.job.partner_id])  # no turn will: its slot is free

    def _drop_stale_records(self) -> None:
        """Records kept through an outage are dropped once their lease ended: their deliveries are
        claimable again, so keeping them would only retry a write that can no longer settle them."""
        now = self.clock()
        stale = [record for record in self._records if record.job.claimed_until <= now]
        if stale:
            self._records = [record for record in self._records if record.job.claimed_until > now]
            self.lanes.reopen({record.job.partner_id for record in stale})  # no turn will log them
            log.warning(
                "attempts could not be logged before their claims expired", extra={"attempts": len(stale)}
            )

    def _hold_back(self, records: Sequence[Settlement], changes: Sequence[tuple[str, CircuitChange]]) -> None:
        """Hand back the parked jobs of partners these attempts stopped: a circuit opened, a
        partner disabled, or paused by its own 410 (attempts already out are not recalled); the
        others' slots held empty by failures are free again."""
        stopped = {partner_id for partner_id, change in changes if change in STOPPING}
        stopped.update(record.job.partner_id for record in records if record.outcome is AttemptOutcome.PAUSED)
        for partner_id in stopped:
            self._hand_back(self.lanes.take_back(partner_id), HandedBack.STOPPED)
        self.lanes.reopen({record.job.partner_id for record in records} - stopped)
        self._note_contention()

    def _hand_back(self, jobs: Iterable[Job], reason: HandedBack) -> None:
        """Hand ``jobs`` back unsent at the next turn, counted by ``reason`` once it commits."""
        before = len(self._expired)
        self._expired.extend(jobs)
        self._handing[reason] += len(self._expired) - before

    def _note_contention(self) -> None:
        """A line when the partners with work start wanting more attempts in flight than the lanes'
        pool (each is then held to its fair share), and one when they no longer do; at most once
        each ``CONTENTION_LINES`` (by the injected clock), should they come and go."""
        if self.lanes.contended == self._contended:
            return
        self._contended = self.lanes.contended
        if not self._contended:
            if self._contention_told:
                self._contention_told = False
                log.info("partners with work fit in this worker's senders again; no share holds them back")
            return
        now = self.clock()
        if self._contention_said is not None and now - self._contention_said < CONTENTION_LINES:
            return
        self._contention_said, self._contention_told = now, True
        log.warning(
            "partners with work want more attempts in flight than this worker gives them together "
            "(three quarters of its senders); each is held to a fair share. If they are answering, "
            "raise the worker's concurrency or run another worker",
            extra={"senders": self.concurrency, "pool": self.max_slots},
        )

    def _counted(
        self,
        records: Sequence[Settlement],
        changes: Sequence[tuple[str, CircuitChange]],
        superseded: frozenset[str],
    ) -> None:
        """Count what was committed, and hand it to the recorder (metrics, log lines)."""
        self.logged += len(records)
        self.recorder.committed(records, changes, superseded)

    # --- one attempt --------------------------------------------------------------------------

    async def attempt(self, job: Job) -> Settlement:
        """Send one claimed delivery and decide what becomes of it (nothing is stored here)."""
        attempt = await self.sender.send(
            url=job.url,
            event=job.kind,
            delivery_id=job.delivery_id,
            body=job.body,
            secrets=job.secrets,
            digests=job.digests,
        )
        return settle.decide(job, attempt, policy=self.policy, rng=self.rng, now=self.clock())
