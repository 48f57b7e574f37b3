"""Admin routes and the guard in front of every ``/admin`` path.

With ``SERVICE_ADMIN_TOKEN`` set, every request whose path is under ``/admin`` must carry it as a
bearer token, whatever its path or method: every admin route checks it first, and what routing
refuses (an unknown path, a wrong method) checks it before answering, so an unknown path or a
wrong method answers 401 like any other, and nothing (404 against 405, an ``Allow`` header) maps
the routes to a client without the token. Without a token the whole prefix answers 404.
Wrong tokens are counted per client on the rate-limit storage; a client over the limit is answered
429 for its wrong tokens until its window frees a slot. A request without credentials counts
nothing, and the right token is never refused by the throttle.

Other prefixes may answer what routing refuses under them their own way (``guard``'s
``elsewhere``: the console's pages, with its session check and security headers).

Every admin blueprint also records who is calling (the client address) for the audit trail
(``service.audit``), which the operations write; the waitlist routes are thin adapters over
``service.registrations_ops``.
"""

from __future__ import annotations

import hmac
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from limits import RateLimitItem, parse
from limits.aio.storage import Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from sanic import Blueprint, HTTPResponse, Request, Sanic
from sanic.exceptions import MethodNotAllowed, SanicException
from sanic.exceptions import NotFound as SanicNotFound
from sanic.response import json as json_response
from sanic.response import raw
from sqlalchemy.ext.asyncio import AsyncEngine

from service import audit
from service.bodies import read_no_body
from service.errors import (
    NotFound,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
)
from service.handlers import error_response
from service.health import answers, failing_parts
from service.metrics import CONTENT_TYPE, Metrics
from service.params import one_each, query_pairs, refuse_unknown
from service.paths import unescape_unreserved
from service.ratelimit import client_key
from service.registrations_ops import Page, RegistrationOperations
from service.waitlist import client_address

log = logging.getLogger(__name__)

PREFIX = "/admin"
# Failed bearer tokens one client may present: a 32-character token is out of reach at ten
# guesses a minute, and a script holding a stale token is stopped before it floods the logs.
FAILED_ATTEMPTS_LIMIT = "10/minute"
SCOPE = "admin-auth"  # the counters' key space, apart from the waitlist's on the same storage


