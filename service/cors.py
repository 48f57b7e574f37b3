"""CORS for the one route browser scripts call: ``POST /api/waitlist``, never with credentials."""

from __future__ import annotations

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import empty

PREFLIGHT_MAX_AGE = "600"  # seconds a browser may reuse a preflight answer


def _allowed(request: Request) -> str | None:
    origin = request.headers.get("origin")
    origins: tuple[str, ...] = request.app.ctx.settings.cors_origins
    return origin if origin and origin in origins else None


def create_blueprint() -> Blueprint:
    bp = Blueprint("cors")

    @bp.options("/api/waitlist")
    async def preflight(request: Request) -> HTTPResponse:
        headers = {"Allow": "OPTIONS, POST", "Vary": "Origin"}
        origin = _allowed(request)
        if origin:
            headers |= {
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": "POST",
                "Access-Control-Allow-Headers": "Content-Type",
                "Access-Control-Max-Age": PREFLIGHT_MAX_AGE,
            }
        return empty(status=204, headers=headers)

    return bp


def cors_headers(request: Request) -> dict[str, str]:
    """Headers for an answer to ``POST /api/waitlist``, success or error alike.

    Set by the handler and the error handler rather than a response middleware: a middleware would
    run on every response of every route, and this is the only route that needs it.
    """
    if not request.app.ctx.settings.cors_origins:
        return {}
    origin = _allowed(request)
    if not origin:
        return {"Vary": "Origin"}
    # A script reads only the safelisted headers of an answer unless told more: Retry-After is how
    # long a 429 or a 503 asks it to wait.
    return {
        "Vary": "Origin",
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Expose-Headers": "Retry-After",
    }
