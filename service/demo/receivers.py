"""Partners' webhook endpoints on loopback: real HTTP servers that answer from a script.

``Receiver`` is an endpoint that keeps every request it received and answers each with what its
script says; ``Endpoint`` is the script of one of the scenario's partners, which checks the
signature like a real partner would and then answers as its ``PartnerSpec`` says, from a draw
seeded by what the attempt carries. A ``Stopwatch`` is the worker's timer for attempt durations,
moved by the endpoints by what each answer is designed to take.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from aiohttp import web

from service.clock import Clock
from service.demo.scenario import TRANSIT, PartnerSpec
from service.webhooks import signing

LOOPBACK = "127.0.0.1"
SETTLE_SECONDS = 0.05  # see Receiver.stop


def listening_socket() -> socket.socket:
    """A socket listening on a free loopback port the kernel picked, so nobody else can take it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


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
        sock = listening_socket() if not self.port else None
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


class Stopwatch:
    """A ``service.clock.Timer`` that moves only when told: the demo worker reads attempt durations
    from it, so they are the same every run, where real time would vary with the machine's load.

    An endpoint moves it by what its answer is designed to take plus a seeded transit time. No
    attempt lasts longer than ``timeout`` (the worker's), however long an endpoint sits on it. The
    demo worker sends one attempt at a time, so each reading spans one attempt only.
    """

    def __init__(self, timeout: float, hold: float | None = None) -> None:
        self.timeout = timeout
        # How long an answer designed to miss the timeout is really held: past the worker's own
        # timeout (scenario.REAL_HOLD). None: its designed delay.
        self.hold = hold
        self.reading = 0.0

    def __call__(self) -> float:
        return self.reading

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a stopwatch cannot go back")
        self.reading += min(seconds, self.timeout)


@dataclass
class Endpoint:
    """A scenario partner's script: checks the signature, then answers as ``spec`` says.

    With a ``stopwatch``, the time an answer takes is told to it rather than spent: the answer comes
    at once, unless it is one the worker must not get in time, which is held past the timeout.
    Without one, every answer waits its designed delay in real time.
    """

    spec: PartnerSpec
    seed: int
    secret: str = ""  # known once the partner is onboarded
    refused: int = 0  # deliveries whose signature did not verify; the generator expects none
    stopwatch: Stopwatch | None = None

    def __call__(self, received: Received) -> Reply:
        try:
            signing.verify(received.headers, received.body, self.secret, now=received.at.timestamp())
        except signing.SignatureError as error:
            self.refused += 1
            return Reply(401, str(error))
        event_id = json.loads(received.body)["eventId"]
        stamp = received.headers[signing.TIMESTAMP_HEADER]
        # One draw per attempt, from what the attempt carries: the same in every run, whatever
        # order the attempts arrive in.
        draws = random.Random(f"{self.seed}/{self.spec.name}/{event_id}/{stamp}")
        answer = self.spec.answer(draws.random(), received.at)
        delay = answer.delay
        if self.stopwatch is not None:
            self.stopwatch.advance(delay + draws.uniform(*TRANSIT))
            if delay < self.stopwatch.timeout:
                delay = 0.0
            elif self.stopwatch.hold is not None:
                delay = max(delay, self.stopwatch.hold)
        return Reply(answer.status, answer.body, dict(answer.headers), delay)
