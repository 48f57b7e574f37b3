"""Waitlist registrations against a bare Sanic handler: valid, unique, every write committed.

Starts the service (``python -m service serve --no-worker``) on a database of its own with the rate
limiter in the path but set never to trip, and a baseline app answering ``POST /constant`` with as
many bytes as the service's answer. Then, for each scenario, the same load on both, alternating
baseline and service (ABBA) for ``--rounds`` rounds, and prints medians: requests/s, p50 and p99,
the throughput ratio (the target is at least 0.5 of the baseline), server CPU per request (which
the load generator's speed cannot distort) and the server family's peak memory.

- ``unique``: every request registers a new address (wrk thread id and counter, and a token per
  run): the insert path with its group commit. After each run the rows the database gained are
  counted: every 200 must be a committed row. wrk stops with some requests in flight; those may be
  committed without the answer being read, so the check is 200s <= rows <= 200s + in flight.
- ``repeated``: eight addresses over and over: the upsert path (one row each, updated).
- ``invalid``: a malformed address: validation and the 400 error document, nothing stored.

    python -m benchmarks.waitlist [--duration 3] [--rounds 4] [--concurrency 32] [--workers 1]
                                  [--database-url postgresql://...] [--rate-limit-storage redis://...]
                                  [--only unique]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks import compare, load, report, servers

TARGET = 0.5  # the bar: a durable, validated, rate-limited write at half a bare handler's rate
PATH = "/api/waitlist"
JSON = {"Content-Type": "application/json"}
# The limiter stays in the path (every request counts against it) but never answers 429.
NEVER_TRIPS = "100000000/minute"
REPEATED_ADDRESSES = 8  # few enough that nearly every request updates an existing row
SETTLE_SECONDS = 5.0  # at most this long for writes in flight at the end of a run to land


def unique_bodies(token: str) -> load.Bodies:
    """A new address for every request: run token, thread (or connection) number and counter."""
    return load.Bodies(
        lua=(
            f"return string.format('{{\"email\":\"b{token}-%d-%d@bench.example\","
            f"\"intent\":\"member\"}}', thread, n)"
        ),
        python=lambda thread, n: (
            f'{{"email":"b{token}-{thread}-{n}@bench.example","intent":"member"}}'.encode()
        ),
    )


def repeated_bodies(token: str) -> load.Bodies:
    """The same few addresses over and over, with a project, so each repeat is an update."""
    return load.Bodies(
        lua=(
            "local k = n % " + str(REPEATED_ADDRESSES) + "\n"
            "return string.format('{\"email\":\"repeat-%d@bench.example\",\"intent\":\"claim\","
            "\"project\":\"Bench %d\"}', k, k)"
        ),
        python=lambda thread, n: (
            f'{{"email":"repeat-{n % REPEATED_ADDRESSES}@bench.example","intent":"claim",'
            f'"project":"Bench {n % REPEATED_ADDRESSES}"}}'.encode()
        ),
    )


def invalid_bodies(token: str) -> load.Bodies:
    return load.Bodies.constant(b'{"email":"not-an-address","intent":"member"}')


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str  # the name ``--only`` takes
    name: str
    expect: int
    bodies: Callable[[str], load.Bodies]  # a run token in, the run's bodies out
    unique: bool = False  # every 200 is a new row: hold the database to the answers


SCENARIOS = (
    Scenario("unique", "POST /api/waitlist (unique)", 200, unique_bodies, unique=True),
    Scenario("repeated", "POST /api/waitlist (repeated)", 200, repeated_bodies),
    Scenario("invalid", "POST /api/waitlist (invalid, 400)", 400, invalid_bodies),
)


# --- the database, held to the answers ----------------------------------------------------------


async def _count(database_url: str) -> int:
    from service.db.engine import create_engine
    from service.db.registrations import count_registrations

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return await count_registrations(conn)
    finally:
        await engine.dispose()


def count_rows(database_url: str) -> int:
    return asyncio.run(_count(database_url))


def settled_rows(database_url: str) -> int:
    """The row count once it stops moving (writes in flight when a run stopped have landed)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    last = count_rows(database_url)
    while time.monotonic() < deadline:
        time.sleep(0.2)  # polling another process's commits
        now = count_rows(database_url)
        if now == last:
            return now
        last = now
    return last


@dataclass(slots=True)
class Ledger:
    """Unique-registration runs summed up: what the client saw against what the database holds."""

    answered_ok: int = 0  # 200 answers the load generator read
    in_flight: int = 0  # requests sent but unanswered when the run stopped
    committed: int = 0  # rows the database gained

    @property
    def holds(self) -> bool:
        return self.answered_ok <= self.committed <= self.answered_ok + self.in_flight

    def describe(self) -> str:
        verdict = "every 200 is a committed row" if self.holds else "MISMATCH"
        extra = self.committed - self.answered_ok
        return (
            f"{self.committed:,} rows committed for {self.answered_ok:,} answers 200 "
            f"({extra:+,} against {self.in_flight:,} requests in flight at the cut-off): {verdict}"
        )


# --- one scenario -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    scenario: Scenario
    service: compare.Measured
    baseline: compare.Measured
    ledger: Ledger | None


