"""A load generator: fixed concurrency for a fixed time, reporting requests/s, p50 and p99.

Uses ``wrk`` when it is on PATH (it is faster than any Python client); otherwise an aiohttp client
with ``concurrency`` keep-alive connections, each sending its next request as soon as the answer
is read. Only loopback URLs are accepted: a benchmark must never load someone else's server.

Requests with a body (a constant one, or ``Bodies``: a different body for every request, written
once in Lua for wrk and once in Python for aiohttp) go through wrk with a generated Lua script,
which also counts every answer by status and every request sent, so a caller can hold the server's
side effects (rows written) to what the client saw.

    python -m benchmarks.load http://127.0.0.1:8000/llms.txt --duration 3 --concurrency 32
    python -m benchmarks.load http://127.0.0.1:8000/api/waitlist --method POST \
        --header 'Content-Type: application/json' --body '{"email": "a@b.example"}' --expect 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    # Bookkeeping over the whole run, warm-up included: answers by status and requests sent
    # (sent minus answered were in flight when the run stopped). Counted where requests carry a
    # body (wrk with its script, and the aiohttp path); empty and 0 for a plain wrk GET.
    answered: Mapping[int, int] = field(default_factory=dict)
    sent: int = 0

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def unanswered(self) -> int:
        return max(0, self.sent - sum(self.answered.values()))


@dataclass(frozen=True, slots=True)
class Bodies:
    """A body for every request, the same sequence on both paths.

    ``lua`` is the source of a Lua function ``body(thread, n)`` returning a string (wrk);
    ``python(thread, n)`` returns the same bytes (aiohttp). ``thread`` numbers the wrk thread or
    the aiohttp connection from 1, ``n`` counts that one's requests from 1, so ``thread`` and ``n``
    together are unique within a run.
    """

    lua: str
    python: Callable[[int, int], bytes]

    @classmethod
    def constant(cls, body: bytes) -> Bodies:
        return cls(lua=f"return {lua_string(body)}", python=lambda thread, n: body)


def lua_string(value: str | bytes) -> str:
    """A Lua string literal for ``value``: printable ASCII as is, every other byte escaped."""
    data = value.encode() if isinstance(value, str) else value
    escaped = "".join(
        chr(byte) if 32 <= byte < 127 and byte not in (34, 92) else f"\\{byte:03d}" for byte in data
    )
    return f'"{escaped}"'


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
    bodies: Bodies | None = None,
) -> Result:
    latencies: list[float] = []
    errors = 0
    counting = False
    answered: dict[int, int] = {}
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def worker(stop_at: float, thread: int) -> None:
            nonlocal errors, sent
            clock = time.perf_counter
            n = 0
            while (started := clock()) < stop_at:
                n += 1
                data = bodies.python(thread, n) if bodies is not None else body
                sent += 1
                try:
                    async with session.request(method, url, headers=headers, data=data) as response:
                        await response.read()
                        ok = response.status == expect
                        answered[response.status] = answered.get(response.status, 0) + 1
                except aiohttp.ClientError:
                    ok = False
                if counting:
                    latencies.append(clock() - started)
                    errors += not ok

        begin = time.perf_counter()
        stop_at = begin + WARMUP + duration
        tasks = [asyncio.create_task(worker(stop_at, thread)) for thread in range(1, concurrency + 1)]
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
        answered=answered,
        sent=sent,
    )


_WRK_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_WRK_REQUESTS = re.compile(r"(\d+) requests in ([\d.]+)(\w+)")
_WRK_PERCENTILE = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_WRK_ERRORS = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_WRK_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")
_WRK_COUNTS = re.compile(r"^WRK_COUNTS (.*)$", re.MULTILINE)
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}

# The script wrk runs for requests with a body: each thread numbers itself, builds every request
# from ``body(thread, n)`` and counts answers by status; ``done`` prints one JSON line per thread.
_WRK_SCRIPT = """-- written by benchmarks.load
local threads = {{}}
function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end
sent, statuses = 0, {{}}
wrk.method = {method}
{headers}
function body(thread, n)
{body}
end
function request()
  sent = sent + 1
  return wrk.format(nil, nil, nil, body(id, sent))
