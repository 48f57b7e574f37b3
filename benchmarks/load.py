"""A load generator: fixed concurrency for a fixed time, reporting requests/s, p50 and p99.

Uses ``wrk`` when it is on PATH (it is faster than any Python client); otherwise an aiohttp client
with ``concurrency`` keep-alive connections, each sending its next request as soon as the answer
is read. Only loopback URLs are accepted: a benchmark must never load someone else's server.

    python -m benchmarks.load http://127.0.0.1:8000/llms.txt --duration 3 --concurrency 32
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

WARMUP = 0.5  # seconds of load before measuring: connections open, caches warm
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@dataclass(frozen=True, slots=True)
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int  # answers with an unexpected status, and failed requests
    tool: str

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _check_loopback(url: str) -> None:
    if urlsplit(url).hostname not in LOOPBACK:
        raise ValueError(f"benchmarks only load loopback servers, not {url}")


def _percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _drive(
    url: str,
    *,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    concurrency: int,
    duration: float,
    expect: int,
) -> Result:
    latencies: list[float] = []
    errors = 0
    counting = False
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def worker(stop_at: float) -> None:
            nonlocal errors
            clock = time.perf_counter
            while (started := clock()) < stop_at:
                try:
                    async with session.request(method, url, headers=headers, data=body) as response:
                        await response.read()
                        ok = response.status == expect
                except aiohttp.ClientError:
                    ok = False
                if counting:
                    latencies.append(clock() - started)
                    errors += not ok

        begin = time.perf_counter()
        tasks = [asyncio.create_task(worker(begin + WARMUP + duration)) for _ in range(concurrency)]
        await asyncio.sleep(WARMUP)
        counting, measured_from = True, time.perf_counter()
        await asyncio.gather(*tasks)
        seconds = time.perf_counter() - measured_from
    ordered = sorted(latencies)
    return Result(
        requests=len(ordered),
        seconds=seconds,
        p50_ms=_percentile(ordered, 0.50) * 1000,
        p99_ms=_percentile(ordered, 0.99) * 1000,
        errors=errors,
        tool="aiohttp",
    )


_WRK_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_REQUESTS = re.compile(r"(\d+) requests in ([\d.]+)(\w+)")
_WRK_PERCENTILE = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_WRK_ERRORS = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _wrk(
    wrk: str, url: str, *, method: str, headers: dict[str, str], concurrency: int, duration: float
) -> Result:
    args = [wrk, "--latency", "-t1", f"-c{concurrency}", f"-d{max(1, round(duration))}s", url]
    for name, value in headers.items():
        args[1:1] = ["-H", f"{name}: {value}"]
    if method != "GET":
        raise ValueError("the wrk path drives GET only; use the aiohttp path for other methods")
    completed = subprocess.run(args, capture_output=True, text=True, check=True, timeout=duration + 30)
    output = completed.stdout
    count, span, unit = _WRK_REQUESTS.search(output).groups()  # type: ignore[union-attr]
    seconds = float(span) * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]
    found = {p: float(v) * _UNIT[u] for p, v, u in _WRK_PERCENTILE.findall(output)}
    errors = _WRK_ERRORS.search(output)
    return Result(
        requests=int(count),
        seconds=seconds,
        p50_ms=found.get("50", 0.0),
        p99_ms=found.get("99", 0.0),
        errors=int(errors.group(1)) if errors else 0,
        tool="wrk",
    )


def run(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    concurrency: int = 32,
    duration: float = 3.0,
    expect: int = 200,
    use_wrk: bool = True,
) -> Result:
    """Load ``url`` for ``duration`` seconds (after a short warm-up) with ``concurrency`` clients."""
    _check_loopback(url)
    wrk = shutil.which("wrk") if use_wrk and method == "GET" and body is None else None
    if wrk is not None:
        return _wrk(
            wrk, url, method=method, headers=headers or {}, concurrency=concurrency, duration=duration
        )
    driving = _drive(
        url,
        method=method,
        headers=headers or {},
        body=body,
        concurrency=concurrency,
        duration=duration,
        expect=expect,
    )
    try:
        import uvloop
    except ImportError:  # uvloop makes the client faster; asyncio's loop works too
        return asyncio.run(driving)
    return uvloop.run(driving)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--method", default="GET")
    parser.add_argument("--header", action="append", default=[], help="Name: value (repeatable)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--expect", type=int, default=200, help="the status every answer should have")
    args = parser.parse_args()
    headers = dict(header.split(":", 1) for header in args.header)
    result = run(
        args.url,
        method=args.method,
        headers={name.strip(): value.strip() for name, value in headers.items()},
        concurrency=args.concurrency,
        duration=args.duration,
        expect=args.expect,
    )
    print(
        f"{result.rps:,.0f} requests/s  p50 {result.p50_ms:.2f} ms  p99 {result.p99_ms:.2f} ms  "
        f"errors {result.errors}  ({result.requests} requests in {result.seconds:.1f} s, {result.tool})"
    )


if __name__ == "__main__":
    main()
