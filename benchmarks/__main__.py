"""``make bench``: the service against a bare Sanic baseline, every scenario, one table.

For each storage (SQLite; PostgreSQL with Redis limits where ``SERVICE_BENCH_POSTGRES_URL`` /
``SERVICE_BENCH_REDIS_URL``, or the ``SERVICE_TEST_*`` ones, name a server) and each server
process count (1 and 2; the baseline runs with as many), this starts ``python -m service serve``
on loopback with a database made for the run, and for each scenario a baseline app answering as
many constant bytes, and drives both with the same load (wrk, installed with apt-get when missing
and run as root; else the aiohttp client), alternating baseline and service (ABBA). Webhook
delivery runs ``python -m benchmarks.delivery`` as a subprocess per storage: its worker drains a
backlog beside a plain aiohttp client, then times publish-to-receipt one event at a time.

Columns: requests/s, p50/p99 latency (ms), the baseline's requests/s and the ratio, server CPU
microseconds per request (service and baseline; the load generator's speed cannot distort it) and
the peak resident memory of the service's process family during its runs (from /proc).

    python -m benchmarks [--quick] [--duration S] [--rounds N] [--concurrency C]
                         [--only SCENARIO ...] [--storage sqlite|postgres] [--workers N ...]
                         [--markdown] [--no-wrk]

Everything listens on 127.0.0.1 only, every run is bounded in time, and every child process, database
and Redis key made for the run is removed at the end, on an error or on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from benchmarks import backends, compare, report, servers, waitlist


@dataclass(frozen=True, slots=True)
class Document:
    key: str
    name: str
    path: str
    conditional: bool = False  # If-None-Match with the current ETag: a 304 revalidation


DOCUMENTS = (
    Document("document", "GET /llms.txt", "/llms.txt"),
    Document("document-304", "GET /llms.txt (304)", "/llms.txt", conditional=True),
    Document("catalog", "GET /api/v1/webhooks/events", "/api/v1/webhooks/events"),
)
REGISTRATIONS = {scenario.key: scenario for scenario in waitlist.SCENARIOS}
DELIVERY = "delivery"
SCENARIOS = (*REGISTRATIONS, *(document.key for document in DOCUMENTS), DELIVERY)

DURATION, ROUNDS = 2.0, 2  # 2 s runs, ABBA: the whole default run stays within about 6 minutes
QUICK_DURATION, QUICK_ROUNDS = 1.0, 2
DELIVERY_ARGS = ["--events", "5000", "--rounds", "3", "--samples", "200"]  # its own defaults
QUICK_DELIVERY_ARGS = ["--events", "300", "--rounds", "1", "--samples", "20"]
DELIVERY_TIMEOUT = 240.0  # seconds; the default run takes about 20 s


# --- the load generator -------------------------------------------------------------------------


def ensure_wrk(allowed: bool) -> str | None:
    """wrk's path; when missing, installed from the system's packages if we are root with apt-get."""
    if not allowed:
        return None
    if found := shutil.which("wrk"):
        return found
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (["apt-get", "install", "-y", "-q", "wrk"], ["apt-get", "update", "-q"],
                        ["apt-get", "install", "-y", "-q", "wrk"]):  # fmt: skip
            print(f"wrk is missing: {' '.join(command)}", file=sys.stderr)
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                subprocess.run(command, env=env, check=False, timeout=300,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            if found := shutil.which("wrk"):
                return found
    print("wrk is not available: using the aiohttp client (slower; ratios will be lower)", file=sys.stderr)
    return None


# --- HTTP scenarios against one running service -------------------------------------------------


def _probe(url: str) -> tuple[str, int]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback only
        return response.headers["ETag"], len(response.read())


def document_row(
    document: Document, base: str, pid: int, storage: str, workers: int, args: argparse.Namespace
) -> report.Row:
    etag, size = _probe(base + document.path)
    port = servers.free_port()
    with servers.baseline(port, 0 if document.conditional else size, workers=workers) as bare:
        measured = compare.Target(
            base + document.path,
            pid,
            headers={"If-None-Match": etag} if document.conditional else {},
            expect=304 if document.conditional else 200,
            use_wrk=args.wrk,
        )
        reference = compare.Target(f"http://{servers.HOST}:{port}/constant", bare.pid, use_wrk=args.wrk)
        service_runs, baseline_runs = compare.alternate(
            lambda: compare.measure(measured, duration=args.duration, concurrency=args.concurrency),
            lambda: compare.measure(reference, duration=args.duration, concurrency=args.concurrency),
            args.rounds,
        )
    return report.Row.compare(document.name, storage, str(workers), compare.median(service_runs),
                              compare.median(baseline_runs))  # fmt: skip


def registration_row(
    key: str, base: str, pid: int, backend: backends.Backend, workers: int, args: argparse.Namespace
) -> report.Row:
    scenario = REGISTRATIONS[key]
    size = waitlist.probe(base, scenario)
    port = servers.free_port()
    with servers.baseline(port, size, workers=workers) as bare:
        outcome = waitlist.run_scenario(
            scenario,
            service=(base, pid),
            baseline=(f"http://{servers.HOST}:{port}", bare.pid),
            database_url=backend.database_url,
            duration=args.duration,
            concurrency=args.concurrency,
            rounds=args.rounds,
            use_wrk=args.wrk,
        )
    return waitlist.row(outcome, backend.name, workers)


def http_rows(backend: backends.Backend, workers: int, args: argparse.Namespace) -> list[report.Row]:
    keys = [key for key in SCENARIOS if key in args.only and key != DELIVERY]
    if not keys:
        return []
    env = {**backend.env, "SERVICE_WAITLIST_RATE_LIMIT": waitlist.NEVER_TRIPS}
    port = servers.free_port()
    base = f"http://{servers.HOST}:{port}"
    rows: list[report.Row] = []
    with servers.service(port, backend.database_url, workers=workers, env=env) as process:
        for key in keys:
            progress(f"{backend.name}, {workers} worker(s): {key}")
            try:
                if key in REGISTRATIONS:
                    rows.append(registration_row(key, base, process.pid, backend, workers, args))
                else:
                    document = next(d for d in DOCUMENTS if d.key == key)
                    rows.append(document_row(document, base, process.pid, backend.name, workers, args))
            except (compare.MeasureError, RuntimeError, OSError, subprocess.SubprocessError) as error:
                rows.append(report.Row(key, backend.name, str(workers), note=f"failed: {error}"))
    return rows


# --- webhook delivery, through benchmarks.delivery ---------------------------------------------

_BEST = re.compile(r"best: plain (\d+)/s, service (\d+)/s: ratio ([\d.]+)")
_ROUND_CPU = re.compile(r"plain\s+\d+/s \(\s*(\d+) us CPU each\)\s+service\s+\d+/s \(\s*(\d+) us CPU each\)")
_LATENCY = re.compile(r"p50\s+([\d.]+) ms\s+p99\s+([\d.]+) ms\s+max\s+([\d.]+) ms")
_SAMPLES = re.compile(r"(\d+) events one at a time")


def _stop_delivery(process: subprocess.Popen[str]) -> None:
    """SIGINT first, so its own clean-up stops the receiver it started; then SIGKILL what is left."""
    members = servers.family(process.pid)
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    for member in members:
        try:
            command = Path(f"/proc/{member}/cmdline").read_bytes()
        except OSError:
            continue
        if b"benchmarks.delivery" in command:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_delivery(database_url: str, extra: list[str]) -> tuple[str, int | None]:
    """Its output and the peak memory of its process family (sender, worker, receiver)."""
    command = [sys.executable, "-m", "benchmarks.delivery", *extra, "--database-url", database_url]
    process = subprocess.Popen(
        command,
        cwd=servers.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # SIGINT must reach its KeyboardInterrupt clean-up even when this run was started in the
        # background (where the shell has it ignored, and children would inherit that).
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + DELIVERY_TIMEOUT
    peak: int | None = None
    try:
        while True:
            try:
                output, _ = process.communicate(timeout=0.5)
                return output, peak
            except subprocess.TimeoutExpired:
                now = servers.peak_rss(process.pid)
                peak = max(peak or 0, now) if now is not None else peak
                if time.monotonic() > deadline:
                    message = f"benchmarks.delivery did not finish in {DELIVERY_TIMEOUT:g} s"
                    raise RuntimeError(message) from None
    finally:
        if process.poll() is None:
            _stop_delivery(process)


def delivery_rows(backend: backends.Backend, args: argparse.Namespace) -> list[report.Row]:
    progress(f"{backend.name}: delivery")
    name = backend.name
    try:
        output, peak = run_delivery(backend.delivery_database_url, args.delivery_args)
    except (RuntimeError, OSError) as error:
        return [report.Row("webhook deliveries", name, "-", note=f"failed: {error}")]
    best, latency = _BEST.search(output), _LATENCY.search(output)
    if best is None or latency is None:
        tail = " / ".join(output.strip().splitlines()[-3:])
        return [report.Row("webhook deliveries", name, "-", note=f"unreadable output: {tail[:300]}")]
    cpus = [(int(plain), int(service)) for plain, service in _ROUND_CPU.findall(output)]
    samples = _SAMPLES.search(output)
    peak_mib = peak / (1024 * 1024) if peak else None
    throughput = report.Row(
        scenario="webhook deliveries (backlog drain)",
        storage=name,
        workers="-",
        rps=float(best.group(2)),
        baseline_rps=float(best.group(1)),
        ratio=float(best.group(3)),
        cpu_us=float(min(service for _, service in cpus)) if cpus else None,
        baseline_cpu_us=float(min(plain for plain, _ in cpus)) if cpus else None,
        peak_mib=peak_mib,
        note="python -m benchmarks.delivery: the service's worker (claim, sign, POST, log each attempt "
        "durably) against a plain aiohttp client POSTing the same requests to the same receiver; best "
        "of its rounds; CPU is its process's per message; memory is sender, worker and receiver",
    )
    delay = report.Row(
        scenario="webhook publish to receipt",
        storage=name,
        workers="-",
        p50_ms=float(latency.group(1)),
        p99_ms=float(latency.group(2)),
        peak_mib=peak_mib,
        note=f"{samples.group(1) if samples else 'N'} events published one at a time to an idle worker; "
        f"max {latency.group(3)} ms",
    )
    return [throughput, delay]


# --- the run ------------------------------------------------------------------------------------


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM takes the same way out as Ctrl-C: through every clean-up


Storage = Callable[[], contextlib.AbstractContextManager[backends.Backend]]


def _backends(args: argparse.Namespace) -> Iterator[Storage]:
    if "sqlite" in args.storage:
        yield backends.sqlite
    if "postgres" in args.storage:
        admin = backends.postgres_admin_url()
        if admin is None:
            print("PostgreSQL rows skipped: set SERVICE_BENCH_POSTGRES_URL (or SERVICE_TEST_POSTGRES_URL)",
                  file=sys.stderr)  # fmt: skip
        else:
            redis = backends.redis_url()
            yield lambda: backends.postgres(admin, redis)


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    system = f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    return f"{os.cpu_count()} CPUs ({model}), {system}"


def _load_average() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "-"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="short runs: a smoke test, not figures")
    parser.add_argument("--duration", type=float, help=f"seconds per run (default {DURATION:g})")
    parser.add_argument("--rounds", type=int, help=f"runs of each side, ABBA order (default {ROUNDS})")
    parser.add_argument("--concurrency", type=int, default=32, help="connections")
    parser.add_argument("--only", action="append", choices=SCENARIOS, metavar="SCENARIO",
                        help=f"repeatable; one of {', '.join(SCENARIOS)}")  # fmt: skip
    parser.add_argument("--storage", action="append", choices=("sqlite", "postgres"))
    parser.add_argument("--workers", action="append", type=int, help="server processes (default 1 and 2)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--no-wrk", action="store_true", help="the aiohttp client even where wrk is")
    args = parser.parse_args(argv)
    args.duration = args.duration or (QUICK_DURATION if args.quick else DURATION)
    args.rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    args.only = args.only or list(SCENARIOS)
    args.storage = args.storage or ["sqlite", "postgres"]
    args.workers = args.workers or [1, 2]
    args.delivery_args = QUICK_DELIVERY_ARGS if args.quick else DELIVERY_ARGS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    args.wrk = ensure_wrk(not args.no_wrk) is not None
    started, when, load_before = time.monotonic(), dt.datetime.now(dt.UTC), _load_average()
    rows: list[report.Row] = []
    interrupted = False
    try:
        for make_backend in _backends(args):
            with make_backend() as backend:
                for workers in args.workers:
                    rows += http_rows(backend, workers, args)
                if DELIVERY in args.only:
                    rows += delivery_rows(backend, args)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: every child process, database and key of this run is gone", file=sys.stderr)
    print(report.render(rows, markdown=args.markdown))
    tool = "wrk (1 thread)" if args.wrk else "aiohttp"
    print()
    print(f"load: {tool}, {args.concurrency} connections, {args.duration:g} s runs x {args.rounds} per "
          f"side, ABBA, medians; loopback; ratio = service / baseline req/s; target >= "
          f"{waitlist.TARGET} for registrations")  # fmt: skip
    print(f"machine: {machine()}; {when:%Y-%m-%d %H:%M} UTC; took {time.monotonic() - started:.0f} s; "
          f"load average before {load_before}, after {_load_average()}")  # fmt: skip
    failed = [row for row in rows if row.note.startswith(("failed", "unreadable"))]
    ledgers_hold = all("MISMATCH" not in row.note for row in rows)
    if interrupted:
        return 130
    return 1 if failed or not ledgers_hold or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
