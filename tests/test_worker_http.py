"""The standalone worker's port: /healthz from its loop's turns, /readyz from the database, /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from webhook_helpers import Receiver, onboard, publish, room_claimed, settings

from service.clock import ManualClock
from service.db.engine import POSTGRESQL_COMMAND_TIMEOUT_S, POSTGRESQL_CONNECT_TIMEOUT_S, create_engine
from service.metrics import Metrics
from service.webhooks import worker_http

UNREACHABLE = "postgresql://nobody@127.0.0.1:9/none"  # a closed port: refused at once


@dataclass
class Beat:
    """A loop that last turned at ``last_turn`` (monotonic seconds)."""

    last_turn: float


class Monotonic:
    """A monotonic clock the test sets."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def listening(
    database_url: str, clock: ManualClock, *, heartbeat: Beat | None = None,
    monotonic: Callable[[], float] | None = None, metrics: Metrics | None = None,
) -> AsyncIterator[str]:
    """The worker's app on a free loopback port; yields its base URL."""
    engine = create_engine(database_url)
    app = worker_http.create_app(
        heartbeat=heartbeat or Beat(100.0),
        engine=engine,
        metrics=metrics or Metrics(),
        clock=clock,
        stale_after=worker_http.stale_after(1.0),
        monotonic=monotonic or Monotonic(100.0),
    )
    runner = await worker_http.start(app, "127.0.0.1", 0)
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
        await engine.dispose()


@asynccontextmanager
async def serving(
    database_url: str, clock: ManualClock, *, heartbeat: Beat | None = None,
    monotonic: Callable[[], float] | None = None, metrics: Metrics | None = None,
) -> AsyncIterator[Callable[[str], Any]]:
    """The worker's app on a free loopback port; yields ``get(path) -> (status, body)``."""
    async with (
        listening(database_url, clock, heartbeat=heartbeat, monotonic=monotonic, metrics=metrics) as base,
        aiohttp.ClientSession() as session,
    ):

        async def get(path: str) -> tuple[int, Any, str]:
            async with session.get(f"{base}{path}") as response:
                text = await response.text()
                body = await response.json() if response.content_type == "application/json" else text
                return response.status, body, response.headers["Content-Type"]

        yield get


# What one use of a silent PostgreSQL waits before it fails (service.db.engine's limits): a pooled
# connection's pre-ping (the command timeout), then a fresh connection's attempt (the connect
# timeout); once a ping has failed the pool drops the connections it held, and later uses wait for a
# connection attempt alone. A failed turn's wait: the worker's lock, held by a roster beat and a
# pruning batch failing too, then its own use; then the loop pauses one poll interval (1 s here).
PING, CONNECT, POLL = POSTGRESQL_COMMAND_TIMEOUT_S, POSTGRESQL_CONNECT_TIMEOUT_S, 1.0
SEEN_FAILED_TURN = CONNECT + CONNECT + POLL  # a beat's attempt, then the turn's: what the audit saw
LONGEST_FAILED_TURN = (PING + CONNECT) + CONNECT + CONNECT + POLL
STUCK = "The delivery loop has not turned recently."


@pytest.mark.parametrize(
    ("quiet", "status", "body"),
    [
        (0.25, 200, {"ok": True, "sinceTurn": 0.25}),
        (SEEN_FAILED_TURN, 200, {"ok": True, "sinceTurn": 21.0}),
        (LONGEST_FAILED_TURN, 200, {"ok": True, "sinceTurn": 41.0}),
        (45.0, 200, {"ok": True, "sinceTurn": 45.0}),  # five poll intervals and two database waits
        (45.5, 503, {"ok": False, "message": STUCK, "sinceTurn": 45.5}),
        (3600.0, 503, {"ok": False, "message": STUCK, "sinceTurn": 3600.0}),
    ],
)
async def test_healthz_follows_the_loops_turns(sqlite_url: str, clock: ManualClock, quiet: float, status: int, body: Any) -> None:
    """Alive while the loop turned within the last few poll intervals, or is retrying a database
    that does not answer (a turn failing after the longest it waits on it); 503 once it is stuck."""
    monotonic = Monotonic(1000.0)
    async with serving(sqlite_url, clock, heartbeat=Beat(1000.0 - quiet), monotonic=monotonic) as get:
        answer = await get("/healthz")
    assert answer[:2] == (status, body)


async def test_a_stuck_loop_is_seen_without_waiting(sqlite_url: str, clock: ManualClock) -> None:
    """The same worker goes from alive to stuck as the monotonic clock moves past the window."""
    beat, monotonic = Beat(50.0), Monotonic(50.0)
    async with serving(sqlite_url, clock, heartbeat=beat, monotonic=monotonic) as get:
        assert (await get("/healthz"))[0] == 200
        monotonic.now += worker_http.stale_after(1.0) + 0.001
        assert (await get("/healthz"))[0] == 503
        beat.last_turn = monotonic.now  # it turned again
        assert (await get("/healthz"))[0] == 200


