"""A metrics scrape against a database that does not answer: it answers within its bound, with
service_ready 0 and without the database gauges (README "Metrics"), for the server's /admin/metrics
and the standalone worker's /metrics alike, so Prometheus sees a process not ready rather than a
target down. The database here is silent for real (a port that accepts and never answers, as a
link gone silent) or its read is held by the test; the bound is the test's own, 0.05 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service import health
from service.clock import ManualClock
from service.db.engine import create_engine
from service.metrics import Metrics
from service.webhooks import scrape, stats, worker_http
from service.webhooks.stats import OutboxStats, Waiting
from tests.webhook_helpers import AUTH, settings

BOUND = 0.05  # the scrape's wait for the database in these tests
ORDINARY = scrape.DATABASE_WITHIN
ANSWERED_WITHIN = 1.0  # the bound, and room for a busy test machine: far from the engine's 10 s
DATABASE_GAUGES = ("service_webhook_queue_depth", "service_webhook_workers")  # with or without partners


@asynccontextmanager
async def silent_database() -> AsyncIterator[tuple[str, list[asyncio.StreamWriter]]]:
    """A PostgreSQL URL whose server accepts connections and never says a word; the connections
    it accepted."""
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"postgresql://nobody@127.0.0.1:{port}/silent", accepted
    finally:
        for writer in accepted:
            writer.close()
        server.close()


@dataclass
class Beat:
    """A loop that last turned at ``last_turn`` (monotonic seconds)."""

    last_turn: float


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def names(text: str) -> set[str]:
    return {name for name, _ in samples(text)}


def test_the_bound_is_the_readiness_probes() -> None:
    """service_ready says 0 for the database exactly where /readyz would: the same bound."""
    assert scrape.DATABASE_WITHIN == health.PROBE_WITHIN == worker_http.PROBE_WITHIN


async def test_a_silent_database_is_not_waited_on_past_the_bound(clock: ManualClock) -> None:
    """refresh_gauges gives up on a database that accepts and never answers within the bound: the
    gauges it had set are dropped, and it says the database could not be read. A scrape while that
    read is still under way waits on it again, never opening another connection to the link."""
    metrics = Metrics()
    metrics.set_outbox(OutboxStats({}, {"ptn_a": Waiting(3)}), clock())
    async with silent_database() as (url, accepted):
        engine = create_engine(url, bounded=True)
        try:
            began = time.monotonic()
            async with asyncio.timeout(5):
                read = await scrape.refresh_gauges(engine, metrics, clock(), within=BOUND)
            took = time.monotonic() - began
            async with asyncio.timeout(5):
                again = await scrape.refresh_gauges(engine, metrics, clock(), within=BOUND)
            connections = len(accepted)
        finally:
            await scrape.close(engine)
            await engine.dispose()
    assert (read, again) == (False, False)
    assert BOUND <= took < ANSWERED_WITHIN
    assert connections == 1
    assert not names(metrics.render().decode()) & {"service_webhook_deliveries_waiting"}


class HeldRead:
    """``stats.outbox_stats`` held until the test lets it answer (a database that answers late)."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.calls = 0
        self._read = stats.outbox_stats

    async def __call__(self, conn: Any) -> OutboxStats:
        self.calls += 1
        await self.answer.wait()
        return await self._read(conn)


async def test_a_read_that_answers_late_serves_the_next_scrape(sqlite_url: str, clock: ManualClock) -> None:
    """A read past the bound is left to finish: the scrapes meanwhile answer 0 and wait on that one
    read; once it has answered, the next scrape reads afresh and sets the gauges again."""
    held = HeldRead()
    metrics = Metrics()
    engine = create_engine(sqlite_url)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(stats, "outbox_stats", held)
            assert not await scrape.refresh_gauges(engine, metrics, clock(), within=BOUND)
            assert not await scrape.refresh_gauges(engine, metrics, clock(), within=BOUND)
            assert held.calls == 1
            held.answer.set()
            assert await scrape.refresh_gauges(engine, metrics, clock())  # the ordinary bound
    finally:
        await scrape.close(engine)
        await engine.dispose()
    assert "service_webhook_queue_depth" in names(metrics.render().decode())


async def test_the_workers_metrics_answer_when_its_database_is_silent(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standalone worker's /metrics, its database silent: 200 within the bound, service_ready 0,
    no database gauge, its own counters and loop gauges still there."""
    monkeypatch.setattr(scrape, "DATABASE_WITHIN", BOUND)
    metrics = Metrics()
    metrics.inc(metrics.delivery_attempts, "ptn_a", "delivered")
    async with silent_database() as (url, _):
        engine = create_engine(url, bounded=True)
        app = worker_http.create_app(
            heartbeat=Beat(100.0),
            engine=engine,
            metrics=metrics,
            clock=clock,
            stale_after=worker_http.stale_after(1.0),
            monotonic=lambda: 100.0,
        )
        runner = await worker_http.start(app, "127.0.0.1", 0)
        host, port = runner.addresses[0][:2]
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
                began = time.monotonic()
                async with session.get(f"http://{host}:{port}/metrics") as response:
                    status, text = response.status, await response.text()
                took = time.monotonic() - began
        finally:
            await runner.cleanup()  # stops the read still under way
            await engine.dispose()
    assert status == 200 and took < ANSWERED_WITHIN
    found = samples(text)
    assert found[("service_ready", ())] == 0.0
    assert not names(text) & set(DATABASE_GAUGES)
    assert found[("service_webhook_attempts_total", (("outcome", "delivered"), ("partner", "ptn_a")))] == 1.0
    assert ("service_webhook_worker_last_turn_timestamp_seconds", ()) in found


def test_the_servers_metrics_answer_when_its_database_does_not(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/admin/metrics while the database does not answer: 200 within the bound, service_ready 0 and
    no database gauge; once it answers, the next scrape has them again, and service_ready 1."""
    held = HeldRead()
    monkeypatch.setattr(stats, "outbox_stats", held)
    monkeypatch.setattr(scrape, "DATABASE_WITHIN", BOUND)
    with make_client(**settings()) as client:
        began = time.monotonic()
        response = client.get("/admin/metrics", headers=AUTH)
        took = time.monotonic() - began
        client.run(_let_answer(held))
        monkeypatch.setattr(scrape, "DATABASE_WITHIN", ORDINARY)
        after = client.get("/admin/metrics", headers=AUTH).text
    assert response.status == 200 and took < ANSWERED_WITHIN
    assert samples(response.text)[("service_ready", ())] == 0.0
    assert not names(response.text) & set(DATABASE_GAUGES)
    assert samples(after)[("service_ready", ())] == 1.0
    assert set(DATABASE_GAUGES) <= names(after)


async def _let_answer(held: HeldRead) -> None:
    held.answer.set()


def test_the_servers_metrics_answer_when_its_rate_limit_store_does_not(
    make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rate-limit store (Redis) that does not answer is asked as /readyz asks it: the scrape
    answers within the probe's bound, service_ready 0, the database gauges kept."""
    monkeypatch.setattr(health, "PROBE_WITHIN", BOUND)
    with make_client(**settings()) as client:

        async def silent() -> bool:
            await asyncio.Event().wait()  # never set: a store that accepted and says nothing
            return True

        monkeypatch.setattr(client.app.ctx.limiter, "ready", silent)
        began = time.monotonic()
        response = client.get("/admin/metrics", headers=AUTH)
        took = time.monotonic() - began
    assert response.status == 200 and took < ANSWERED_WITHIN
    assert samples(response.text)[("service_ready", ())] == 0
    assert set(DATABASE_GAUGES) <= names(response.text)
