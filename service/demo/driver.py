"""Plays a plan against the real service, started on loopback and driven over HTTP.

``serve(settings, clock)`` migrates the database and starts the app ``service.app.create_app``
builds (the routes, storage and delivery code ``python -m service serve`` runs) on a free loopback
port, with a clock the caller moves, so every timestamp the service writes is the caller's choice.
``generate`` puts the scenario's partners on receivers, onboards them through the admin API and
plays ``scenario.plan(seed)``: registrations over HTTP, events through ``POST /admin/events``, and
the delivery worker asked to send what is due after each action.

Nothing sleeps to let time pass: the clock moves only when the driver moves it, and the worker sends
only when asked (``send_due``). The driver asks only when something is due: it keeps the service's
next due moment (``next_due``) until a publish, an outage or a drain may have moved it, so the
thousands of registrations, which make nothing due, cost one request each.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from sanic import Sanic

from service.app import create_app
from service.clock import ManualClock, Timer
from service.db.engine import migrate_async
from service.demo import scenario
from service.demo.receivers import LOOPBACK, Endpoint, Receiver, Stopwatch, listening_socket
from service.demo.scenario import Action, Outage, Publish, Submit
from service.ids import IdSource, SeededIds, new_id
from service.settings import Settings
from service.webhooks import claim, runtime
from service.webhooks.worker import Worker

# Deliveries per claim. Everything due is sent before the clock moves again, so this bounds only
# how many are sorted at once.
CLAIM_LIMIT = 100


# --- the service ------------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    body: Any  # parsed JSON, or None when the answer had no JSON body


@dataclass
class Service:
    """The running app, and an HTTP client that talks to it over loopback like any other."""

    app: Sanic[Any, Any]
    base_url: str
    session: aiohttp.ClientSession
    admin_token: str | None

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        form: Mapping[str, str] | None = None,
        admin: bool = False,
    ) -> Response:
        headers = {"Authorization": f"Bearer {self.admin_token}"} if admin else {}
        async with self.session.request(
            method, self.base_url + path, json=json, data=form, headers=headers
        ) as response:
            body = await response.json() if response.content_type == "application/json" else None
            return Response(response.status, body)

    def worker(self, rng: random.Random, timer: Timer = time.perf_counter) -> Worker:
        """The delivery worker on this app's database and clock (the one ``serve`` would start),
        reading attempt durations from ``timer``."""
        return runtime.worker_for(self.app, rng=rng, concurrency=1, timer=timer)


@contextlib.asynccontextmanager
async def serve(settings: Settings, clock: ManualClock, ids: IdSource = new_id) -> AsyncIterator[Service]:
    """Migrate ``settings.database_url``, then serve the app on loopback until the block ends.

    ``ids`` makes the partner ids (``SeededIds`` where what is made must be the same every run).
    """
    await migrate_async(settings.database_url)
    # The delivery worker is not started in the background: callers drive it (send_due).
    app = create_app(settings, clock=clock, run_worker=False, ids=ids)
    sock = listening_socket()
    port = sock.getsockname()[1]
    # Sanic's AsyncioServer leaves its lifecycle methods untyped.
    server: Any = await app.create_server(sock=sock, access_log=False)
    if server is None:  # only with return_asyncio_server=False, which is not asked for
        raise RuntimeError("Sanic did not return a server")
    await server.startup()
    await server.before_start()
    await server.after_start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Service(app, f"http://{LOOPBACK}:{port}", session, settings.admin_token)
    finally:
        await server.before_stop()
        server.close()
        await server.wait_closed()
        await server.after_stop()


async def send_due(worker: Worker) -> int:
    """Send every delivery due at the worker's clock; the attempts made.

    The demo's one use of the delivery worker: the loop production runs, driven until idle. The
    demo's worker has one sender, and claims come in a fixed order (partners in turn, then due
    time, event and partner id, all of them seeded), so its seeded jitter falls on the same
    deliveries in every run.
    """
    return await worker.drain()


async def next_due(service: Service) -> datetime | None:
    """When the service's earliest waiting delivery falls due."""
    async with service.app.ctx.engine.connect() as conn:
        return await claim.next_due(conn)


def _expect(got: object, expected: object, context: object) -> None:
    if got != expected:
        raise RuntimeError(f"the demo expected {expected!r} and the service gave {got!r}: {context!r}")


# --- playing the scenario ---------------------------------------------------------------------


@dataclass
class Summary:
    submissions: int = 0
    accepted: int = 0
    refused: dict[int, int] = field(default_factory=dict)  # status -> count
    events: int = 0
    duplicates: int = 0
    deliveries: int = 0
    attempts: int = 0

    def line(self) -> str:
        refused = sum(self.refused.values())
        return (
            f"{self.submissions} waitlist submissions ({self.accepted} accepted, {refused} refused), "
            f"{len(scenario.PARTNERS)} partners, {self.events} events ({self.duplicates} repeats), "
            f"{self.deliveries} deliveries, {self.attempts} attempts"
        )