async def test_a_loop_retrying_a_silent_database_never_goes_stale(sqlite_url: str, clock: ManualClock) -> None:
    """Turn after turn failing after the longest wait on the database, each turn starting as the
    last one's pause ends: /healthz answers 200 throughout, and 503 once the loop stops turning."""
    beat, monotonic = Beat(0.0), Monotonic(0.0)
    async with serving(sqlite_url, clock, heartbeat=beat, monotonic=monotonic) as get:
        for _ in range(5):
            monotonic.now += LONGEST_FAILED_TURN  # the turn failed, the loop paused
            assert (await get("/healthz"))[:2] == (200, {"ok": True, "sinceTurn": LONGEST_FAILED_TURN})
            beat.last_turn = monotonic.now  # the next turn begins
        monotonic.now += worker_http.stale_after(POLL) + 0.5  # it stopped turning
        assert (await get("/healthz"))[0] == 503


def test_the_window_is_five_poll_intervals_and_two_database_waits() -> None:
    """Derived from the engine's limits, not a figure of its own: 45 s at the default poll interval."""
    assert worker_http.DATABASE_WAIT == PING + CONNECT
    assert worker_http.stale_after(POLL) == 5 * POLL + 2 * (PING + CONNECT) == 45.0
    assert worker_http.stale_after(POLL) >= LONGEST_FAILED_TURN


@pytest.mark.parametrize(
    ("url", "status", "body"),
    [
        (None, 200, {"ok": True, "database": "up"}),
        (UNREACHABLE, 503, {"ok": False, "message": "The database is not reachable.", "database": "down"}),
    ],
)
async def test_readyz_is_the_databases(sqlite_url: str, clock: ManualClock, url: str | None, status: int, body: Any) -> None:
    """Ready while the database answers, 503 when it cannot be reached."""
    async with serving(url or sqlite_url, clock) as get:
        answer = await get("/readyz")
    assert answer[:2] == (status, body)


def test_metrics_carry_attempts_by_partner_and_the_outbox(make_client: Any, database_url: str, clock: ManualClock) -> None:
    """Prometheus text: the worker's attempts by partner and outcome, and what waits per partner."""
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
    asyncio.run(_scrape_and_check(database_url, clock, partner["id"]))


async def _scrape_and_check(database_url: str, clock: ManualClock, partner_id: str) -> None:
    metrics = Metrics()
    metrics.inc(metrics.delivery_attempts, partner_id, "retry")
    metrics.inc(metrics.delivery_attempts, partner_id, "delivered")
    clock.advance(30)
    async with serving(database_url, clock, metrics=metrics) as get:
        status, text, content_type = await get("/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[("service_webhook_attempts_total", (("outcome", "retry"), ("partner", partner_id)))] == 1.0
    assert samples[("service_webhook_attempts_total", (("outcome", "delivered"), ("partner", partner_id)))] == 1.0
    assert samples[("service_webhook_deliveries_waiting", (("partner", partner_id),))] == 1.0
    assert samples[("service_webhook_oldest_waiting_seconds", (("partner", partner_id),))] == 30.0
    assert samples[("service_webhook_queue_depth", (("status", "pending"),))] == 1.0


@pytest.mark.parametrize(
    ("method", "path", "status", "body", "allow"),
    [
        ("GET", "/", 404, {"ok": False, "message": "Nothing is here."}, None),
        ("GET", "/healthz/more", 404, {"ok": False, "message": "Nothing is here."}, None),
        ("POST", "/nowhere", 404, {"ok": False, "message": "Nothing is here."}, None),
        ("POST", "/healthz", 405, {"ok": False, "message": "This method is not allowed here."}, "GET,HEAD"),
        ("DELETE", "/readyz", 405, {"ok": False, "message": "This method is not allowed here."}, "GET,HEAD"),
        ("PUT", "/metrics", 405, {"ok": False, "message": "This method is not allowed here."}, "GET,HEAD"),
    ],
)
async def test_other_paths_and_methods_are_answered_in_the_services_error_shape(
    sqlite_url: str, clock: ManualClock, method: str, path: str, status: int, body: Any, allow: str | None
) -> None:
    """An unknown path is 404 and another method on a probe 405 with Allow, as JSON with the
    sentences the server answers them with, not aiohttp's plain text; counted as the server counts
    its own (``service_http_client_errors_total``)."""
    async with listening(sqlite_url, clock) as base, aiohttp.ClientSession() as session:
        async with session.request(method, f"{base}{path}") as response:
            answered = (response.status, response.content_type, await response.json(content_type=None))
            assert response.headers.get("Allow") == allow
        async with session.get(f"{base}/metrics") as scraped:
            text = await scraped.text()
    assert answered == (status, "application/json", body)
    assert f'service_http_client_errors_total{{status="{status}"}} 1.0' in text
