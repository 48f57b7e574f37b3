"""Liveness and readiness probes.

``/healthz`` answers while the process serves. ``/readyz`` answers 200 only when what a
registration needs works: the database answers (within ``PROBE_WITHIN`` seconds, whatever it
does), the rate-limit store answers (``memory://`` always does; Redis may not), and the paths that
do the work are not failing (``service.readiness``): the registration writer's last commits and,
where this process delivers, the worker's last turn. A load balancer then sends no registrations to
a server that would refuse them 503. Each failing part is named in the answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

# /readyz answers within 2 s whatever the database or Redis do: each probe gets this long.
PROBE_WITHIN = 1.5
REGISTRATIONS = "registrations"  # the registration writer's commits
DELIVERY = "delivery"  # the delivery worker's turns

DOWN = {
    (False, True): "The database is not reachable.",
    (True, False): "The rate-limit store is not reachable.",
    (False, False): "The database and the rate-limit store are not reachable.",
}
FAILING = {
    REGISTRATIONS: "Registrations are failing to commit.",
    DELIVERY: "The delivery worker's last turn failed.",
}


async def answers(check: Any) -> bool:
    """Whether ``check`` (an awaitable) came back true within ``PROBE_WITHIN`` seconds: a store that
    does not answer is down, to a probe and to a metrics scrape alike."""
    try:
        async with asyncio.timeout(PROBE_WITHIN):
            return bool(await check)
    except Exception:  # TimeoutError among them
        return False


def readiness(database: bool, limits: bool, failing: list[str]) -> tuple[int, dict[str, Any]]:
    """The status and body of ``/readyz`` for what the probes found."""
    parts: dict[str, Any] = {
        "database": "up" if database else "down",
        "rateLimitStore": "up" if limits else "down",
    }
    if database and limits and not failing:
        return 200, {"ok": True, **parts}
    sentences = [DOWN[database, limits]] if not (database and limits) else []
    sentences += [FAILING[part] for part in failing]
    parts |= {part: "failing" for part in failing}
    return 503, {"ok": False, "message": " ".join(sentences), **parts}


def failing_parts(ctx: Any) -> list[str]:
    """The working paths that said last they fail (the app's ``ctx``): the registration writer's
    commits, and the in-process delivery worker's last turn. ``/readyz`` and the ``service_ready``
    gauge both read them."""
    failing: list[str] = ctx.readiness.failing()
    worker = ctx.webhooks.worker
    if worker is not None and worker.failing and DELIVERY not in failing:
        failing.append(DELIVERY)
    return failing


def create_blueprint() -> Blueprint:
    bp = Blueprint("health")

    @bp.get("/healthz")
    async def healthz(request: Request) -> HTTPResponse:
        return json_response({"ok": True})

    @bp.get("/readyz")
    async def readyz(request: Request) -> HTTPResponse:
        ctx = request.app.ctx
        database, limits = await asyncio.gather(ctx.probe.answers(), answers(ctx.limiter.ready()))
        status, body = readiness(database, limits, failing_parts(ctx))
        return json_response(body, status=status)

    return bp