class Driver:
    """Plays a plan against a running service, moving the clock from one action to the next."""

    def __init__(
        self,
        service: Service,
        clock: ManualClock,
        worker: Worker,
        receivers: Mapping[str, Receiver],
        endpoints: Mapping[str, Endpoint],
    ) -> None:
        self.service = service
        self.clock = clock
        self.worker = worker
        self.receivers = receivers
        self.endpoints = endpoints
        self.names: dict[str, str] = {}  # partner id -> name
        self.summary = Summary()
        # The service's next due moment as last read, and whether that reading still holds.
        self._due: datetime | None = None
        self._due_known = False

    async def onboard(self) -> None:
        for spec in scenario.PARTNERS:
            body: dict[str, Any] = {"name": spec.name, "url": self.receivers[spec.name].url}
            if spec.events is not None:
                body["events"] = list(spec.events)
            answer = await self.service.request("POST", "/admin/partners", json=body, admin=True)
            _expect(answer.status, 201, answer.body)
            self.names[answer.body["id"]] = spec.name
            self.endpoints[spec.name].secret = answer.body["secret"]

    async def play(self, actions: Sequence[tuple[datetime, Action]]) -> None:
        for at, action in actions:
            await self.deliver_until(at)
            self.clock.set(at)
            await self.perform(action)
            if not isinstance(action, Submit):
                self._due_known = False  # a publish makes deliveries due; an outage changes answers
            due = await self.next_due()
            if due is not None and due <= self.clock():
                await self.deliver_due()
        await self.deliver_until(None)

    async def perform(self, action: Action) -> None:
        if isinstance(action, Submit):
            self.summary.submissions += 1
            if action.form:
                answer = await self.service.request("POST", "/api/waitlist", form=action.body)
            else:
                answer = await self.service.request("POST", "/api/waitlist", json=action.body)
            _expect(answer.status, 200 if action.valid else 400, (action.body, answer.body))
            if answer.status == 200:
                self.summary.accepted += 1
            else:
                self.summary.refused[answer.status] = self.summary.refused.get(answer.status, 0) + 1
        elif isinstance(action, Publish):
            answer = await self.service.request("POST", "/admin/events", json=action.data, admin=True)
            _expect(answer.status, 202, answer.body)
            if action.duplicate:
                _expect(answer.body["deliveries"], 0, "a repeated event must not be delivered again")
                self.summary.duplicates += 1
            self.summary.events += 1
            self.summary.deliveries += answer.body["deliveries"]
        elif isinstance(action, Outage):
            receiver = self.receivers[action.partner]
            await (receiver.stop() if action.down else receiver.start())

    async def deliver_until(self, moment: datetime | None) -> None:
        """Move the clock to each moment a delivery falls due before ``moment`` (None: all), and
        send what is due then (retries, and probes once a circuit's cool-down ends)."""
        while (due := await self.next_due()) is not None and (moment is None or due < moment):
            self.clock.set(max(self.clock(), due))
            if not await self.deliver_due():
                raise RuntimeError(f"a delivery was due at {due} and the worker sent nothing")

    async def deliver_due(self) -> int:
        """Send every delivery due now; the attempts made."""
        sent = await send_due(self.worker)
        self._due_known = False
        self.summary.attempts += sent
        return sent

    async def next_due(self) -> datetime | None:
        """When the service's earliest waiting delivery falls due, read again only after something
        may have moved it (a registration never does: it makes no delivery)."""
        if not self._due_known:
            self._due, self._due_known = await next_due(self.service), True
        return self._due


def demo_settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        admin_token=scenario.DEMO_ADMIN_TOKEN,
        # One client posts everything, so the per-client limit would refuse most of it.
        waitlist_rate_limit="1000000/minute",
        webhook_retry_schedule=scenario.RETRY_SCHEDULE,
        webhook_timeout=scenario.REAL_TIMEOUT,  # the designed one is the stopwatch's
        webhook_allow_private_urls=True,  # the partners' endpoints are on loopback
    )


async def generate(
    path: Path,
    seed: int = scenario.DEFAULT_SEED,
    *,
    registrations: int = scenario.REGISTRATIONS,
    events: int = scenario.EVENTS,
) -> Summary:
    """Fill a new SQLite database at ``path`` by playing ``plan(seed, ...)`` against the service."""
    if path.exists():
        raise FileExistsError(path)
    plan = scenario.plan(seed, registrations, events)
    clock = ManualClock(scenario.START)
    stopwatch = Stopwatch(timeout=scenario.WEBHOOK_TIMEOUT, hold=scenario.REAL_HOLD)
    endpoints = {spec.name: Endpoint(spec, seed, stopwatch=stopwatch) for spec in scenario.PARTNERS}
    async with contextlib.AsyncExitStack() as stack:
        receivers = {name: Receiver(clock, endpoint) for name, endpoint in endpoints.items()}
        for receiver in receivers.values():
            await stack.enter_async_context(receiver)
        ids = SeededIds(clock, f"{seed}/ids")
        service = await stack.enter_async_context(serve(demo_settings(f"sqlite:///{path}"), clock, ids))
        worker = await stack.enter_async_context(service.worker(random.Random(f"{seed}/jitter"), stopwatch))
        driver = Driver(service, clock, worker, receivers, endpoints)
        await driver.onboard()
        await driver.play(plan.actions)
        clock.set(max(clock(), scenario.END))
    refused = {name: endpoint.refused for name, endpoint in endpoints.items() if endpoint.refused}
    if refused:
        raise RuntimeError(f"receivers refused signatures from the service: {refused}")
    return driver.summary
