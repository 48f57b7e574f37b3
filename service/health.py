"""Liveness and readiness probes."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response

from service.db.engine import ping


def create_blueprint() -> Blueprint:
    bp = Blueprint("health")

    @bp.get("/healthz")
    async def healthz(request: Request) -> HTTPResponse:
        return json_response({"ok": True})

    @bp.get("/readyz")
    async def readyz(request: Request) -> HTTPResponse:
        try:
            await ping(request.app.ctx.engine)
        except Exception:
            return json_response(
                {"ok": False, "message": "The database is not reachable.", "database": "down"},
                status=503,
            )
        return json_response({"ok": True, "database": "up"})

    return bp
