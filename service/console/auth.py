"""Sign in with the admin token, sign out.

``POST /console/login`` compares the token in constant time; a wrong one counts against the same
per-client throttle as the admin API's bearer tokens, so the form is no easier to guess through.
"""

from __future__ import annotations

import logging

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import redirect

from service.admin import tokens_match
from service.console.pages import Console, forbidden, form
from service.console.session import PATH, safe_next, same_origin
from service.ratelimit import client_key
from service.waitlist import client_address

log = logging.getLogger(__name__)


def register(bp: Blueprint, console: Console) -> None:
    @bp.get("/login")
    async def login_page(request: Request) -> HTTPResponse:
        return console.render(
            request, "login.html", title="Sign in", next=safe_next(request.args.get("next")), error=None
        )

    @bp.post("/login")
    async def login(request: Request) -> HTTPResponse:
        if not same_origin(request, console.settings.base_url):
            return forbidden(console, request)
        fields = form(request)
        target = safe_next(fields.get("next"))
        attempts = console.attempts(request)
        client = client_key(client_address(request), console.settings.rate_limit_ipv6_prefix)
        expected = console.settings.admin_token or ""
        given = fields.get("token", "")
        wait = await attempts.refused(client)
        if wait is not None:
            response = console.render(
                request,
                "login.html",
                status=429,
                next=target,
                error=f"Too many wrong tokens from this address; try again in {wait} seconds.",
            )
            response.headers["Retry-After"] = str(wait)
            return response
        if not tokens_match(given, expected):
            if await attempts.fail(client):
                log.warning("console sign-in locked: too many failed attempts", extra={"client": client})
            return console.render(
                request,
                "login.html",
                title="Sign in",
                status=401,
                next=target,
                error="That is not the admin token.",
            )
        _, value = console.sessions.new()
        response = redirect(target, status=303)
        console.sessions.set_cookie(response, value)
        return response

    @bp.post("/logout")
    async def logout(request: Request) -> HTTPResponse:
        response = redirect(PATH + "/login", status=303)
        console.sessions.clear_cookie(response)
        return response
