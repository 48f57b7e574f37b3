"""The real service, run in this process on loopback, for the demo data and the partner notebooks.

``serve(settings, clock)`` starts the app ``service.app.create_app`` builds (the routes, storage and
delivery code ``python -m service serve`` runs) on a free 127.0.0.1 port, with a clock the caller
moves, so every timestamp the service writes is the caller's choice. ``Receiver`` is a partner's
endpoint on loopback that answers from a script and keeps what arrived.
``capture_signed_deliveries`` puts the two together for the signature notebook.

Nothing here sleeps to let time pass: the clock only moves when the caller moves it, and the
delivery worker is driven step by step (``service.webhooks.worker.Worker.claim`` and ``deliver``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from sanic import Sanic

from service.app import create_app
from service.db.engine import migrate_async
from service.ids import IdSource, SeededIds, new_id
from service.settings import Settings
from service.webhooks import runtime
from service.webhooks.worker import Worker

LOOPBACK = "127.0.0.1"
SETTLE_SECONDS = 0.05  # see Receiver.stop
T = TypeVar("T")


class Clock:
    """A clock that moves only when told to; it never runs backwards."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("the clock needs an aware datetime")
        self._now = start.astimezone(UTC)

    def __call__(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        if moment < self._now:
            raise ValueError(f"the clock cannot go back from {self._now} to {moment}")
        self._now = moment

    def advance(self, seconds: float) -> None:
        self.set(self._now + timedelta(seconds=seconds))


# --- the service ------------------------------------------------------------------------------


@dataclass
class Answer:
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
    ) -> Answer:
        headers = {"Authorization": f"Bearer {self.admin_token}"} if admin else {}
        async with self.session.request(
            method, self.base_url + path, json=json, data=form, headers=headers
        ) as response:
            body = await response.json() if response.content_type == "application/json" else None
            return Answer(response.status, body)

    def worker(self, rng: random.Random) -> Worker:
        """The delivery worker on this app's database and clock (the one ``serve`` would start)."""
        return runtime.worker_for(self.app, rng=rng)


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))  # the kernel picks a free port; nobody else can take it from us
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def serve(settings: Settings, clock: Clock, ids: IdSource = new_id) -> AsyncIterator[Service]:
    """Migrate ``settings.database_url``, then serve the app on loopback until the block ends.

    ``ids`` makes the partner ids (``SeededIds`` where what is made must be the same every run).
    """
    await migrate_async(settings.database_url)
    # The delivery worker is not started in the background: callers drive it (Service.worker).
    app = create_app(settings, clock=clock, run_worker=False, ids=ids)
    sock = _listening_socket()
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


# --- partner endpoints ------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """How a receiver answers one request."""

    status: int = 200
    body: str = "ok"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering; real time, so keep it short


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]  # names lower-cased: HTTP header names are case-insensitive
    body: bytes
    at: datetime  # the receiver's clock on arrival


Script = Callable[[Received], Reply]


def always_ok(_: Received) -> Reply:
    return Reply()


class Receiver:
    """A partner's webhook endpoint on loopback: answers from ``script``, records every request.

    ``stop`` and ``start`` take it off the network and back on the same port, so attempts in
    between meet a refused connection, as they would with a partner that is down.
    """

    def __init__(self, clock: Clock, script: Script = always_ok, path: str = "/webhooks") -> None:
        self.clock = clock
        self.script = script
        self.path = path
        self.received: list[Received] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{self.path}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(self.path, self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = _listening_socket() if not self.port else None
        if sock is not None:
            self.port = sock.getsockname()[1]
            site: web.BaseSite = web.SockSite(self._runner, sock)
        else:
            site = web.TCPSite(self._runner, LOOPBACK, self.port, reuse_address=True)
        await site.start()

    async def stop(self) -> None:
        """Close the port and every open connection; callers then meet a refused connection."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            # Clients in this process (the delivery worker) hold keep-alive connections to us. A
            # moment of real time lets the loop hand them the close, so their next request dials
            # afresh and is refused, as it would be by a partner that is down, instead of writing
            # into a dead connection.
            await asyncio.sleep(SETTLE_SECONDS)

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        headers = {name.lower(): value for name, value in request.headers.items()}
        received = Received(headers, await request.read(), self.clock())
        self.received.append(received)
        reply = self.script(received)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return web.Response(status=reply.status, text=reply.body, headers=dict(reply.headers))


# --- a captured delivery, for the signature notebook ------------------------------------------

CAPTURE_START = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)
# Not a credential: it guards only the capture's own server, on loopback, while it runs.
CAPTURE_ADMIN_TOKEN = "capture-admin-token"  # noqa: S105
CAPTURE_SEED = "capture"  # the partner id the signature notebook shows
ROTATION_GAP = timedelta(minutes=5)  # between the first delivery and the rotation


@dataclass(frozen=True)
class Capture:
    """What a partner's endpoint received from the real service, and the secrets it holds.

    ``first`` was signed with ``old_secret`` alone; ``second`` was sent after a rotation, during
    the overlap, so it carries a signature for ``new_secret`` and one for ``old_secret``.
    """

    old_secret: str
    new_secret: str
    first: Received
    second: Received


async def _capture(database_url: str, events: tuple[Mapping[str, Any], Mapping[str, Any]]) -> Capture:
    clock = Clock(CAPTURE_START)
    settings = Settings(
        database_url=database_url,
        admin_token=CAPTURE_ADMIN_TOKEN,
        webhook_allow_private_urls=True,  # the partner is on loopback
    )
    ids = SeededIds(clock, CAPTURE_SEED)
    async with Receiver(clock) as receiver, serve(settings, clock, ids) as service:
        onboarded = await service.request(
            "POST", "/admin/partners", json={"name": "Example partner", "url": receiver.url}, admin=True
        )
        _expect(onboarded, 201)
        old_secret = onboarded.body["secret"]
        worker = service.worker(random.Random(0))
        async with worker:
            _expect(await service.request("POST", "/admin/events", json=events[0], admin=True), 202)
            await worker.drain()
            clock.advance(ROTATION_GAP.total_seconds())
            path = f"/admin/partners/{onboarded.body['id']}/rotate-secret"
            rotated = await service.request("POST", path, admin=True)
            _expect(rotated, 200)
            _expect(await service.request("POST", "/admin/events", json=events[1], admin=True), 202)
            await worker.drain()
    if len(receiver.received) != 2:
        raise RuntimeError(f"expected two deliveries, the receiver got {len(receiver.received)}")
    first, second = receiver.received
    return Capture(old_secret, rotated.body["secret"], first, second)


def capture_signed_deliveries(
    database_url: str, events: tuple[Mapping[str, Any], Mapping[str, Any]]
) -> Capture:
    """Run the service on a fresh database, onboard a partner on loopback, publish ``events[0]``,
    rotate the partner's secret, publish ``events[1]``, and return both requests as received."""
    return run(_capture(database_url, events))


def _expect(answer: Answer, status: int) -> None:
    if answer.status != status:
        raise RuntimeError(f"the service answered {answer.status}, expected {status}: {answer.body}")


def run(coro: Awaitable[T]) -> T:
    """Run ``coro`` to the end, also from a notebook, whose kernel already runs an event loop."""

    async def main() -> T:
        return await coro

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()
