"""The in-memory limiter against limits' own asyncio ``MemoryStorage``, by clients in the window.

    python -m benchmarks.ratelimit [--hits 40000] [--clients 1 1000 10000 50000] [--rounds 3]

For each number of distinct clients, the same hits (``5/minute``, clients in turn, one event-loop
turn every 16 hits, as a busy server interleaves requests) go through limits'
``SlidingWindowCounterRateLimiter`` on each storage, alternating the two (ABBA) for ``--rounds``
rounds, and the medians are printed: microseconds per hit and the ratio baseline / ours. The
baseline is the library's ``memory://`` storage, the one ``service.ratelimit.WindowCounters``
replaces; the two make the same decisions (``tests/test_ratelimit.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from limits import parse
from limits.aio.storage import MemoryStorage, Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from service.ratelimit import WindowCounters

LIMIT = "5/minute"
TURN_EVERY = 16  # hits between event-loop turns


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ratelimit", description=__doc__)
    parser.add_argument("--hits", type=int, default=40_000, help="hits per run")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 1_000, 10_000, 50_000])
    parser.add_argument("--rounds", type=int, default=3, help="runs per storage (medians)")
    args = parser.parse_args(argv)
    print(render([measure(clients, args.hits, args.rounds) for clients in args.clients]))
    print(f"\n{LIMIT}, one event-loop turn every {TURN_EVERY} hits, ABBA x {args.rounds} (medians)")


if __name__ == "__main__":
    main()
