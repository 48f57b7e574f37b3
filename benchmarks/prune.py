"""Pruning beside delivery: the drain rate of a backlog while ``prune`` runs, as a ratio of without.

Each round starts from an empty database holding ``--settled`` settled deliveries older than the
retention (with their attempts and events, naming ``--rooms`` rooms; inserted in bulk, not timed)
and a backlog of ``--backlog`` pending deliveries for one partner on a loopback receiver (the
receiver of ``benchmarks.delivery``). The real ``Worker`` drains the backlog; once it has settled
a tenth of it, the measured window opens:

- with pruning: the worker's own ``prune()`` runs (what it does hourly: batches of 500 under its
  transaction lock, working ``--duty`` of the time); the window lasts while it runs;
- without: nothing else runs; the window lasts as long as the last pruning did.

Either window also closes when the backlog is drained (the row is marked: pruning went on after
it). The rate is the deliveries settled in the window over its length. Rounds alternate (with, without)
so load from elsewhere on the machine hits both; the ratio of the medians is the figure (aim at
least 0.9).

    python -m benchmarks.prune [--settled 100000] [--backlog 40000] [--rounds 3] [--duty 0.2]
                               [--database-url postgresql://user@host/db]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import delivery
from service.webhooks.retention import DUTY

RATIO_TARGET = 0.9
CHUNK = 5000  # rows per bulk insert
CONCURRENCY = 32


@dataclass(frozen=True, slots=True)
class Round:
    pruning: bool
    rate: float  # deliveries settled per second in the window
    window: float  # seconds
    pruned: int  # settled deliveries the pruning deleted (0 without)
    prune_seconds: float  # how long the pruning took (0 without)
    ran_out: bool  # the backlog was drained before the pruning ended: the window closed then


async def settled_rows(engine: Any, count: int, rooms: int) -> None:
    """``count`` delivered deliveries 40 days old, each with one attempt and its own event."""
    from sqlalchemy import insert, select

    from service.db.tables import deliveries, delivery_attempts, events, partners

    old = datetime.now(UTC) - timedelta(days=40)
    async with engine.connect() as conn:
        partner_id = await conn.scalar(select(partners.c.id))
    for start in range(0, count, CHUNK):
        numbers = range(start, min(count, start + CHUNK))
        event_rows, delivery_rows, attempt_rows = [], [], []
        for n in numbers:
            event_id, delivery_id = f"evt_old_{n:07d}", f"dlv_old_{n:07d}"
            room = f"https://launchrooms.example/rooms/room-{n % rooms}"
            payload = {"event": "room.trending", "eventId": event_id, "slug": f"room-{n % rooms}",
                       "roomUrl": room, "metric": "visits", "value": n, "window": "24h"}  # fmt: skip
            event_rows.append({"id": event_id, "kind": "room.trending", "dedupe_key": event_id,
                               "payload": json.dumps(payload), "occurred_at": old,
                               "created_at": old})  # fmt: skip
            delivery_rows.append({"id": delivery_id, "event_id": event_id, "partner_id": partner_id,
                                  "status": "delivered", "attempts": 1, "next_attempt_at": old,
                                  "created_at": old, "updated_at": old, "delivered_at": old})  # fmt: skip
            attempt_rows.append({"delivery_id": delivery_id, "event_id": event_id, "event": "room.trending",
                                 "partner_id": partner_id, "attempt": 1, "started_at": old,
                                 "duration_ms": 3, "status_code": 200, "outcome": "delivered"})  # fmt: skip
        async with engine.begin() as conn:
            await conn.execute(insert(events), event_rows)
            await conn.execute(insert(deliveries), delivery_rows)
            await conn.execute(insert(delivery_attempts), attempt_rows)


async def one_round(
    args: argparse.Namespace, base: str, database_url: str, pruning: bool, window: float
) -> Round:
    engine, settings = await delivery.setup(database_url, base)
    try:
        await settled_rows(engine, args.settled, args.rooms)
        await delivery.backlog(engine, args.backlog)
        worker = delivery._worker(engine, settings, CONCURRENCY)
        await worker.start()
        try:
            while worker.logged < args.backlog // 10:
                await asyncio.sleep(0.005)
            before, started = worker.logged, time.perf_counter()
            pruning_task = asyncio.create_task(worker.prune(args.duty)) if pruning else None

            # The window closes when the pruning ends (or, without, after as long as the last
            # pruning took), or when the backlog is drained, whichever comes first.
            def window_open() -> bool:
                if pruning_task is not None:
                    return not pruning_task.done()
                return time.perf_counter() - started < window

            while worker.logged < args.backlog and window_open():
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - started
            settled = worker.logged - before
            ran_out = worker.logged >= args.backlog
            pruned, prune_seconds = 0, 0.0
            if pruning_task is not None:
                result = await pruning_task
                assert result is not None, "the pruning failed"
                pruned = result.deliveries
                prune_seconds = time.perf_counter() - started
        finally:
            await worker.stop()
    finally:
        await engine.dispose()  # type: ignore[attr-defined]
    return Round(pruning, settled / elapsed, elapsed, pruned, prune_seconds, ran_out)


async def run(args: argparse.Namespace, base: str, database_url: str) -> int:
    from service import collector

    collector.tune()
    rounds: list[Round] = []
    window = 1.0
    for _ in range(args.rounds):
        with_pruning = await one_round(args, base, database_url, True, window)
        window = with_pruning.prune_seconds
        rounds += [with_pruning, await one_round(args, base, database_url, False, window)]
    backend = "PostgreSQL" if database_url.startswith("postgres") else "SQLite"
    print(f"{args.settled} settled deliveries past the retention ({args.rooms} rooms), duty {args.duty:g}, "
          f"backlog {args.backlog} pending, concurrency {CONCURRENCY}, {backend}; "
          "rounds alternate with/without pruning")  # fmt: skip
    print("round  pruning  window s  drained/s  pruned")
    for number, r in enumerate(rounds):
        note = "  (window closed when the backlog ran out)" if r.ran_out else ""
        print(f"{number // 2 + 1:5d}  {'yes' if r.pruning else 'no':>7}  {r.window:8.2f}  {r.rate:9.0f}  "
              f"{r.pruned:6d}{note}")  # fmt: skip
    with_rate = statistics.median(r.rate for r in rounds if r.pruning)
    without_rate = statistics.median(r.rate for r in rounds if not r.pruning)
    ratio = with_rate / without_rate if without_rate else float("nan")  # nothing drained: too small a run
    prune_rate = statistics.median(r.pruned / r.prune_seconds for r in rounds if r.pruning)
    print(f"median drain rate with pruning {with_rate:.0f}/s, without {without_rate:.0f}/s: "
          f"ratio {ratio:.2f} (target >= {RATIO_TARGET}); pruned {prune_rate:.0f} deliveries/s")  # fmt: skip
    ok = ratio >= RATIO_TARGET
    print("PASS" if ok else "BELOW TARGET")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.prune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--settled", type=int, default=100_000, help="settled deliveries to prune")
    parser.add_argument("--rooms", type=int, default=1000, help="rooms their events name")
    parser.add_argument("--backlog", type=int, default=40_000, help="pending deliveries draining meanwhile")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of rounds, with and without pruning")
    parser.add_argument("--duty", type=float, default=DUTY, help="share of the time pruning works")
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    args = parser.parse_args(argv)
    from benchmarks.servers import free_port

    with tempfile.TemporaryDirectory() as scratch, delivery.receiver(free_port()) as base:
        database_url = args.database_url or f"sqlite:///{Path(scratch) / 'bench.db'}"
        return asyncio.run(run(args, base, database_url))


if __name__ == "__main__":
    sys.exit(main())
