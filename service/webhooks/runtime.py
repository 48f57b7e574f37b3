"""Webhooks inside the app: the admin routes, the publish wake-up, the worker's lifecycle, metrics.

``install(app)`` is called once by ``create_app``. What it opens lives on
``app.ctx.extras["webhooks"]`` (a ``Webhooks``): the event publishers set to wake the worker, the
``Sender`` that admin test deliveries go through, and the worker when ``app.ctx.run_worker``.

Tests swap name resolution by setting ``app.ctx.extras["webhook_resolve"]``; it is looked up on
every use, so it may be set after the server started.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

from sanic import Sanic

from service.webhooks import outbox
from service.webhooks.sender import Sender
from service.webhooks.ssrf import Resolve, system_resolve
from service.webhooks.worker import Worker

App = Sanic[Any, Any]
STATE_KEY = "webhooks"
RESOLVE_KEY = "webhook_resolve"


@dataclass
class Webhooks:
    wake: asyncio.Event
    sender: Sender
    worker: Worker | None = None


def state(app: App) -> Webhooks:
    webhooks: Webhooks = app.ctx.extras[STATE_KEY]
    return webhooks


def resolver(app: App) -> Resolve:
    """The app's name resolution, looked up at call time (see the module docstring)."""

    async def resolve(host: str, port: int) -> list[str]:
        current: Resolve = app.ctx.extras.get(RESOLVE_KEY, system_resolve)
        return await current(host, port)

    return resolve


def worker_for(app: App, *, rng: random.Random | None = None, **options: object) -> Worker:
    """A worker on the app's engine, clock, metrics and wake-up (tests pass ``rng`` and options)."""
    ctx = app.ctx
    return Worker(
        ctx.engine,
        settings=ctx.settings,
        clock=ctx.clock,
        metrics=ctx.metrics,
        rng=rng,
        resolve=resolver(app),
        wake=state(app).wake,
        **options,  # type: ignore[arg-type]
    )


async def refresh_metrics(app: App) -> None:
    """Queue depth by state, read from the outbox when /admin/metrics is scraped."""
    async with app.ctx.engine.connect() as conn:
        depth = await outbox.queue_depth(conn)
    for status, count in depth.items():
        app.ctx.metrics.queue_depth.labels(status=status).set(count)


def install(app: App) -> None:
    from service.webhooks import admin

    app.blueprint(admin.create_blueprint())

    async def refresh() -> None:
        await refresh_metrics(app)

    app.ctx.refresh_metrics = refresh

    @app.before_server_start
    async def open_webhooks(app: App) -> None:
        settings = app.ctx.settings
        sender = Sender(
            timeout=settings.webhook_timeout,
            allow_private=settings.webhook_allow_private_urls,
            clock=app.ctx.clock,
            resolve=resolver(app),
            limit=4,  # test deliveries only; the worker has its own pool
        )
        await sender.open()
        app.ctx.extras[STATE_KEY] = Webhooks(wake=asyncio.Event(), sender=sender)

    @app.after_server_start
    async def start_worker(app: App) -> None:
        if app.ctx.run_worker:
            webhooks = state(app)
            webhooks.worker = worker_for(app)
            await webhooks.worker.start()

    @app.before_server_stop
    async def stop_worker(app: App) -> None:
        webhooks = state(app)
        if webhooks.worker is not None:
            await webhooks.worker.stop()
            webhooks.worker = None

    @app.after_server_stop
    async def close_webhooks(app: App) -> None:
        await state(app).sender.close()