end
function response(status, headers, answer)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    local parts = {{}}
    for status, count in pairs(thread:get("statuses")) do
      parts[#parts + 1] = string.format('"%d": %d', status, count)
    end
    io.write(string.format('WRK_COUNTS {{"sent": %d, "answered": {{%s}}}}\\n',
      thread:get("sent"), table.concat(parts, ", ")))
  end
end
"""


def wrk_script(method: str, headers: Mapping[str, str], bodies: Bodies) -> str:
    """The Lua script wrk runs to send ``bodies`` (public so a reader can see what is sent)."""
    lines = [f"wrk.headers[{lua_string(name)}] = {lua_string(value)}" for name, value in headers.items()]
    return _WRK_SCRIPT.format(method=lua_string(method), headers="\n".join(lines), body=bodies.lua)


def _wrk(
    wrk: str,
    url: str,
    *,
    method: str,
    headers: dict[str, str],
    concurrency: int,
    duration: float,
    bodies: Bodies | None = None,
    expect: int = 200,
) -> Result:
    args = [wrk, "--latency", "-t1", f"-c{concurrency}", f"-d{max(1, round(duration))}s", url]
    if bodies is None and method != "GET":
        raise ValueError("the wrk path sends other methods than GET only with bodies")
    with tempfile.TemporaryDirectory() as scratch:
        if bodies is not None:
            script = f"{scratch}/requests.lua"
            with open(script, "w", encoding="utf-8") as out:
                out.write(wrk_script(method, headers, bodies))
            args[1:1] = ["-s", script]
        else:
            for name, value in headers.items():
                args[1:1] = ["-H", f"{name}: {value}"]
        completed = subprocess.run(
            args, capture_output=True, text=True, check=True, timeout=duration + 30
        )
    output = completed.stdout
    count, span, unit = _WRK_REQUESTS.search(output).groups()  # type: ignore[union-attr]
    seconds = float(span) * {"ms": 0.001, "s": 1.0, "m": 60.0}[unit]
    found = {p: float(v) * _UNIT[u] for p, v, u in _WRK_PERCENTILE.findall(output)}
    if bodies is None:
        errors = _WRK_ERRORS.search(output)
        return Result(
            requests=int(count),
            seconds=seconds,
            p50_ms=found.get("50", 0.0),
            p99_ms=found.get("99", 0.0),
            errors=int(errors.group(1)) if errors else 0,
            tool="wrk",
        )
    answered: dict[int, int] = {}
    sent = 0
    for line in _WRK_COUNTS.findall(output):
        counts = json.loads(line)
        sent += counts["sent"]
        for status, number in counts["answered"].items():
            answered[int(status)] = answered.get(int(status), 0) + number
    socket = _WRK_SOCKET_ERRORS.search(output)
    failed = sum(int(n) for n in socket.groups()) if socket else 0
    return Result(
        requests=int(count),
        seconds=seconds,
        p50_ms=found.get("50", 0.0),
        p99_ms=found.get("99", 0.0),
        errors=sum(answered.values()) - answered.get(expect, 0) + failed,
        tool="wrk",
        answered=answered,
        sent=sent,
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
    bodies: Bodies | None = None,
) -> Result:
    """Load ``url`` for ``duration`` seconds (after a short warm-up) with ``concurrency`` clients.

    ``body`` is sent with every request, ``bodies`` builds one per request (not both). wrk has no
    warm-up of its own: its figures include the connections opening.
    """
    _check_loopback(url)
    if body is not None and bodies is not None:
        raise ValueError("give a constant body or bodies, not both")
    if body is not None:
        bodies = Bodies.constant(body)
    wrk = shutil.which("wrk") if use_wrk else None
    if wrk is not None and (method == "GET" or bodies is not None):
        return _wrk(
            wrk,
            url,
            method=method,
            headers=headers or {},
            concurrency=concurrency,
            duration=duration,
            bodies=bodies,
            expect=expect,
        )
    driving = _drive(
        url,
        method=method,
        headers=headers or {},
        body=None,
        concurrency=concurrency,
        duration=duration,
        expect=expect,
        bodies=bodies,
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
    parser.add_argument("--body", help="sent with every request (through a wrk script with wrk)")
    parser.add_argument("--no-wrk", action="store_true", help="use the aiohttp client even with wrk")
    args = parser.parse_args()
    headers = dict(header.split(":", 1) for header in args.header)
    result = run(
        args.url,
        method=args.method,
        headers={name.strip(): value.strip() for name, value in headers.items()},
        body=args.body.encode() if args.body is not None else None,
        concurrency=args.concurrency,
        duration=args.duration,
        expect=args.expect,
        use_wrk=not args.no_wrk,
    )
    print(
        f"{result.rps:,.0f} requests/s  p50 {result.p50_ms:.2f} ms  p99 {result.p99_ms:.2f} ms  "
        f"errors {result.errors}  ({result.requests} requests in {result.seconds:.1f} s, {result.tool})"
    )


if __name__ == "__main__":
    main()
