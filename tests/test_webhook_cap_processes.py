"""The per-partner cap holds across two ``python -m service worker`` processes on PostgreSQL.

A receiver holds every request open until the test lets them through, and records how many
requests each partner has open at once. Two worker processes share the database; while the first
wave is held at the partners' caps, both workers turn (claim) several times and neither may add a
request; then everything is let through and every event arrives, never above the cap.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import func, select
from webhook_helpers import Receiver, room_claimed

from benchmarks.drills.children import Children
from service.clock import utc_now
from service.db.engine import create_engine
from service.db.tables import deliveries
from service.events import parse_event
from service.webhooks import outbox
from tests.conftest import _empty_tables
from tests.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CAP = 3
EVENTS = 8  # per partner, more than two caps' worth
TURNS = 3  # claim turns each worker takes while the caps are full
DEADLINE = 60.0  # seconds for any one condition; met within a few on an idle machine
SECRETS_KEY = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="  # 32 bytes of 0x01, for secrets at rest


class HoldingReceiver(Receiver):
    """Holds each request until ``let_through``; counts open requests per path and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.open: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self._gate = asyncio.Event()  # set on the receiver's own loop

    def let_through(self) -> None:
        self._loop.call_soon_threadsafe(self._gate.set)

    def wait_open(self, path: str, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.open[path] < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        with self._changed:
            self.open[request.path] += 1
            self.peak[request.path] = max(self.peak[request.path], self.open[request.path])
            self._changed.notify_all()
        try:
            await self._gate.wait()
            return await super()._handle(request)
        finally:
            with self._changed:
                self.open[request.path] -= 1


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        body = response.read()
    return json.loads(body) if path != "/metrics" else body.decode()


def _wait_turns(port: int, after: float, turns: int) -> None:
    """Wait until the worker on ``port`` has started ``turns`` loop turns after ``after``
    (``time.monotonic()``, the same clock on every process of the machine)."""
    deadline = time.monotonic() + DEADLINE
    seen = after
    for _ in range(turns):
        while True:
            asked = time.monotonic()
            started = asked - _get(port, "/healthz")["sinceTurn"]  # no later than the turn's start
            if started > seen:
                seen = started
                break
            assert time.monotonic() < deadline, f"the worker on port {port} stopped turning"
            time.sleep(0.05)  # polling another process's progress


def _delivered(metrics: str) -> int:
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("service_webhook_attempts_total{") and 'outcome="delivered"' in line
    )


def test_the_cap_holds_across_two_worker_processes(postgres_database: str, tmp_path: Path) -> None:
    """Two workers, two partners capped at 3 (SERVICE_WEBHOOK_MAX_IN_FLIGHT), requests held open: never more than 3 open per
    partner, though both workers claim while the caps are full; then every event arrives."""
    asyncio.run(_empty_tables(postgres_database))
    with HoldingReceiver() as receiver, Children(tmp_path / "logs") as children:
        paths = ["/a", "/b"]

        async def publish() -> None:
            engine = create_engine(postgres_database)
            for index in range(EVENTS):
                await outbox.publish_event(
                    engine, parse_event(room_claimed(f"room-{index}"), now=utc_now()), now=utc_now()
                )
            await engine.dispose()

        async def statuses() -> dict[str, int]:
            engine = create_engine(postgres_database)
            async with engine.connect() as conn:
                rows = await conn.execute(
                    select(deliveries.c.status, func.count()).group_by(deliveries.c.status)
                )
                found = {status: count for status, count in rows}
            await engine.dispose()
            return found

        env = {
            "SERVICE_DATABASE_URL": postgres_database,
            "SERVICE_SECRETS_KEY": SECRETS_KEY,
            "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
            "SERVICE_WEBHOOK_MAX_IN_FLIGHT": str(CAP),  # every worker's default cap
            "SERVICE_WEBHOOK_TIMEOUT": "60",  # held requests must not time out
        }
        for path in paths:
            children.cli(env, "partners", "add", "--name", f"partner {path}", "--url", receiver.url(path))
        ports = [free_port(), free_port()]
        workers = [
            children.spawn(f"worker-{n}", ["worker", "--port", str(port)], env)
            for n, port in enumerate(ports)
        ]
        for number, process in enumerate(workers):
            children.wait_worker(f"worker-{number}", process)

        asyncio.run(publish())  # NOTIFY: both workers claim at once
        for path in paths:
            assert receiver.wait_open(path, CAP, DEADLINE), (receiver.open, children.log_tail("worker-0"))
        full = time.monotonic()
        for port in ports:  # each worker claims again (turns) while every cap is taken
            _wait_turns(port, full, TURNS)
        assert dict(receiver.peak) == dict.fromkeys(paths, CAP)
        assert len(receiver.requests) == 0  # nothing answered yet: all held

        receiver.let_through()
        arrived = receiver.wait_for(lambda got: len(got) >= EVENTS * len(paths), DEADLINE)
        assert arrived, (len(receiver.requests), children.log_tail("worker-0"), children.log_tail("worker-1"))
        deadline = time.monotonic() + DEADLINE
        while asyncio.run(statuses()) != {"delivered": EVENTS * len(paths)}:
            assert time.monotonic() < deadline, asyncio.run(statuses())
            time.sleep(0.05)  # the last answers are being logged
        delivered = [_delivered(_get(port, "/metrics")) for port in ports]

    assert dict(receiver.peak) == dict.fromkeys(paths, CAP)  # never above the cap, from either worker
    assert sum(delivered) == EVENTS * len(paths)  # the two workers' attempts: one per delivery
    events = Counter((request.path, json.loads(request.body)["eventId"]) for request in receiver.requests)
    assert len(events) == EVENTS * len(paths)
