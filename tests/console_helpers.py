"""The console served for a real browser: the app on its own thread and loop, on a loopback port.

Playwright's sync API cannot run inside an asyncio loop, so the server's loop runs on a thread of
its own (Sanic's reusable test server, as ``conftest.Client`` uses it); the test drives the browser
from the main thread, reads what the admin API reports over real HTTP, and runs the delivery
worker on the server's loop when it wants deliveries made (``drain``, on the test's clock).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Coroutine
from typing import Any

from sanic_testing.reusable import ReusableClient
from webhook_helpers import ADMIN_TOKEN

from service.app import create_app
from service.clock import ManualClock
from service.settings import Settings
from service.webhooks import runtime


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ConsoleServer:
    """``with ConsoleServer(database_url, clock) as server:`` serves the app at ``server.base_url``."""

    def __init__(self, database_url: str, clock: ManualClock, **overrides: Any) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        options: dict[str, Any] = {
            "database_url": database_url,
            "base_url": self.base_url,
            "admin_token": ADMIN_TOKEN,
            "webhook_allow_private_urls": True,
            "webhook_retry_schedule": (10,),
            "webhook_timeout": 5.0,
            "waitlist_rate_limit": "1000/minute",
        }
        options.update(overrides)
        self.settings = Settings(**options)
        self.clock = clock
        self.app = create_app(self.settings, clock=clock)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._failure: BaseException | None = None

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        client = ReusableClient(self.app, port=self.port, loop=self._loop)
        try:
            client.run()
        except BaseException as error:  # told to the test on the main thread
            self._failure = error
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        client.stop()
        # Connections a browser kept alive: closed here, on this loop, before it is closed.
        left = asyncio.all_tasks(self._loop)
        for task in left:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))

    def __enter__(self) -> ConsoleServer:
        self._thread.start()
        self._ready.wait(30)
        if self._failure is not None:
            raise RuntimeError("the console server did not start") from self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    def drain(self) -> int:
        """Deliver everything due at the clock's time, as a worker would."""

        async def go() -> int:
            async with runtime.worker_for(self.app, rng=random.Random(7)) as worker:
                return await worker.drain()

        done: int = self.call(go())
        return done

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """The admin API's JSON answer (None for 204)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - our own loopback server
            self.base_url + path,
            data=data,
            method=method,
            headers={"authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            raw = answer.read()
        return json.loads(raw) if raw else None

    def register(self, email: str, intent: str = "member", **members: Any) -> None:
        """One registration through the public waitlist API."""
        body = json.dumps({"email": email, "intent": intent, **members}).encode()
        request = urllib.request.Request(  # noqa: S310 - our own loopback server
            self.base_url + "/api/waitlist", data=body, method="POST",
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            assert answer.status in (200, 201), answer.status


def sign_in(page: Any, base_url: str, token: str = ADMIN_TOKEN) -> None:
    page.goto(base_url + "/console/login")
    page.get_by_label("Admin token").fill(token)
    page.get_by_role("button", name="Sign in").click()
