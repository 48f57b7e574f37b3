"""Liveness and readiness probes.

``/healthz`` answers while the process serves. ``/readyz`` answers 200 only when what a
registration needs answers too: the database and the rate-limit store (``memory://`` always does;
Redis may not), so a load balancer sends no registrations to a server that would refuse them 503.
"""

from __future__ import annotations

import asyncio

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from service.db.engine import reachable

DOWN = {
    (False, True): "The database is not reachable.",
    (True, False): "The rate-limit store is not reachable.",
    (False, False): "The database and the rate-limit store are not reachable.",
}


def create_blueprint() -> Blueprint:
    bp = Blueprint("health")

    @bp.get("/healthz")
    async def healthz(request: Request) -> HTTPResponse:
        return json_response({"ok": True})

    @bp.get("/readyz")
    async def readyz(request: Request) -> HTTPResponse:
        ctx = request.app.ctx
        database, limits = await asyncio.gather(reachable(ctx.engine), ctx.limiter.ready())
        parts = {"database": "up" if database else "down", "rateLimitStore": "up" if limits else "down"}
        if database and limits:
            return json_response({"ok": True, **parts})
        return json_response({"ok": False, "message": DOWN[database, limits], **parts}, status=503)

    return bp
