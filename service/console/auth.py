"""Sign in with the admin token, sign out.

``POST /console/login`` compares the token in constant time; a wrong one counts against the same
per-client throttle as the admin API's bearer tokens, so the form is no easier to guess through,
and, as there, the right one is never refused by it, and a wrong one that cannot be counted (the
store unreachable) is 503.
"""

from __future__ import annotations

import logging

from sanic import Blueprint, HTTPResponse, Request
from sanic.response import redirect

from service.admin import tokens_match
from service.console.pages import Console, forbidden, form, given_twice
from service.console.session import PATH, Session, safe_next, same_origin
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
        if (twice := given_twice(console, request, back=PATH + "/login")) is not None:
            return twice  # neither the first nor the last of two tokens: nothing is tried or counted
        fields = form(request)
        target = safe_next(fields.get("next"))
        attempts = console.attempts(request)
        client = client_key(client_address(request), console.settings.rate_limit_ipv6_prefix)
        expected = console.settings.admin_token or ""
        given = fields.get("token", "")
        # As on the admin API, the right token is checked first and never refused by the
        # throttle, so nobody can lock the operator out by sending wrong ones from its address.
        if expected and tokens_match(given, expected):
            _, value = console.sessions.new()
            response = redirect(target, status=303)
            console.sessions.set_cookie(response, value)
            return response
        try:
            wait = await attempts.refused(client)
            locked = False if wait is not None else await attempts.fail(client)
        except Exception:  # the rate-limit storage is unreachable: no unlimited guessing
            log.warning("console sign-in could not be counted", exc_info=True)
            return console.render(
                request,
                "login.html",
                title="Sign in",
                status=503,
                next=target,
                error="Signing in is briefly unavailable; try again shortly.",
            )
        if wait is not None:
            response = console.render(
                request,
                "login.html",
                title="Sign in",
                status=429,
                next=target,
                error=f"Too many wrong tokens from this address; try again in {wait} seconds.",
            )
            response.headers["Retry-After"] = str(wait)
            return response
        if locked:
            log.warning("console sign-in locked: too many failed attempts", extra={"client": client})
        return console.render(
            request,
            "login.html",
            title="Sign in",
            status=401,
            next=target,
            error="That is not the admin token.",
            wrong=True,  # the token given is at fault (aria-invalid); a 429 or 503 is not about it
        )

    @bp.post("/logout")
    async def logout(request: Request) -> HTTPResponse:
        session: Session = request.ctx.console_session  # the guard let a POST through with its own
        await console.ended(request).end(session, console.sessions.left(session))
        response = redirect(PATH + "/login", status=303)
        console.sessions.clear_cookie(response)
        return response
