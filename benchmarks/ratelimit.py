"""The in-memory limiter against limits' own asyncio ``MemoryStorage``, by clients in the window;
with ``--redis URL``, the Redis limiter's batched hits against limits' own call per hit.

    python -m benchmarks.ratelimit [--hits 40000] [--clients 1 1000 10000 50000] [--rounds 3]
                                   [--redis redis://127.0.0.1:6379/0] [--redis-hits 4000]

For each number of distinct clients, the same hits (``5/minute``, clients in turn, one event-loop
turn every 16 hits, as a busy server interleaves requests) go through limits'
``SlidingWindowCounterRateLimiter`` on each storage, alternating the two (ABBA) for ``--rounds``
rounds, and the medians are printed: microseconds per hit and the ratio baseline / ours. The
baseline is the library's ``memory://`` storage, the one ``service.ratelimit.WindowCounters``
replaces; the two make the same decisions (``tests/test_ratelimit.py``).

On Redis, the same hits (a limit that never trips, 1,000 clients in turn) go ``in flight`` at a
time, as concurrent requests do, either through limits' ``SlidingWindowCounterRateLimiter`` (one
script call a hit) or through ``service.ratelimit.BatchedHits`` (the hits in flight share script
calls), ABBA for ``--rounds``; printed are the medians of this process's CPU per hit (the Redis
server's own CPU is not counted) and the ratio. This is the figure that justifies BatchedHits
reading limits' internals (and pinning limits exactly).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from limits import parse
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from service.ratelimit import RateLimiter, WindowCounters
from service.settings import Settings
from tests.scratch import redis_keys

LIMIT = "5/minute"
TURN_EVERY = 16  # hits between event-loop turns
IN_FLIGHT = (1, 8, 32)  # concurrent hits on Redis: alone, a light load, a busy server
REDIS_CLIENTS = 1_000
NEVER_TRIPS = "100000000/minute"  # every hit goes the whole way: counted, never refused


@dataclass(frozen=True, slots=True)
class Outcome:
    clients: int
    baseline_us: float
    ours_us: float

    @property
    def ratio(self) -> float:
        return self.baseline_us / self.ours_us


async def _per_hit(make: Callable[[], Storage], clients: int, hits: int) -> float:
    strategy = SlidingWindowCounterRateLimiter(make())
    item = parse(LIMIT)
    names = [f"198.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}" for n in range(clients)]
    started = time.perf_counter()
    for n in range(hits):
        await strategy.hit(item, "waitlist", names[n % clients])
        if n % TURN_EVERY == 0:
            await asyncio.sleep(0)
    return (time.perf_counter() - started) / hits * 1e6


def measure(clients: int, hits: int, rounds: int) -> Outcome:
    hits = max(hits, clients)  # every client at least once
    baseline: list[float] = []
    ours: list[float] = []
    for index in range(rounds):
        order = [(baseline, MemoryStorage), (ours, WindowCounters)]
        for runs, make in order if index % 2 == 0 else order[::-1]:
            runs.append(asyncio.run(_per_hit(make, clients, hits)))
    return Outcome(clients, statistics.median(baseline), statistics.median(ours))


def render(outcomes: list[Outcome]) -> str:
    lines = [
        "clients  limits MemoryStorage us/hit  WindowCounters us/hit  ratio",
        "-------  ---------------------------  ---------------------  -----",
    ]
    for outcome in outcomes:
        lines.append(
            f"{outcome.clients:>7,}  {outcome.baseline_us:>27.1f}  {outcome.ours_us:>21.1f}  "
            f"{outcome.ratio:>5.1f}"
        )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class RedisOutcome:
    in_flight: int
    per_call_us: float
    batched_us: float

    @property
    def ratio(self) -> float:
        return self.per_call_us / self.batched_us


async def _redis_per_hit(url: str, batched: bool, in_flight: int, hits: int) -> float:
    """Client CPU microseconds a hit, ``in_flight`` hits at a time, on keys of this run's own."""
    prefix = f"bench-limits-{uuid.uuid4().hex[:12]}"
    settings = Settings(rate_limit_storage=url, rate_limit_key_prefix=prefix, waitlist_rate_limit=NEVER_TRIPS)
    limiter = RateLimiter(settings)
    limiter.start()
    item = limiter.items[0]
    names = [f"198.51.{n >> 8 & 255}.{n & 255}" for n in range(REDIS_CLIENTS)]

    async def hit(n: int) -> None:
        if batched:
            await limiter.hit(names[n % REDIS_CLIENTS])
        else:
            await limiter.strategy.hit(item, limiter.scope, names[n % REDIS_CLIENTS])

    try:
        await hit(0)  # connect and load the scripts outside the measurement
        started = time.process_time()
        for first in range(0, hits, in_flight):
            await asyncio.gather(*(hit(n) for n in range(first, first + in_flight)))
        return (time.process_time() - started) / hits * 1e6
    finally:
        await limiter.close()
        await redis_keys(url, prefix, delete=True)


def measure_redis(url: str, in_flight: int, hits: int, rounds: int) -> RedisOutcome:
    per_call: list[float] = []
    batched: list[float] = []
    for index in range(rounds):
        order = [(per_call, False), (batched, True)]
        for runs, through_batches in order if index % 2 == 0 else order[::-1]:
            runs.append(asyncio.run(_redis_per_hit(url, through_batches, in_flight, hits)))
    return RedisOutcome(in_flight, statistics.median(per_call), statistics.median(batched))


def render_redis(outcomes: list[RedisOutcome]) -> str:
    lines = [
        "in flight  limits, a call a hit us/hit  BatchedHits us/hit  ratio",
        "---------  ---------------------------  ------------------  -----",
    ]
    for outcome in outcomes:
        lines.append(
            f"{outcome.in_flight:>9}  {outcome.per_call_us:>27.1f}  {outcome.batched_us:>18.1f}  "
            f"{outcome.ratio:>5.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ratelimit", description=__doc__)
    parser.add_argument("--hits", type=int, default=40_000, help="hits per run")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 1_000, 10_000, 50_000])
    parser.add_argument("--rounds", type=int, default=3, help="runs per storage (medians)")
    parser.add_argument("--redis", metavar="URL", help="also measure the Redis limiter on this server")
    parser.add_argument("--redis-hits", type=int, default=4_000, help="hits per Redis run")
    args = parser.parse_args(argv)
    print(render([measure(clients, args.hits, args.rounds) for clients in args.clients]))
    print(f"\n{LIMIT}, one event-loop turn every {TURN_EVERY} hits, ABBA x {args.rounds} (medians)")
    if args.redis:
        outcomes = [measure_redis(args.redis, n, args.redis_hits, args.rounds) for n in IN_FLIGHT]
        print()
        print(render_redis(outcomes))
        print(
            f"\n{args.redis}: client CPU a hit, {REDIS_CLIENTS:,} clients, redis-py, "
            f"ABBA x {args.rounds} (medians)"
        )


if __name__ == "__main__":
    main()
