"""Admin routes: bearer-token guarded, hidden (404) when no token is configured, never in OpenAPI."""

from __future__ import annotations

import hmac

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import json as json_response
from sanic.response import raw

from service.db import registrations as store
from service.errors import BadRequest, FieldError, NotFound, Unauthorized

MAX_PAGE = 10_000  # entries per page of /admin/waitlist: a page of JSON stays a few MB at most


def check_token(request: Request) -> None:
    expected: str | None = request.app.ctx.settings.admin_token
    if not expected:
        raise NotFound()
    scheme, _, given = (request.headers.get("authorization") or "").partition(" ")
    # compare_digest on bytes: constant time whatever the token holds.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        raise Unauthorized(headers={"WWW-Authenticate": 'Bearer realm="admin"'})


def admin_blueprint(name: str) -> Blueprint:
    """A blueprint under /admin whose every route demands the bearer token."""
    bp = Blueprint(name, url_prefix="/admin")
    bp.on_request(check_token, priority=100)
    return bp


def int_arg(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.args.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(
            errors=[FieldError(name, "invalid", f"Must be a whole number from {low} to {high}.")]
        )
    return int(text)


def create_blueprint() -> Blueprint:
    bp = admin_blueprint("admin")

    @bp.get("/waitlist")
    async def waitlist(request: Request) -> HTTPResponse:
        limit = int_arg(request, "limit", 1000, 1, MAX_PAGE)
        offset = int_arg(request, "offset", 0, 0, 2**62)
        async with request.app.ctx.engine.connect() as conn:
            entries = await store.list_registrations(conn, limit=limit, offset=offset)
        return json_response({"entries": entries})

    @bp.get("/metrics")
    async def metrics(request: Request) -> HTTPResponse:
        refresh = getattr(request.app.ctx, "refresh_metrics", None)
        if refresh is not None:
            await refresh()
        return raw(
            request.app.ctx.metrics.render(),
            content_type="text/plain; version=0.0.4; charset=utf-8",
        )

    return bp
