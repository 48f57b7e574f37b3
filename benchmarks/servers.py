"""Servers for benchmarks: the service and the baseline as child processes on loopback.

Each child runs in its own session, so stopping it reaches every process it started. CPU time is
read from ``/proc`` for the child and its descendants, which lets a benchmark report server CPU
per request: a figure the load generator's own speed cannot distort. Memory likewise: the resident
set of the whole family, and its peak since a chosen moment (``reset_peak``, then ``peak_rss``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.processes import free_port  # noqa: F401 - the benchmarks' port picker, the tests' own

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
# Partner secrets' key for benchmark servers (32 bytes of 0x03): a fixed one, so every process of
# a run, and a run on PostgreSQL, agree.
SECRETS_KEY = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM="
READY_TIMEOUT = 30.0  # seconds: migrations plus rendering every document, on a slow machine
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback only
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)  # polling a child's start-up
    stop(process)
    raise RuntimeError(f"server did not answer {url} within {timeout} s")


def _spawn(
    args: list[str], env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]


@contextlib.contextmanager
def service(
    port: int,
    database: Path | str,
    *,
    base_url: str | None = None,
    workers: int = 1,
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m service serve --no-worker`` (no delivery worker; ``workers`` server processes).

    ``database`` is a SQLite file of its own, or a database URL; ``env`` adds or overrides
    ``SERVICE_*`` settings (rate-limit storage, for one); ``log`` keeps the server's output.
    """
    url = database if isinstance(database, str) and "://" in database else f"sqlite:///{database}"
    settings = {
        "SERVICE_DATABASE_URL": url,
        "SERVICE_BASE_URL": base_url or f"http://{HOST}:{port}",
        "SERVICE_SECRETS_KEY": SECRETS_KEY,  # serve on PostgreSQL does not start without one
        **(env or {}),
    }
    args = ["-m", "service", "serve", "--host", HOST, "--port", str(port), "--no-worker"]
    process = _spawn([*args, "--workers", str(workers)], settings, log)
    try:
        wait_ready(f"http://{HOST}:{port}/healthz", process)
        yield process
    finally:
        stop(process)


@contextlib.contextmanager
def baseline(port: int, size: int, *, workers: int = 1) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m benchmarks.baseline`` answering ``size`` constant bytes from ``workers`` processes."""
    args = ["-m", "benchmarks.baseline", "--port", str(port), "--size", str(size)]
    process = _spawn([*args, "--workers", str(workers)])
    try:
        wait_ready(f"http://{HOST}:{port}/constant", process)
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of one process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may contain spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def _process_table() -> dict[int, tuple[int, float]]:
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = found
    return table


def family(pid: int, table: dict[int, tuple[int, float]] | None = None) -> list[int]:
    """``pid`` and its descendants (Sanic's manager starts the worker as a child process)."""
    table = _process_table() if table is None else table
    members, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (ppid, _) in table.items() if ppid == parent]
        members += children
        frontier += children
    return members


def cpu_seconds(pid: int) -> float | None:
    """CPU time used so far by ``pid`` and its descendants; None where /proc is unavailable."""
    if not Path("/proc/self/stat").exists():
        return None
    table = _process_table()
    return sum(table[member][1] for member in family(pid, table) if member in table)


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def rss(pid: int) -> int | None:
    """Bytes resident now in ``pid`` and its descendants; None where /proc is unavailable."""
    if not Path("/proc/self/status").exists():
        return None
    return sum(_status_kib(member, "VmRSS") for member in family(pid)) * 1024


def reset_peak(pid: int) -> bool:
    """Start each family member's peak-RSS mark afresh (Linux ``clear_refs`` 5); False if refused."""
    done = True
    for member in family(pid):
        try:
            Path(f"/proc/{member}/clear_refs").write_text("5")
        except OSError:
            done = False
    return done


def peak_rss(pid: int) -> int | None:
    """Bytes: the sum over ``pid`` and its descendants of each one's peak resident set (``VmHWM``)
    since ``reset_peak`` (or its start). Each process's own peak, summed: an upper bound when the
    peaks did not coincide. None where /proc is unavailable."""
    if not Path("/proc/self/status").exists():
        return None
    return sum(_status_kib(member, "VmHWM") for member in family(pid)) * 1024