class FailedAttempts:
    """Failed admin authentications per client: limits' sliding-window counter on ``storage``.

    The storage is the rate limiter's (``SERVICE_RATE_LIMIT_STORAGE``), so with Redis every
    process counts against one limit per client.
    """

    def __init__(self, storage: Storage, limit: str = FAILED_ATTEMPTS_LIMIT) -> None:
        self._strategy = SlidingWindowCounterRateLimiter(storage)
        self._item: RateLimitItem = parse(limit)

    async def refused(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, when it is over the limit; else None."""
        if await self._strategy.test(self._item, SCOPE, client):
            return None
        return await self._retry_after(client)

    async def fail(self, client: str) -> bool:
        """Count one failed attempt; True when ``client`` has now used up the limit."""
        counted = await self._strategy.hit(self._item, SCOPE, client)
        return not counted or not await self._strategy.test(self._item, SCOPE, client)

    async def _retry_after(self, client: str) -> int:
        stats = await self._strategy.get_window_stats(self._item, SCOPE, client)
        return max(1, math.ceil(stats.reset_time - time.time()))


def is_under(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or below it (``/admin/x``, never ``/administrator``)."""
    return path == prefix or path.startswith(prefix + "/")


def is_admin_path(path: str) -> bool:
    return is_under(path, PREFIX)


def tokens_match(given: str, expected: str) -> bool:
    """Whether a token a client sent is the expected one, in constant time whatever it holds.

    Compared as bytes. A header's bytes that are not UTF-8 reach the service as surrogate escapes
    (b"\\x80" as "\\udc80"), and a form part in another charset can decode to a lone surrogate:
    each is kept as bytes of its own (``surrogatepass``), so such a token is a wrong token like any
    other instead of an error."""
    return hmac.compare_digest(_as_bytes(given), _as_bytes(expected))


def _as_bytes(token: str) -> bytes:
    return token.encode("utf-8", "surrogatepass")


def _bearer(request: Request) -> str | None:
    """The bearer token the request carries; None when it carries no credentials at all."""
    scheme, _, given = (request.headers.get("authorization") or "").partition(" ")
    given = given.strip()
    return given if scheme.lower() == "bearer" and given else None


async def check_token(request: Request) -> None:
    """Let the request through, or raise 404 (no token configured), 429 (too many wrong tokens) or
    401.

    Only wrong tokens are counted and throttled (docs/architecture.md "Faults and slow clients"): a
    request without credentials is a plain 401 that counts nothing, and the right token is never
    refused by the throttle, so nobody can lock the operator out by sending requests.
    """
    if getattr(request.ctx, "admin", False):
        return  # already checked for this request
    expected: str | None = request.app.ctx.settings.admin_token
    if not expected:
        raise NotFound()
    given = _bearer(request)
    if given is not None and tokens_match(given, expected):
        request.ctx.admin = True
        return
    challenge = {"WWW-Authenticate": 'Bearer realm="admin"'}
    if given is None:
        raise Unauthorized(headers=challenge)
    attempts: FailedAttempts = request.app.ctx.admin_attempts
    # Counted per client as the waitlist counts them: a whole IPv6 /64 is one guesser.
    client = client_key(client_address(request), request.app.ctx.settings.rate_limit_ipv6_prefix)
    try:
        wait = await attempts.refused(client)
        locked = False if wait is not None else await attempts.fail(client)
    except Exception as error:  # the rate-limit storage is unreachable: no unlimited guessing
        log.warning("admin authentication could not be counted", exc_info=True)
        raise ServiceUnavailable() from error
    if wait is not None:
        raise TooManyRequests(wait)
    if locked:  # said once, when the client reaches the limit, not on every refusal after it
        log.warning("admin authentication locked: too many failed attempts", extra={"client": client})
    raise Unauthorized(headers=challenge)


# The answer to a request routing refused (404, or 405 with its ``Allow``) under a prefix that
# answers those its own way.
Unrouted = Callable[[Request, SanicException], Awaitable[HTTPResponse]]


def guard(
    app: Sanic[Any, Any],
    elsewhere: Mapping[str, Unrouted] | None = None,
    otherwise: Unrouted | None = None,
) -> None:
    """Answer unknown ``/admin`` paths and wrong methods like any request without the token, and
    those under each prefix of ``elsewhere`` with that prefix's own answer.

    The admin blueprints check the token on every route they have (``admin_blueprint``); what
    routing refuses (404, 405 with its ``Allow``) reaches this handler instead, which checks the
    token first, so a client without it learns nothing about which routes exist. A blueprint's
    middleware never runs for a request no route took, so the console, whose guard and headers
    are its blueprint's, answers its own refusals through ``elsewhere``. Only refused requests pay
    for this: a signal or an app-wide middleware would cost every request of the service. What no
    prefix owns is answered by ``otherwise`` (the documents' respelling, ``service.discovery.routes``).
    """
    owners = dict(elsewhere or {})

    async def unrouted(request: Request, exception: SanicException) -> HTTPResponse:
        # Whose answer this is goes by the path as RFC 3986 compares it: ``/%61dmin/x`` is
        # ``/admin/x``, and must not be respelled to it (a 308 for a route, 404 for none) before
        # the token is asked for.
        path = unescape_unreserved(request.path)
        if is_admin_path(path):
            try:
                await check_token(request)
            except SanicException as refused:  # 404 (no token configured), 401, 429, 503
                return error_response(request, refused)
        for prefix, answer in owners.items():
            if is_under(path, prefix):
                return await answer(request, exception)
        if otherwise is not None:
            return await otherwise(request, exception)
        return error_response(request, exception)

    app.exception(SanicNotFound, MethodNotAllowed)(unrouted)


def record_actor(request: Request) -> None:
    """Who the operations of this request act for, in the audit trail: the client address."""
    audit.act_as(client_address(request))


def admin_blueprint(name: str, *, queries: Collection[str] = ()) -> Blueprint:
    """A blueprint under /admin whose every route demands the bearer token, and whose routes but
    ``queries`` (handler names; they read their parameters themselves) take no query parameters."""
    bp = Blueprint(name, url_prefix=PREFIX)
    bp.on_request(check_token, priority=100)
    bp.on_request(record_actor, priority=99)

    def refuse_stray_parameters(request: Request) -> None:
        route = request.route
        if request.query_string and route is not None and route.handler.__name__ not in queries:
            refuse_unknown(query_args(request), ())

    bp.on_request(refuse_stray_parameters, priority=98)
    return bp


def query_args(request: Request) -> dict[str, str]:
    """The query string as one value per name; a name given twice is refused, never guessed at.

    Blank (``name=``) and bare (``name``) parameters are kept: dropped, an unknown or repeated
    name would pass unseen, and ``status=`` would list every status."""
    return one_each(query_pairs(request.query_string, keep_blank=True))


def _registrations(request: Request) -> RegistrationOperations:
    return RegistrationOperations(request.app.ctx.engine)


# Sets the gauges read from the database as of a moment; whether the database could be read
# (``service.webhooks.scrape.refresh_gauges``, handed in by the app: the webhooks stand above this).
RefreshGauges = Callable[[AsyncEngine, Metrics, datetime], Awaitable[bool]]


def create_blueprint(refresh_gauges: RefreshGauges) -> Blueprint:
    bp = admin_blueprint("admin", queries=("waitlist", "erase"))

    @bp.get("/waitlist")
    async def waitlist(request: Request) -> HTTPResponse:
        page = Page.parse(query_args(request))
        return json_response(await _registrations(request).list_registrations(page))

    @bp.delete("/waitlist")
    async def erase(request: Request) -> HTTPResponse:
        # The address is the query's; a body meant to narrow the erasure (an intent) is refused,
        # never ignored: ignored, it would see every registration of the address erased.
        read_no_body(request)
        args = query_args(request)
        refuse_unknown(args, ("email",))
        return json_response(await _registrations(request).erase_registrations(args.get("email")))

    @bp.get("/metrics")
    async def metrics(request: Request) -> HTTPResponse:
        ctx = request.app.ctx
        database = await refresh_gauges(ctx.engine, ctx.metrics, ctx.clock())
        # 1 exactly when /readyz would answer 200: storage reachable, and no working path failing.
        # The rate-limit store is asked as /readyz asks it: a Redis that does not answer is down
        # within the probe's bound, where it held the scrape past Prometheus's scrape timeout.
        ready = database and await answers(ctx.limiter.ready()) and not failing_parts(ctx)
        ctx.metrics.ready.set(1 if ready else 0)
        return raw(
            ctx.metrics.render(),
            content_type=CONTENT_TYPE,
        )

    return bp
