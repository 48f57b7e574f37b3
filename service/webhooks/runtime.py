"""Webhooks inside the app: the test-delivery sender, the operations, the worker's lifecycle.

``install(app)`` is called once by ``create_app``. What it opens is declared on the app's
``Context``: ``ctx.webhooks`` (the publish wake-up, the ``Sender`` test deliveries go through, and
the worker when ``ctx.run_worker``) and ``ctx.operations``, which the admin routes call.

Name resolution is looked up on ``ctx.resolve`` at every use, so tests may swap it after the
server started.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from sanic import Sanic

from service.webhooks import wiring
from service.webhooks.operations import Operations
from service.webhooks.send import Sender
from service.webhooks.ssrf import Resolve
from service.webhooks.worker import Worker

App = Sanic[Any, Any]


@dataclass
class Webhooks:
    wake: asyncio.Event  # set when deliveries become due in this process
    sender: Sender
    worker: Worker | None = None


class AppNotifier:
    """What an operation's changes mean inside the server: wake the worker, refresh the rooms."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def deliveries_due(self) -> None:
        self._ctx.webhooks.wake.set()

    def rooms_changed(self) -> None:
        self._ctx.discovery.rooms_changed()


def resolver(ctx: Any) -> Resolve:
    """The app's name resolution, looked up at call time (see the module docstring)."""

    async def resolve(host: str, port: int) -> list[str]:
        current: Resolve = ctx.resolve
        return await current(host, port)

    return resolve


def worker_for(app: App, *, rng: random.Random | None = None, **options: Any) -> Worker:
    """A worker on the app's engine, clock, metrics and wake-up (tests pass ``rng`` and options)."""
    ctx = app.ctx
    return wiring.worker(
        ctx.engine,
        ctx.settings,
        clock=ctx.clock,
        metrics=ctx.metrics,
        rng=rng,
        resolve=resolver(ctx),
        wake=ctx.webhooks.wake,
        keyring=ctx.keyring,
        **options,
    )


def install(app: App) -> None:
    @app.before_server_start
    async def open_webhooks(app: App) -> None:
        ctx = app.ctx
        settings = ctx.settings
        sender = wiring.sender(settings, clock=ctx.clock, resolve=resolver(ctx))
        await sender.open()
        ctx.webhooks = Webhooks(wake=asyncio.Event(), sender=sender)
        ctx.operations = Operations(
            ctx.engine,
            settings,
            ctx.clock,
            sender,
            resolve=resolver(ctx),
            notifier=AppNotifier(ctx),
            ids=ctx.ids,
            keyring=ctx.keyring,
        )

    @app.after_server_start
    async def start_worker(app: App) -> None:
        if app.ctx.run_worker:
            webhooks = app.ctx.webhooks
            webhooks.worker = worker_for(app, role="serve")
            await webhooks.worker.start()

    @app.before_server_stop
    async def stop_worker(app: App) -> None:
        webhooks = app.ctx.webhooks
        if webhooks.worker is not None:
            await webhooks.worker.stop()
            webhooks.worker = None

    @app.after_server_stop
    async def close_webhooks(app: App) -> None:
        await app.ctx.webhooks.sender.close()
