"""The error handler: every error, expected or not, leaves as the one JSON error shape. The
console's routes answer theirs as a page (``service.console.pages.failed``) over the same
judgement (``assess``): the same status, headers, log line and count."""

from __future__ import annotations

import logging
from asyncio import CancelledError
from dataclasses import dataclass
from typing import Any

from sanic import HTTPResponse, Request
from sanic.exceptions import SanicException
from sanic.handlers import ErrorHandler
from sanic.response import json as json_response

from service.cors import cors_headers
from service.db.faults import unavailable
from service.errors import RETRY_AFTER_UNAVAILABLE, ServiceError, from_domain
from service.exceptions import DomainError

log = logging.getLogger("service.errors")

# Sanic raises its own exceptions for routing and protocol errors; they get our sentences.
_MESSAGES = {
    400: "The request is not valid.",
    404: "Nothing is here.",
    405: "This method is not allowed here.",
    408: "The request took too long to arrive.",
    413: "The request body is too large.",
    414: "The request target is too long.",
    415: "Send application/json or application/x-www-form-urlencoded.",
    416: "The requested range cannot be served.",
    417: "The service meets no Expect but 100-continue.",
    431: "The request headers are too large.",
    503: "The service is briefly unavailable; try again shortly.",
}
_INTERNAL = "The server could not complete the request."


def _request_line_too_long(request: Request) -> bool:
    """Whether the head Sanic refused as too large has no line end within its limit: what is left
    unread on the connection (the protocol's ``recv_buffer``) is the request line still."""
    protocol = request.transport.get_protocol() if request.transport is not None else None
    unread = getattr(protocol, "recv_buffer", None)
    if not unread:
        return False
    return b"\r\n" not in unread[: request.app.config.REQUEST_MAX_HEADER_SIZE]


@dataclass(frozen=True, slots=True)
class Failure:
    """What an error answers, whatever the page shows it: the status, the JSON body (its
    ``message`` the sentence a client may read) and the headers (``Retry-After``, ``Allow``)."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str]


def assess(request: Request, exception: BaseException) -> Failure:
    """The answer ``exception`` earns, logged at its level and counted by status: the one judgement
    behind the API's JSON (``error_response``) and the console's page (``service.console.pages``)."""
    if isinstance(exception, DomainError):
        exception = from_domain(exception)
    if isinstance(exception, ServiceError):
        status, body = exception.status_code, exception.body()
        headers = dict(exception.headers or {})
    elif isinstance(exception, SanicException) and 400 <= exception.status_code < 500:
        status = exception.status_code
        if status == 413 and not request.head:
            # Raised before a head was read (the request Sanic answers with has none): the head
            # itself was over Sanic's limit, not a body. Its request line alone, when no line
            # ended within the limit (RFC 9112 section 3: 414); otherwise its header lines.
            status = 414 if _request_line_too_long(request) else 431
        body = {"ok": False, "message": _MESSAGES.get(status, "The request is not valid.")}
        headers = dict(getattr(exception, "headers", None) or {})
        if "Allow" in headers:  # Sanic lists a set: in another order in each process, sorted here
            headers["Allow"] = ", ".join(sorted(method.strip() for method in headers["Allow"].split(",")))
    elif unavailable(exception):
        # The storage cannot do the work now (unreachable, silent, full, read-only): the client may
        # try again shortly; nothing was accepted. A fault of the machine's, not a bug: no ERROR.
        status = 503
        log.warning(
            "storage unavailable",
            exc_info=(type(exception), exception, exception.__traceback__),
            extra={"path": request.path, "method": request.method},
        )
        body = {"ok": False, "message": _MESSAGES[503]}
        headers = {"Retry-After": str(RETRY_AFTER_UNAVAILABLE)}
    else:
        status = getattr(exception, "status_code", 500)
        status = status if isinstance(status, int) and status >= 500 else 500
        log.error(
            "unhandled error",
            exc_info=(type(exception), exception, exception.__traceback__),
            extra={"path": request.path, "method": request.method},
        )
        body = {"ok": False, "message": _MESSAGES.get(status, _INTERNAL)}
        headers = {}
    count(request, status)
    return Failure(status, body, headers)


def count(request: Request, status: int) -> None:
    """Count an error answer by its status, once a request (``service_http_client_errors_total``,
    ``service_http_server_errors_total``), whichever part of the service gives it."""
    metrics = getattr(request.app.ctx, "metrics", None)
    if metrics is None or status < 400 or getattr(request.ctx, "counted", False):
        return
    request.ctx.counted = True
    metrics.inc(metrics.client_errors if status < 500 else metrics.server_errors, str(status))


def error_response(request: Request, exception: BaseException) -> HTTPResponse:
    """The answer to any error: the one JSON shape, CORS on the waitlist route, counted by status.

    The error handler calls this for whatever a route raises (but a console route's, which the
    console answers with a page); a route may call it itself for a ``ServiceError`` it catches
    (``POST /api/waitlist`` does, for its 400s, 413s and 415s), which answers the same bytes
    without Sanic's exception dispatch.
    """
    if isinstance(exception, CancelledError):
        # The client went away (Sanic's RequestCancelled): nobody reads this answer, and any client
        # can do it at will, so it is a DEBUG line, never an ERROR, and counts in no metric.
        log.debug("the client went away", extra={"path": request.path, "method": request.method})
        return json_response({"ok": False, "message": _MESSAGES[400]}, status=400)
    failure = assess(request, exception)
    headers = dict(failure.headers)
    if request.method == "POST" and request.path.rstrip("/") == "/api/waitlist":  # the route takes both
        headers |= cors_headers(request)
    return json_response(failure.body, status=failure.status, headers=headers)


class JSONErrorHandler(ErrorHandler):
    def default(self, request: Request, exception: BaseException) -> HTTPResponse:
        return error_response(request, exception)
