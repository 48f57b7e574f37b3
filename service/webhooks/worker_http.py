"""The standalone worker's own port: ``/healthz``, ``/readyz`` and ``/metrics``.

``python -m service worker`` serves these on ``--host``/``--port`` (127.0.0.1:8001 by default),
with aiohttp, which the sender already uses:

- ``/healthz``: 200 while the worker's loop has turned within the last ``stale_after`` seconds,
  503 once it has not; a supervisor restarts a worker stuck on something that never returns. An
  idle loop still turns every poll interval, and one retrying a database that does not answer
  every failed turn, so only a stuck one goes quiet.
- ``/readyz``: 200 while the database answers ``SELECT 1`` within 1.5 s and the loop's last
  transaction did not fail, 503 otherwise.
- ``/metrics``: the worker's own counters (attempts by partner and outcome, attempt durations),
  the outbox and partner gauges read at scrape time (``service.webhooks.scrape``: left out, and
  ``service_ready`` 0, when the database does not answer within 1.5 s), and the loop's
  own: ``service_webhook_worker_last_turn_timestamp_seconds`` (Unix time of its last turn) beside
  ``service_webhook_worker_stale_after_seconds`` (how long ``/healthz`` lets it be quiet), so an
  alert tells exactly what ``/healthz`` tells: ``timestamp(last turn) - last turn > stale after``
  (the scrape's time, not the rule's evaluation's: deploy/prometheus/alerts.yml says why).

Any other path answers 404, and another method on these 405 with ``Allow``, in the service's one
error shape with the sentences the server answers them with (``service.errors``).

The worker tells when its loop last turned through ``Heartbeat``: its ``last_turn`` is
``time.monotonic()`` at the top of each turn.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import Gauge
from sqlalchemy.ext.asyncio import AsyncEngine

from service.clock import Clock
from service.db.engine import (
    POSTGRESQL_COMMAND_TIMEOUT_S,
    POSTGRESQL_CONNECT_TIMEOUT_S,
    SQLITE_BUSY_TIMEOUT_MS,
    Probe,
)
from service.errors import MethodNotAllowed, NotFound
from service.exceptions import error_body
from service.metrics import CONTENT_TYPE, Metrics
from service.webhooks import scrape as gauges

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8001  # the server's default is 8000
PROBE_WITHIN = 1.5  # /readyz answers within 2 s whatever the database does
FAILING = "The delivery worker's last turn failed."
LIVENESS_TURNS = 5  # poll intervals without a turn before the loop counts as stuck
# The longest one use of the database waits before it fails, the database silent: on PostgreSQL the
# pool's pre-ping of a pooled connection (its command timeout), then a fresh connection's attempt
# (its connect timeout); a SQLite write waits for the lock its busy timeout.
DATABASE_WAIT = max(
    POSTGRESQL_COMMAND_TIMEOUT_S + POSTGRESQL_CONNECT_TIMEOUT_S, SQLITE_BUSY_TIMEOUT_MS / 1000
)
# A failed turn waits that long twice without being stuck: for the worker's transaction lock, held
# by a roster beat or a pruning batch failing the same way, then for its own use; the loop's pause
# after it is one of the poll intervals. Only the first failure pays the pre-ping (a timed-out ping
# drops every pooled connection), so a beat and a pruning batch both ahead of it stay within it
# too. A silent PostgreSQL kept turns 20 s apart: a beat's connection attempt, then the turn's.
TURN_DATABASE_WAITS = 2


class Heartbeat(Protocol):
    last_turn: float  # time.monotonic() when the loop last turned


def stale_after(poll_interval: float) -> float:
    """Seconds without a turn after which the loop is stuck, for a worker polling this often."""
    return LIVENESS_TURNS * poll_interval + TURN_DATABASE_WAITS * DATABASE_WAIT


def loop_gauges(metrics: Metrics, last_turn: Callable[[], float], stale_after: float) -> None:
    """Register the delivery loop's gauges on the worker's registry (only a process running the
    standalone worker has them, so no other process reports a loop that never turned)."""
    turned = Gauge(
        "service_webhook_worker_last_turn_timestamp_seconds",
        "Unix time at which the delivery loop last turned (an idle loop turns every poll interval).",
        registry=metrics.registry,
    )
    turned.set_function(last_turn)
    Gauge(
        "service_webhook_worker_stale_after_seconds",
        "Seconds without a turn after which /healthz answers 503 (the loop counts as stuck).",
        registry=metrics.registry,
    ).set(stale_after)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_errors(metrics: Metrics) -> Middleware:
    """aiohttp's plain-text 404 and 405 (its router raises them) as the service's JSON error shape,
    counted as the server counts its own (``service_http_client_errors_total``)."""

    @web.middleware
    async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed as error:
            metrics.inc(metrics.client_errors, "405")
            allow = {"Allow": error.headers["Allow"]}
            return web.json_response(error_body(MethodNotAllowed.message, []), status=405, headers=allow)
        except web.HTTPNotFound:
            metrics.inc(metrics.client_errors, "404")
            return web.json_response(error_body(NotFound.message, []), status=404)

    return answer


def create_app(
    *,
    heartbeat: Heartbeat,
    engine: AsyncEngine,
    metrics: Metrics,
    clock: Clock,
    stale_after: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        quiet = round(monotonic() - heartbeat.last_turn, 3)
        if quiet > stale_after:
            message = "The delivery loop has not turned recently."
            return web.json_response({"ok": False, "message": message, "sinceTurn": quiet}, status=503)
        return web.json_response({"ok": True, "sinceTurn": quiet})

    async def readyz(request: web.Request) -> web.Response:
        if not await probe.answers():
            body = {"ok": False, "message": "The database is not reachable.", "database": "down"}
            return web.json_response(body, status=503)
        if getattr(heartbeat, "failing", False):  # SELECT 1 answers, but the loop's transactions fail
            body = {"ok": False, "message": FAILING, "database": "up", "delivery": "failing"}
            return web.json_response(body, status=503)
        return web.json_response({"ok": True, "database": "up"})

    def last_turn() -> float:
        """The wall-clock time of the last turn, by the clock the worker runs on."""
        return clock().timestamp() - (monotonic() - heartbeat.last_turn)

    loop_gauges(metrics, last_turn, stale_after)

    async def scrape(request: web.Request) -> web.Response:
        # 1 exactly when /readyz would answer 200: the database reachable, the loop's turns working.
        database = await gauges.refresh_gauges(engine, metrics, clock())
        metrics.ready.set(1 if database and not getattr(heartbeat, "failing", False) else 0)
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    probe = Probe(engine, within=PROBE_WITHIN)
    app = web.Application(middlewares=[json_errors(metrics)])
    app.on_cleanup.append(lambda app: probe.close())
    app.on_cleanup.append(lambda app: gauges.close(engine))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", scrape)
    return app


async def start(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Listen on ``host:port`` (port 0: any free port, see ``runner.addresses``); the caller cleans up."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
