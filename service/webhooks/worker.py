"""The delivery worker: claims due deliveries, sends them, and logs every attempt durably.

Inside ``serve`` it starts after the server does and stops before it (``service.webhooks.runtime``);
``python -m service worker`` runs it alone, for scale-out on PostgreSQL. It keeps up to
``concurrency`` attempts sending over one connection pool, each from a long-lived sender task,
with more claimed and waiting so a freed sender never waits for the database.

The continuous loop (``run``) is the only part that touches the database, one transaction per
turn: it logs and settles every attempt finished since the last turn and claims what the free
slots need, together. Under load one commit carries hundreds of attempts; an idle worker turns as
soon as something happens. It wakes when this process publishes (an ``asyncio.Event`` the publisher
sets), when another process does (PostgreSQL's NOTIFY, ``service.webhooks.notify``), when finished
attempts or free senders add up to a batch (or the worker falls idle), and every
``poll_interval`` seconds for due retries (and, on SQLite, other processes' publishes). An attempt
counts (``settled``, metrics) only once its log row is committed.

Tests drive it without a background task: ``run_once()`` claims one batch, sends it and settles
it, and ``drain()`` repeats that until nothing is due at the injected clock's time.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from service.metrics import Metrics
from service.settings import Settings
from service.webhooks import outbox
from service.webhooks.notify import Listener
from service.webhooks.outbox import AttemptRecord, Job
from service.webhooks.retry import Outcome, RetryPolicy, Verdict
from service.webhooks.sender import Attempt, Sender
from service.webhooks.ssrf import Resolve, system_resolve

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]

CONCURRENCY = 32  # attempts sending at once per worker, and connections in its pool
POLL_INTERVAL = 1.0  # seconds; bounds how late a due retry or another process's publish is seen
# DESIGN.md "Signed delivery": a claim lasts about twice the webhook timeout plus a few seconds,
# so a live worker always settles before its lease ends and a killed one's claims return soon.
LEASE_MARGIN = 5.0
# Under partial load finished attempts wait this long (seconds) to share a commit; an idle worker
# logs at once. It delays only the log row, never a delivery.
LOG_DELAY = 0.02
# Claims and log writes come in batches of BATCH x concurrency, and up to WAITING x concurrency
# claimed deliveries wait for a slot. Under a backlog the transactions run back to back, so each
# one's fixed cost (round trips, commit) is what bounds the rate: draining 20,000 deliveries here
# went from 6,400/s (PostgreSQL) and 8,500/s (SQLite) with batches of 2 x concurrency to 8,800/s
# and 9,900/s with 8 x. A waiting delivery that could no longer finish inside its lease is handed
# back instead of sent (see `_start_within`).
BATCH = 8
WAITING = 15


def lease_for(settings: Settings) -> timedelta:
    return timedelta(seconds=2 * settings.webhook_timeout + LEASE_MARGIN)


def settle(
    job: Job, attempt: Attempt, *, policy: RetryPolicy, rng: random.Random, now: datetime
) -> AttemptRecord:
    """What an attempt's answer does to its delivery: delivered, retry later, failed or paused."""
    verdict = attempt.verdict
    next_at: datetime | None = None
    if verdict is Verdict.DELIVERED:
        result = "delivered"
    elif verdict is Verdict.GONE:
        result, next_at = "paused", now  # due again the moment the partner is resumed
    else:
        delay = policy.next_delay(job.attempt, Outcome(verdict, attempt.retry_after), rng)
        if delay is None:
            result = "failed"
        else:
            result, next_at = "retry", now + timedelta(seconds=delay)
    return AttemptRecord(
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


class Worker:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        settings: Settings,
        clock: Clock,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
        resolve: Resolve = system_resolve,
        wake: asyncio.Event | None = None,
        concurrency: int = CONCURRENCY,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.engine = engine
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.rng = rng or random.Random()
        self.policy = RetryPolicy(tuple(settings.webhook_retry_schedule))
        self.lease = lease_for(settings)
        # Started by then, an attempt ends (one timeout) with a second to spare inside its lease.
        self._start_within = self.lease.total_seconds() - settings.webhook_timeout - 1
        self.concurrency = concurrency
        self.poll_interval = poll_interval
        self.wake = wake or asyncio.Event()
        self.sender = Sender(
            timeout=settings.webhook_timeout,
            allow_private=settings.webhook_allow_private_urls,
            clock=clock,
            resolve=resolve,
            limit=concurrency,
        )
        self.listener = Listener(engine, self.wake)
        self.settled = 0  # attempts logged by this worker, for benchmarks and drills
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._running = False  # the continuous loop is on: its senders take waiting deliveries
        # The continuous loop's senders: ``concurrency`` long-lived tasks, each taking the next
        # waiting delivery as soon as it finishes one (no task per attempt).
        self._senders: list[asyncio.Task[None]] = []
        self._idle: deque[asyncio.Future[None]] = deque()  # senders waiting for a delivery
        self._slots = 0  # attempts in flight, each holding a connection slot
        # Claimed, waiting for a free sender; each with the loop time by which it must have started.
        self._queue: deque[tuple[float, Job]] = deque()
        self._expired: list[Job] = []  # waited too long for a slot: handed back next turn
        self._finished: list[AttemptRecord] = []  # attempts made, not yet logged
        self._db_lock = asyncio.Lock()
        # Set while the loop waits; resolved (``_nudge``) when there is something for it to do.
        self._waiter: asyncio.Future[None] | None = None
        self._batch = BATCH * concurrency
        self._woken = False  # the last signal came from outside (wake), not from an attempt
        self._finished_since = 0.0  # loop time when `_finished` last became non-empty

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
        are then sent again (at least once).
        """
        self._stopping = True
        await self.listener.stop()
        self._nudge()
        if self._task is not None:
            await self._task
        senders = [task for task in self._senders if not task.done()]
        self._senders = []
        if senders:  # each finishes the attempt it has in flight, if any, and ends
            grace = self.settings.webhook_timeout + 1 if grace is None else grace
            _, late = await asyncio.wait(senders, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        try:
            await self._turn(claim=0)
        except Exception:
            log.exception("logging the last attempts failed; their leases will expire")
        await self.close()

    # --- storage: one transaction at a time ----------------------------------------------------

    # The worker's transactions never overlap: on SQLite two would fight over the one write lock,
    # and the loser sleeps in SQLite's busy handler (milliseconds) instead of queueing here.

    async def claim(self, limit: int) -> list[Job]:
        async with self._db_lock, self.engine.begin() as conn:
            return await outbox.claim_due(conn, now=self.clock(), limit=limit, lease=self.lease)

    async def record(self, records: Sequence[AttemptRecord]) -> None:
        """Log and settle attempts in one transaction, then count them."""
        async with self._db_lock, self.engine.begin() as conn:
            await outbox.record_attempts(conn, records)
        self._counted(records)

    async def _turn(self, *, claim: int) -> list[Job]:
        """Log what finished, hand back what expired, claim up to ``claim`` more: one transaction."""
        records, self._finished = self._finished, []
        expired, self._expired = self._expired, []
        if not records and not expired and not claim:
            return []
        try:
            async with self._db_lock, self.engine.begin() as conn:
                await outbox.record_attempts(conn, records)
                await outbox.release_claims(conn, expired, now=self.clock())
                jobs = await outbox.claim_due(
                    conn, now=self.clock(), limit=claim, lease=self.lease
                ) if claim else []  # fmt: skip
        except BaseException:
            self._finished[:0] = records  # logged next turn; their claims hold meanwhile
            self._expired[:0] = expired
            raise
        self._counted(records)
        return jobs

    def _counted(self, records: Sequence[AttemptRecord]) -> None:
        self.settled += len(records)
        for record in records:
            if self.metrics is not None:
                self.metrics.inc(self.metrics.delivery_attempts, record.outcome)
                self.metrics.attempt_seconds.observe(record.duration_ms / 1000)
            if record.outcome != "delivered" or log.isEnabledFor(logging.DEBUG):
                log.log(
                    logging.DEBUG if record.outcome == "delivered" else logging.INFO,
                    "webhook attempt",
                    extra={
                        "delivery": record.job.delivery_id,
                        "event_id": record.job.event_id,
                        "partner": record.job.partner_id,
                        "attempt": record.job.attempt,
                        "status_code": record.status_code,
                        "error_class": record.error_class,
                        "outcome": record.outcome,
                        "duration_ms": record.duration_ms,
                    },
                )

    # --- one batch at a time (tests, drills) ---------------------------------------------------

    async def run_once(self) -> int:
        """Claim one batch of due deliveries, attempt them all, settle them; how many."""
        jobs = await self.claim(self.concurrency)
        if jobs:
            await self.record(await asyncio.gather(*(self.attempt(job) for job in jobs)))
        return len(jobs)

    async def drain(self) -> int:
        """``run_once`` until nothing is due at the clock's current time; attempts made."""
        total = 0
        while count := await self.run_once():
            total += count
        return total

    async def deliver(self, job: Job) -> AttemptRecord:
        """Attempt one claimed delivery and log it."""
        record = await self.attempt(job)
        await self.record([record])
        return record

    # --- the continuous loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Turn until stopped: log finished attempts, claim for free slots, start them.

        ``concurrency`` long-lived senders (``_send``) make the attempts. Up to ``WAITING x
        concurrency`` claimed deliveries wait for one, so a sender that finishes takes the next at
        once, and claims come in batches of about ``BATCH x concurrency``. One that waited so long
        that it could not finish inside its lease is handed back unsent. Finished attempts are
        logged in batches of the same size, at once when the worker falls idle, and at most
        ``LOG_DELAY`` seconds late.

        After a claim comes back short (nothing more is due) the worker claims again only when
        woken from outside (a publish, a resume, a retry) or after ``poll_interval``.
        """
        batch = self._batch
        loop = asyncio.get_running_loop()
        last_claim = -float("inf")
        drained = False
        forwarder = loop.create_task(self._forward_wakes())
        self._running = True
        self._senders = [
            loop.create_task(self._send(), name=f"webhook-sender-{number}")
            for number in range(self.concurrency)
        ]
        try:
            while not self._stopping:
                if self._woken:
                    self._woken, drained = False, False
                if loop.time() - last_claim >= self.poll_interval:
                    drained = False
                want = (WAITING + 1) * self.concurrency - self._slots - len(self._queue)
                idle = not self._slots and not self._queue
                claim = want if not drained and (want >= batch or (want > 0 and idle)) else 0
                waiting = len(self._finished)
                late = waiting and loop.time() - self._finished_since >= LOG_DELAY
                if claim or self._expired or (waiting and (waiting >= batch or idle or late)):
                    try:
                        jobs = await self._turn(claim=claim)
                    except Exception:
                        log.exception("the outbox is unreachable; trying again shortly")
                        await asyncio.sleep(self.poll_interval)
                        continue
                    if claim:
                        last_claim, drained = loop.time(), len(jobs) < claim
                    start_by = loop.time() + self._start_within
                    self._queue.extend((start_by, job) for job in jobs)
                    self._wake_senders()
                    continue
                if waiting:
                    timeout = self._finished_since + LOG_DELAY - loop.time()
                else:
                    since = loop.time() - last_claim if drained else 0.0
                    timeout = self.poll_interval - since
                await self._pause(timeout)
        finally:
            self._running = False
            forwarder.cancel()
            while self._idle:  # idle senders end now; busy ones after their attempt (see stop)
                waiter = self._idle.popleft()
                if not waiter.done():
                    waiter.set_result(None)
            if self._queue or self._expired:
                jobs = [job for _, job in self._queue] + self._expired
                self._queue.clear()
                self._expired = []
                try:
                    async with self._db_lock, self.engine.begin() as conn:
                        await outbox.release_claims(conn, jobs, now=self.clock())
                except Exception:
                    log.exception("handing back claimed deliveries failed; their leases will expire")

    async def _pause(self, timeout: float) -> None:
        """Wait until nudged or for ``timeout`` seconds (a future and a timer: no task per wait)."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(max(timeout, 0.0), self._nudge)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _nudge(self) -> None:
        """Let the loop take a turn now, if it is waiting."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _want_turn(self) -> bool:
        """After an attempt: whether the loop has work now (see ``run``), so it is not woken for
        every attempt only to wait again."""
        finished = len(self._finished)
        if finished == 1 or finished >= self._batch:  # start the LOG_DELAY clock, or log a batch
            return True
        queued = self._slots + len(self._queue)
        return not queued or (WAITING + 1) * self.concurrency - queued >= self._batch

    async def _forward_wakes(self) -> None:
        """Turn the shared ``wake`` (set by publishers) into this loop's signal, marked external."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            self._woken = True
            self._nudge()

    def _wake_senders(self) -> None:
        """Wake an idle sender for each waiting delivery (busy ones take the next when done)."""
        for _ in range(len(self._queue)):
            while self._idle and self._idle[0].done():
                self._idle.popleft()  # its sender was cancelled
            if not self._idle:
                return
            self._idle.popleft().set_result(None)

    async def _send(self) -> None:
        """One sender: take the next waiting delivery, attempt it, hand the record over; repeat.

        Ends when the loop stops: at once when idle, otherwise after the attempt in flight.
        """
        loop = asyncio.get_running_loop()
        queue = self._queue
        while self._running and not self._stopping:
            if not queue:
                waiter: asyncio.Future[None] = loop.create_future()
                self._idle.append(waiter)
                await waiter
                continue
            start_by, job = queue.popleft()
            if loop.time() > start_by:
                self._expired.append(job)  # its lease could run out mid-attempt: never send it
                self._nudge()
                continue
            self._slots += 1
            try:
                record = await self.attempt(job)
            except Exception:
                # Never expected (the sender answers every failure with an Attempt); the claim
                # holds until its lease ends and the delivery goes out again then.
                log.exception("attempting a delivery failed", extra={"delivery": job.delivery_id})
                self._slots -= 1
                self._nudge()
                continue
            self._slots -= 1
            # Appended only now: `_turn` swaps the list while attempts run.
            if not self._finished:
                self._finished_since = loop.time()
            self._finished.append(record)
            if self._want_turn():
                self._nudge()

    # --- one attempt --------------------------------------------------------------------------

    async def attempt(self, job: Job) -> AttemptRecord:
        """Send one claimed delivery and decide what becomes of it (nothing is stored here)."""
        attempt = await self.sender.send(
            url=job.url,
            event=job.kind,
            delivery_id=job.delivery_id,
            body=job.body,
            secrets=job.secrets,
        )
        return settle(job, attempt, policy=self.policy, rng=self.rng, now=self.clock())
