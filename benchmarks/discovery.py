"""Discovery routes against a bare Sanic handler: the target is at least 0.9 of the baseline.

Starts the service (``python -m service serve``, one process, no delivery worker, a temporary
SQLite file) and one baseline app per scenario answering as many constant bytes as the document
(none for the 304), then drives them with the same load, alternating baseline and service for
``--rounds`` rounds so a noisy neighbour hurts both alike. Two ratios are printed, from medians:

- throughput: service requests/s over baseline requests/s;
- efficiency: baseline server CPU per request over service server CPU per request. This one does
  not depend on how fast the load generator is, so it still shows what a route costs when the
  client cannot saturate the server.

With two or more CPUs the servers are pinned to one CPU and the load generator to the others, so
they do not take turns on the same core.

A second table times the same routes in-process through Sanic's ASGI interface (no sockets, no
load generator): CPU microseconds per request of the service's route and of the baseline handler,
interleaved in one process. On a busy or small machine, where loopback figures swing with other
work, this is the steadiest view of what the route itself adds.

    python -m benchmarks.discovery [--duration 3] [--rounds 4] [--concurrency 32] [--verbose]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import load, servers

TARGET = 0.9  # the bar: a read-only document costs at most ~10% more than constant bytes


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    path: str
    conditional: bool = False  # send If-None-Match with the current ETag: a 304 revalidation


SCENARIOS = (
    Scenario("GET /llms.txt", "/llms.txt"),
    Scenario("GET /api/v1/webhooks/events", "/api/v1/webhooks/events"),
    Scenario("GET /llms.txt (304)", "/llms.txt", conditional=True),
)


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    pid: int
    headers: dict[str, str]
    expect: int


@dataclass(frozen=True, slots=True)
class Measured:
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_us: float | None  # server CPU per request, microseconds
    tool: str


def _measure(target: Target, args: argparse.Namespace) -> Measured:
    before = servers.cpu_seconds(target.pid)
    result = load.run(
        target.url,
        headers=target.headers,
        concurrency=args.concurrency,
        duration=args.duration,
        expect=target.expect,
    )
    after = servers.cpu_seconds(target.pid)
    if result.errors:
        raise RuntimeError(f"{target.url}: {result.errors} answers were not {target.expect}")
    cpu = None
    if before is not None and after is not None and result.requests:
        # The warm-up's requests used CPU too: count them at the measured rate.
        served = result.requests * (1 + load.WARMUP / result.seconds)
        cpu = (after - before) / served * 1e6
    return Measured(result.rps, result.p50_ms, result.p99_ms, cpu, result.tool)


def _median(runs: list[Measured]) -> Measured:
    cpus = [run.cpu_us for run in runs if run.cpu_us is not None]
    return Measured(
        rps=statistics.median(run.rps for run in runs),
        p50_ms=statistics.median(run.p50_ms for run in runs),
        p99_ms=statistics.median(run.p99_ms for run in runs),
        cpu_us=statistics.median(cpus) if cpus else None,
        tool=runs[0].tool,
    )


def _probe(url: str) -> tuple[str, int]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback only
        return response.headers["ETag"], len(response.read())


def _pin(pids: list[int]) -> bool:
    """Servers (every process of each) on the last CPU, this process and its load generator on
    the rest; a Linux-only nicety, skipped where affinity or /proc is unavailable."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2 or servers.cpu_seconds(os.getpid()) is None:
        return False
    for pid in pids:
        for member in servers.family(pid):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(member, {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))
    return True


def run(args: argparse.Namespace) -> tuple[list[tuple[Scenario, Measured, Measured]], bool]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        port = servers.free_port()
        service = stack.enter_context(servers.service(port, Path(tmp) / "bench.db"))
        base = f"http://{servers.HOST}:{port}"
        pairs: list[tuple[Scenario, Target, Target]] = []
        for scenario in SCENARIOS:
            etag, size = _probe(base + scenario.path)
            baseline_port = servers.free_port()
            bare = stack.enter_context(servers.baseline(baseline_port, 0 if scenario.conditional else size))
            reference = Target(f"http://{servers.HOST}:{baseline_port}/constant", bare.pid, {}, 200)
            measured = Target(
                base + scenario.path,
                service.pid,
                {"If-None-Match": etag} if scenario.conditional else {},
                304 if scenario.conditional else 200,
            )
            pairs.append((scenario, measured, reference))
        pinned = _pin([service.pid, *(reference.pid for _, _, reference in pairs)])
        runs: dict[str, tuple[list[Measured], list[Measured]]] = {s.name: ([], []) for s in SCENARIOS}
        for round_number in range(args.rounds):
            for scenario, measured, reference in pairs:
                service_runs, baseline_runs = runs[scenario.name]
                # ABBA order: whatever the run before leaves behind falls on both sides alike.
                order = [(reference, baseline_runs), (measured, service_runs)]
                for target, into in order if round_number % 2 == 0 else reversed(order):
                    into.append(_measure(target, args))
                    if args.verbose:
                        print(f"  {target.url:<48} {into[-1]}", file=sys.stderr)
    rows = [
        (scenario, _median(runs[scenario.name][0]), _median(runs[scenario.name][1]))
        for scenario, _, _ in pairs
    ]
    return rows, pinned


