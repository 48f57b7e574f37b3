"""One scenario, service against baseline: alternating runs, medians, server CPU and memory per run.

A ``Target`` is a URL on a running server (its process id for CPU and memory) and what to send;
``measure`` loads it once; ``alternate`` runs service and baseline in ABBA order for a number of
rounds, so a noisy neighbour, a warming cache or a filling disk falls on both sides alike; ``median``
sums the runs up (the median of each figure; the highest peak memory).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from benchmarks import load, servers


class MeasureError(RuntimeError):
    """A run whose answers were not what the scenario expects: its figures would measure something else."""


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    pid: int  # the server's first process: CPU and memory are read for it and its descendants
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    expect: int = 200
    # Called once per run, so that every run can send bodies of its own (unique emails).
    bodies: Callable[[], load.Bodies] | None = None
    use_wrk: bool = True  # False: the aiohttp client even where wrk is installed


@dataclass(frozen=True, slots=True)
class Measured:
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_us: float | None  # server CPU per answered request, microseconds
    peak_rss: int | None  # bytes, the server family's peak during the run
    tool: str
    result: load.Result | None = None  # the raw run (None for a median)


def _served(result: load.Result) -> float:
    """Requests the server answered during the whole run, warm-up included."""
    if result.answered:
        return float(sum(result.answered.values()))
    if result.tool == "aiohttp":  # warm-up requests are not in ``requests``: count them at the rate
        return result.requests * (1 + load.WARMUP / result.seconds) if result.seconds else 0.0
    return float(result.requests)


def measure(target: Target, *, duration: float, concurrency: int) -> Measured:
    """Load ``target`` once; raises ``MeasureError`` when any answer was not the expected status."""
    servers.reset_peak(target.pid)
    before = servers.cpu_seconds(target.pid)
    result = load.run(
        target.url,
        method=target.method,
        headers=dict(target.headers),
        bodies=target.bodies() if target.bodies is not None else None,
        concurrency=concurrency,
        duration=duration,
        expect=target.expect,
        use_wrk=target.use_wrk,
    )
    after = servers.cpu_seconds(target.pid)
    peak = servers.peak_rss(target.pid)
    if result.errors:
        seen = ", ".join(f"{status}: {n}" for status, n in sorted(result.answered.items()))
        raise MeasureError(
            f"{target.method} {target.url}: {result.errors} of {result.requests} answers were not "
            f"{target.expect}" + (f" (answers by status {seen})" if seen else "")
        )
    served = _served(result)
    cpu = (after - before) / served * 1e6 if before is not None and after is not None and served else None
    return Measured(result.rps, result.p50_ms, result.p99_ms, cpu, peak, result.tool, result)


def alternate(
    service: Callable[[], Measured], baseline: Callable[[], Measured], rounds: int
) -> tuple[list[Measured], list[Measured]]:
    """``rounds`` runs of each, ABBA: baseline first in even rounds, service first in odd ones."""
    service_runs: list[Measured] = []
    baseline_runs: list[Measured] = []
    for number in range(rounds):
        order = [(baseline, baseline_runs), (service, service_runs)]
        for run, into in order if number % 2 == 0 else reversed(order):
            into.append(run())
    return service_runs, baseline_runs


def median(runs: list[Measured]) -> Measured:
    cpus = [run.cpu_us for run in runs if run.cpu_us is not None]
    peaks = [run.peak_rss for run in runs if run.peak_rss is not None]
    return Measured(
        rps=statistics.median(run.rps for run in runs),
        p50_ms=statistics.median(run.p50_ms for run in runs),
        p99_ms=statistics.median(run.p99_ms for run in runs),
        cpu_us=statistics.median(cpus) if cpus else None,
        peak_rss=max(peaks) if peaks else None,
        tool=runs[0].tool,
    )
