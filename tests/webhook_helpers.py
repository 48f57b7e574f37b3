"""A real HTTP receiver on loopback for the webhook tests, and small shared helpers.

The receiver is an aiohttp server on its own thread and loop, so it answers whatever loop the
service runs on (a test client's, a subprocess's). Each path answers from a script of ``Reply``s
(then 200 "ok"), and every request is recorded with its headers and raw body.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from service.keyring import Keyring, parse_keys
from service.webhooks import runtime

ADMIN_TOKEN = "admin-test-token-of-the-webhook-tests"
# A fixed Fernet key (32 bytes of 0x01) for tests that need SERVICE_SECRETS_KEY (PostgreSQL).
TEST_SECRETS_KEY = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
AUTH = {"authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: str = "ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (real time: keep it short)
    drop: bool = False  # close the connection without an answer
    hold: threading.Event | None = None  # answer only once the test sets it (at most 30 s)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on arrival
    in_progress: int = 1  # requests to its path being answered on arrival, this one included


class Receiver:
    def __init__(self, default: Reply | None = None) -> None:
        self.default = default or Reply()
        self.requests: list[Received] = []
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._in_progress: dict[str, int] = defaultdict(int)
        self.peak: dict[str, int] = defaultdict(int)  # the most requests to a path answered at once

    def __enter__(self) -> Receiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]  # (host, port) of the socket it bound

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def script(self, path: str, *replies: Reply | int) -> None:
        """Answer the next requests to ``path`` with these (a bare int is a status)."""
        with self._lock:
            self._scripts[path].extend(
                reply if isinstance(reply, Reply) else Reply(status=reply) for reply in replies
            )

    def to(self, path: str) -> list[Received]:
        with self._lock:
            return [request for request in self.requests if request.path == path]

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Block until ``predicate(requests)`` holds, or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self.requests)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        path = request.path
        with self._changed:
            self._in_progress[path] += 1
            now = self._in_progress[path]
            self.peak[path] = max(self.peak[path], now)
            self.requests.append(Received(path, dict(request.headers), body, time.time(), now))
            self._changed.notify_all()
            script = self._scripts[path]
            reply = script.popleft() if script else self.default
        try:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if reply.hold is not None:
                await asyncio.get_running_loop().run_in_executor(None, reply.hold.wait, 30)
            if reply.drop:
                assert request.transport is not None
                request.transport.close()
                return web.Response()
            return web.Response(status=reply.status, text=reply.body, headers=reply.headers)
        finally:
            with self._lock:
                self._in_progress[path] -= 1


def fixed_keyring() -> Keyring:
    """A keyring over ``TEST_SECRETS_KEY``."""
    return parse_keys(TEST_SECRETS_KEY)


def settings(receiver_timeout: float = 5.0, **overrides: Any) -> dict[str, Any]:
    """Settings overrides for a webhook test app: admin on, loopback allowed, short schedule."""
    options: dict[str, Any] = {
        "admin_token": ADMIN_TOKEN,
        "webhook_allow_private_urls": True,
        "webhook_retry_schedule": (10, 60, 600),
        "webhook_timeout": receiver_timeout,
    }
    options.update(overrides)
    return options


def room_claimed(slug: str = "moonfrog", **members: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "event": "room.claimed",
        "slug": slug,
        "roomUrl": f"https://launchrooms.example/rooms/{slug}",
        "project": "Moonfrog",
        "ticker": "FROG",
        "chain": "solana",
        "roomType": "official_owner",
    }
    data.update(members)
    return data


async def seed_outbox(
    engine: Any, clock: Any, targets: list[tuple[str, str, int | None]], events: int, keyring: Keyring
) -> None:
    """Onboard each ``(name, url, cap)`` of ``targets``, then publish ``events`` room.claimed
    events (one delivery each for every partner)."""
    from service.events import parse_event
    from service.webhooks import outbox, partners
    from service.webhooks.partners import NewPartner

    async with engine.begin() as conn:
        for name, url, cap in targets:
            await partners.create_partner(conn, NewPartner(name, url, None, cap), now=clock(), keyring=keyring)
    for index in range(events):
        await outbox.publish_event(engine, parse_event(room_claimed(f"room-{index}"), now=clock()), now=clock())


def trending(number: int) -> dict[str, Any]:
    """A room.trending event, a kind a partner may have batched."""
    return {
        "event": "room.trending",
        "slug": f"room-{number}",
        "roomUrl": f"https://launchrooms.example/rooms/room-{number}",
        "metric": "visits",
        "value": 1000 + number,
        "window": "24h",
    }


def milestone(label: str = "1,000 rooms", value: int = 1000, **members: Any) -> dict[str, Any]:
    return {"event": "platform.milestone", "milestone": label, "value": value, **members}


def onboard(client: Any, url: str, **body: Any) -> dict[str, Any]:
    response = client.post("/admin/partners", json={"name": "Partner", "url": url, **body}, headers=AUTH)
    assert response.status == 201, response.json
    document: dict[str, Any] = response.json
    return document


def publish(client: Any, data: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/admin/events", json=data, headers=AUTH)
    assert response.status == 202, response.json
    document: dict[str, Any] = response.json
    return document


def deliveries(client: Any, **query: str) -> list[dict[str, Any]]:
    response = client.get("/admin/deliveries", params=query, headers=AUTH)
    assert response.status == 200, response.json
    found: list[dict[str, Any]] = response.json["deliveries"]
    return found


def drain(client: Any, seed: int = 7, **options: Any) -> int:
    """Run the app's worker until nothing is due at the test clock's time."""

    async def go() -> int:
        async with runtime.worker_for(client.app, rng=random.Random(seed), **options) as worker:
            return await worker.drain()

    result: int = client.run(go())
    return result
