"""Slow clients cannot lock others out: a cap on connections, absolute deadlines, quiet logs.

The server runs as ``python -m service serve`` in a child process with a file-descriptor limit of
1,024, as a small host would give it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.connections import HEADERS_WITHIN, RESERVE, WORKER_RESERVE, Registry, connection_limit
from service.db.engine import migrate
from tests.processes import ROOT, free_port, kill, wait_ready

DESCRIPTORS = 1024
SLOW = 1100


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The server with at most 1,024 open files, and the file its log lines go to."""
    url = f"sqlite:///{tmp_path / 'service.db'}"
    migrate(url)
    port, log = free_port(), tmp_path / "serve.log"

    def limit_descriptors() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, hard))

    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "SERVICE_DATABASE_URL": url},
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=limit_descriptors,
            start_new_session=True,
        )
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        yield port, log
    finally:
        kill(process)


def _errors(log: Path) -> list[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line["message"] for line in lines if line.get("level") in ("error", "critical")]


def _open_slow(port: int, count: int) -> list[socket.socket]:
    """``count`` connections, each having sent the first bytes of a request and no more."""
    sockets = []
    for number in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # already closed to make room: the server at work
            sock.send(b"POST /api/waitlist HTTP/1.1\r\nHost: x")
        sockets.append(sock)
        if number % 100 == 99:
            _answered_quickly(port)  # meanwhile, others are still served
    return sockets


def _answered_quickly(port: int) -> float:
    began = time.monotonic()
    response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
    assert response.status_code == 200
    return time.monotonic() - began


def _trickle(sockets: list[socket.socket]) -> int:
    """One more byte on every connection still open; how many took it."""
    alive = 0
    for sock in sockets:
        try:
            sock.send(b"x")
            alive += 1
        except OSError:
            continue
    return alive


def test_eleven_hundred_slow_connections_leave_others_answered_within_a_second(server) -> None:
    """With 1,024 descriptors, 1,100 connections trickling their headers never keep another client
    waiting a second, and their going away writes no ERROR line."""
    port, log = server
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < SLOW + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    sockets = _open_slow(port, SLOW)
    try:
        for _ in range(3):
            alive = _trickle(sockets)
            assert _answered_quickly(port) < 1.0
        # At most the cap are held; the rest were closed to make room.
        assert alive <= connection_limit(2000, run_worker=True, descriptors=DESCRIPTORS) + 1
    finally:
        for sock in sockets:
            sock.close()
    # Clients that went away mid-request, some in the middle of a body.
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"email\":")
    assert _answered_quickly(port) < 1.0
    assert _errors(log) == []


def test_headers_trickled_past_their_deadline_close_the_connection(server) -> None:
    """A request whose headers are still arriving 10 s after its first byte loses its connection,
    though a byte came every half second."""
    port, _ = server
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        began = time.monotonic()
        closed_after = None
        while time.monotonic() - began < HEADERS_WITHIN + 5:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                sock.settimeout(0.5)
                if sock.recv(1024) == b"":  # the server closed it
                    closed_after = time.monotonic() - began
                    break
            except TimeoutError:
                continue  # still open: trickle on
            except OSError:
                closed_after = time.monotonic() - began
                break
    assert closed_after is not None, "the connection outlived the headers' deadline"
    assert HEADERS_WITHIN - 0.5 <= closed_after <= HEADERS_WITHIN + 2


def test_the_cap_leaves_a_reserve_of_descriptors() -> None:
    """The cap is the setting, but never above the descriptor limit less the reserve."""
    assert connection_limit(2000, run_worker=False, descriptors=1024) == 1024 - RESERVE
    assert connection_limit(2000, run_worker=True, descriptors=1024) == 1024 - RESERVE - WORKER_RESERVE
    assert connection_limit(2000, run_worker=True, descriptors=65536) == 2000
    assert connection_limit(2000, run_worker=True, descriptors=100) == 1


def test_a_full_registry_closes_the_longest_idle_connection() -> None:
    """When full, the newcomer stays and the connection quiet the longest is closed."""

    class Held:
        def __init__(self, active_at: float) -> None:
            self.active_at, self.dropped = active_at, False

        def drop(self) -> None:
            self.dropped = True

    registry = Registry(limit=2)
    old, recent, newcomer = Held(1.0), Held(5.0), Held(9.0)
    for held in (old, recent, newcomer):
        registry.admit(held)  # type: ignore[arg-type]
    assert (old.dropped, recent.dropped, newcomer.dropped, registry.evicted) == (True, False, False, 1)