# --- in-process, through ASGI -------------------------------------------------------------------


async def _asgi_started(app: Any) -> None:
    """Run the app's ASGI lifespan start-up (its before_server_start listeners) and return."""
    messages: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    await messages.put({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"].startswith("lifespan.startup"):
            started.set()

    asyncio.get_running_loop().create_task(app({"type": "lifespan"}, messages.get, send))
    await started.wait()


async def _asgi_cost(app: Any, path: str, headers: list[tuple[bytes, bytes]], requests: int) -> float:
    """CPU microseconds per request for ``requests`` GETs of ``path``, answers discarded."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": (servers.HOST, 50000),
        "server": (servers.HOST, 8000),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    started = time.process_time()
    for _ in range(requests):
        await app(scope, receive, send)
    return (time.process_time() - started) / requests * 1e6


async def _in_process(rounds: int, requests: int, database: Path) -> list[tuple[str, float, float]]:
    from sanic import Sanic

    from benchmarks.baseline import create_app as create_baseline
    from service.app import create_app
    from service.db.engine import migrate_async
    from service.settings import Settings

    Sanic.test_mode = True  # several apps in one process
    await migrate_async(f"sqlite:///{database}")
    service = create_app(Settings(database_url=f"sqlite:///{database}"), name="bench_service")
    await _asgi_started(service)
    rows: list[tuple[str, float, float]] = []
    for scenario in SCENARIOS:
        document = service.ctx.discovery.documents[scenario.path]
        headers = [(b"if-none-match", document.etag.encode())] if scenario.conditional else []
        bare = create_baseline(0 if scenario.conditional else len(document.body), name=f"bench_{len(rows)}")
        await _asgi_started(bare)
        costs: tuple[list[float], list[float]] = ([], [])
        for _ in range(rounds):
            costs[1].append(await _asgi_cost(bare, "/constant", [], requests))
            costs[0].append(await _asgi_cost(service, scenario.path, headers, requests))
        rows.append((scenario.name, statistics.median(costs[0]), statistics.median(costs[1])))
    return rows


def in_process(rounds: int, requests: int) -> list[tuple[str, float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(_in_process(rounds, requests, Path(tmp) / "in-process.db"))


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}"


def report(rows: list[tuple[Scenario, Measured, Measured]], pinned: bool, args: argparse.Namespace) -> str:
    header = (
        f"{'scenario':<30} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'cpu us':>7} | "
        f"{'base req/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'cpu us':>7} | "
        f"{'throughput':>10} {'efficiency':>10}"
    )
    lines = [header, "-" * len(header)]
    for scenario, service, base in rows:
        lines.append(
            f"{scenario.name:<30} {service.rps:>8,.0f} {service.p50_ms:>7.2f} {service.p99_ms:>7.2f} "
            f"{service.cpu_us or 0:>7.1f} | {base.rps:>10,.0f} {base.p50_ms:>7.2f} {base.p99_ms:>7.2f} "
            f"{base.cpu_us or 0:>7.1f} | {_ratio(service.rps, base.rps):>10} "
            f"{_ratio(base.cpu_us, service.cpu_us):>10}"
        )
    tool = rows[0][1].tool if rows else "-"
    lines.append(
        f"load: {tool}, {args.concurrency} connections, {args.duration:g} s x {args.rounds} rounds "
        f"(medians); servers pinned: {'yes' if pinned else 'no'}; target ratio >= {TARGET}"
    )
    return "\n".join(lines)


def report_in_process(rows: list[tuple[str, float, float]], rounds: int, requests: int) -> str:
    header = f"{'in-process (ASGI)':<30} {'cpu us':>7} | {'base cpu us':>11} | {'efficiency':>10}"
    lines = [header, "-" * len(header)]
    for name, service, base in rows:
        lines.append(f"{name:<30} {service:>7.2f} | {base:>11.2f} | {_ratio(base, service):>10}")
    lines.append(f"{requests} requests x {rounds} rounds (medians), one process, no sockets")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.discovery", description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per run")
    parser.add_argument("--rounds", type=int, default=4, help="baseline/service alternations")
    parser.add_argument("--verbose", action="store_true", help="print every run to stderr")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=20_000, help="per in-process round")
    args = parser.parse_args()
    rows, pinned = run(args)
    print(report(rows, pinned, args))
    print()
    print(report_in_process(in_process(args.rounds, args.requests), args.rounds, args.requests))


if __name__ == "__main__":
    main()