def probe(base: str, scenario: Scenario) -> int:
    """Bytes in the service's answer to one request of ``scenario`` (the baseline answers as many)."""
    body = scenario.bodies("probe").python(0, 0)
    # ``base`` is only ever the loopback service this run started.
    request = urllib.request.Request(base + PATH, data=body, headers=JSON, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback only
            status, answer = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, answer = error.code, error.read()
    if status != scenario.expect:
        raise compare.MeasureError(f"{scenario.name}: the probe got {status}: {answer[:200]!r}")
    return len(answer)


def run_scenario(
    scenario: Scenario,
    *,
    service: tuple[str, int],
    baseline: tuple[str, int],
    database_url: str,
    duration: float,
    concurrency: int,
    rounds: int,
    use_wrk: bool = True,
) -> Outcome:
    """ABBA rounds of ``scenario``; ``service`` and ``baseline`` are (base URL, pid)."""
    ledger = Ledger() if scenario.unique else None

    def target(base: str, pid: int, path: str) -> compare.Target:
        return compare.Target(
            base + path,
            pid,
            method="POST",
            headers=JSON,
            expect=scenario.expect,
            bodies=lambda: scenario.bodies(uuid.uuid4().hex[:10]),
            use_wrk=use_wrk,
        )

    service_target = target(*service, PATH)
    baseline_target = compare.Target(
        baseline[0] + "/constant",
        baseline[1],
        method="POST",
        headers=JSON,
        bodies=service_target.bodies,
        use_wrk=use_wrk,
    )

    def on_service() -> compare.Measured:
        before = settled_rows(database_url) if ledger is not None else 0
        measured = compare.measure(service_target, duration=duration, concurrency=concurrency)
        if ledger is not None and measured.result is not None:
            ledger.committed += settled_rows(database_url) - before
            ledger.answered_ok += measured.result.answered.get(200, 0)
            ledger.in_flight += measured.result.unanswered
        return measured

    def on_baseline() -> compare.Measured:
        return compare.measure(baseline_target, duration=duration, concurrency=concurrency)

    service_runs, baseline_runs = compare.alternate(on_service, on_baseline, rounds)
    return Outcome(scenario, compare.median(service_runs), compare.median(baseline_runs), ledger)


def run_all(
    scenarios: Sequence[Scenario],
    *,
    base: str,
    pid: int,
    database_url: str,
    workers: int,
    duration: float,
    concurrency: int,
    rounds: int,
    use_wrk: bool = True,
) -> list[Outcome]:
    """Every scenario against the running service at ``base``, each with a baseline of its size."""
    outcomes = []
    for scenario in scenarios:
        size = probe(base, scenario)
        port = servers.free_port()
        with servers.baseline(port, size, workers=workers) as bare:
            outcomes.append(
                run_scenario(
                    scenario,
                    service=(base, pid),
                    baseline=(f"http://{servers.HOST}:{port}", bare.pid),
                    database_url=database_url,
                    duration=duration,
                    concurrency=concurrency,
                    rounds=rounds,
                    use_wrk=use_wrk,
                )
            )
    return outcomes


def row(outcome: Outcome, storage: str, workers: int) -> report.Row:
    note = outcome.ledger.describe() if outcome.ledger is not None else ""
    return report.Row.compare(outcome.scenario.name, storage, str(workers), outcome.service,
                              outcome.baseline, note=note)  # fmt: skip


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory() as scratch:
        yield f"sqlite:///{Path(scratch) / 'bench.db'}"


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.waitlist",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=4, help="runs of each side, ABBA order")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="server processes (baseline too)")
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument("--rate-limit-storage", default="memory://")
    parser.add_argument("--only", choices=[s.key for s in SCENARIOS], action="append")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    parser.add_argument("--no-wrk", action="store_true", help="the aiohttp client even with wrk")
    args = parser.parse_args()
    scenarios = [s for s in SCENARIOS if not args.only or s.key in args.only]
    env = {
        "SERVICE_WAITLIST_RATE_LIMIT": NEVER_TRIPS,
        "SERVICE_RATE_LIMIT_STORAGE": args.rate_limit_storage,
        "SERVICE_RATE_LIMIT_KEY_PREFIX": f"bench-{uuid.uuid4().hex[:12]}",
    }
    with _database(args.database_url) as database_url:
        port = servers.free_port()
        with servers.service(port, database_url, workers=args.workers, env=env) as process:
            outcomes = run_all(
                scenarios,
                base=f"http://{servers.HOST}:{port}",
                pid=process.pid,
                database_url=database_url,
                workers=args.workers,
                duration=args.duration,
                concurrency=args.concurrency,
                rounds=args.rounds,
                use_wrk=not args.no_wrk,
            )
    storage = "PostgreSQL" if database_url.startswith("postgres") else "SQLite"
    rows = [row(outcome, storage, args.workers) for outcome in outcomes]
    if args.json:
        for one in rows:
            print(json.dumps(one.as_dict()))
    else:
        print(report.render(rows, markdown=args.markdown))
        tool = outcomes[0].service.tool if outcomes else "-"
        print(f"\nload: {tool}, {args.concurrency} connections, {args.duration:g} s x {args.rounds} runs "
              f"per side, ABBA (medians); target ratio >= {TARGET}")  # fmt: skip
    ledgers = [outcome.ledger for outcome in outcomes if outcome.ledger is not None]
    return 0 if all(ledger.holds for ledger in ledgers) else 1


if __name__ == "__main__":
    sys.exit(main())
