"""``POST /api/waitlist``: the one write operation of the public API.

The request model is the contract: the same pydantic model validates bodies and feeds the OpenAPI
document. Validation errors become field errors with stable codes; a valid registration is answered
200 only after its row is committed (``BatchWriter.submit`` returns after the commit).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from email_validator import EmailNotValidError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError
from sanic import Blueprint, HTTPResponse, Request
from sanic.config import Config
from sanic.exceptions import InvalidHeader
from sanic.headers import AcceptList
from sanic.response import raw

from service.bodies import FORM, media_type, read_body
from service.cors import cors_headers
from service.db.registrations import Intent, Registration, email_key
from service.emails import check_email
from service.errors import BadRequest, FieldError, ServiceError, ServiceUnavailable, TooManyRequests
from service.handlers import error_response
from service.proxies import trusted_peer
from service.text import CODE as TEXT_CODE
from service.text import (
    LINE_PATTERN,
    LINES_PATTERN,
    NOT_UNICODE_MESSAGE,
    line_fault,
    lines_fault,
    text_fault,
)
from service.wire import omit_nulls

ACCEPTED = "You are on the waitlist. We will write when early access opens."
# Every 200 is the same bytes, first registration or repeat: rendered once.
_ACCEPTED_BODY = json.dumps({"ok": True, "message": ACCEPTED}, separators=(",", ":")).encode()


# The text members' limits, in characters, once trimmed.
EMAIL_MAX = 254  # RFC 5321's path limit, which email-validator enforces
_OPTIONAL_TEXT = {"project": 120, "message": 600}


def _trimmed(value: str, limit: int, fault: Callable[[str], str | None]) -> str:
    """``value`` trimmed, then held to ``fault``'s rule (service.text) and to ``limit``: what is
    checked is what is stored, and the spaces around a value, never stored, never make it too long."""
    value = value.strip()
    # Refused before storage, so a client's mistake never becomes a server error.
    if (reason := fault(value)) is not None:
        raise PydanticCustomError(TEXT_CODE, reason)
    if len(value) > limit:
        raise PydanticCustomError("too_long", "This field is too long.", {"max_length": limit})
    return value


def _email(value: str) -> str:
    value = _trimmed(value, EMAIL_MAX, text_fault)
    try:
        check_email(value)
    except EmailNotValidError:
        raise PydanticCustomError("invalid_email", "This is not a valid email address.") from None
    return value


def _project(value: str) -> str:
    # One line, as a partner's name: it is a label in the console, the export and terminals.
    return _trimmed(value, _OPTIONAL_TEXT["project"], line_fault)


def _message(value: str) -> str:
    # The same, but it may run over several lines, and hold tabs.
    return _trimmed(value, _OPTIONAL_TEXT["message"], lines_fault)


# What JSON Schema can say of the checks above: the characters refused, and the lengths (of what
# is sent: it has no words for "once trimmed"). Lone surrogates cannot be written in UTF-8 JSON at
# all, and email-validator's rules on special-use domains have no schema keyword, so the email
# member's description states them.
NO_NUL = "^[^\\u0000]*$"
Email = Annotated[
    str,
    AfterValidator(_email),
    Field(json_schema_extra={"format": "email", "maxLength": EMAIL_MAX, "pattern": NO_NUL}),
]
Project = Annotated[
    str,
    AfterValidator(_project),
    Field(json_schema_extra={"maxLength": _OPTIONAL_TEXT["project"], "pattern": LINE_PATTERN}),
]
Message = Annotated[
    str,
    AfterValidator(_message),
    Field(json_schema_extra={"maxLength": _OPTIONAL_TEXT["message"], "pattern": LINES_PATTERN}),
]


class WaitlistRequest(BaseModel):
    """A registration of interest: claim a room, follow rooms, or add arcade."""

    model_config = ConfigDict(
        extra="forbid", strict=True, title="WaitlistRequest", json_schema_extra=omit_nulls
    )

    email: Email = Field(
        description=(
            "Contact address for early access. Checked by email-validator without DNS: at most "
            "254 characters, and special-use domains (localhost, .test, .invalid, .local, ...) "
            "are refused."
        ),
    )
    intent: Intent = Field(
        description="claim a room, follow rooms (member), or add arcade."
    )
    # Optional but never null: a default of None that the type itself does not admit, so an explicit
    # `null` is a type error (docs/architecture.md "Waitlist intake": nulls are 400) while an absent
    # member stays None.
    project: Project = Field(  # type: ignore[assignment]
        default=None, description="Project, ticker, collection or launch name."
    )
    message: Message = Field(  # type: ignore[assignment]
        default=None, description="Context for the service team."
    )


class WaitlistResponse(BaseModel):
    model_config = ConfigDict(title="WaitlistResponse", json_schema_extra=omit_nulls)

    ok: bool = Field(description="true: the registration is stored (a repeat answers the same).")
    message: str | None = Field(default=None, description="A sentence to show the person registering.")


_CODES = {
    "missing": ("missing", "This field is required."),
    "extra_forbidden": ("unknown_field", "This field is not accepted."),
    "string_type": ("invalid_type", "This field must be a string."),
    "literal_error": ("invalid_choice", "This field must be one of: claim, member, arcade."),
    "too_long": ("too_long", "This field is too long."),
    "string_unicode": ("invalid_characters", NOT_UNICODE_MESSAGE),
}


def _field_error(detail: ErrorDetails) -> FieldError:
    field = ".".join(str(part) for part in detail["loc"]) or "body"
    kind = detail["type"]
    if kind in _CODES:
        code, message = _CODES[kind]
        if code == "too_long":
            limit = (detail.get("ctx") or {}).get("max_length")
            message = f"This field must be at most {limit} characters."
        return FieldError(field, code, message)
    if kind in ("invalid_email", "invalid_characters"):
        return FieldError(field, kind, detail["msg"])
    return FieldError(field, "invalid", "This field is not valid.")


def _blank_optional_as_absent(body: dict[str, Any]) -> dict[str, Any]:
    # An HTML form sends `project=` when the box is left empty; that means "not given", and so does
    # a value of spaces alone, whatever its length: trimmed, as every text member is, nothing is left.
    return {
        key: value
        for key, value in body.items()
        if not (key in _OPTIONAL_TEXT and isinstance(value, str) and not value.strip())
    }


def parse_registration(body: dict[str, Any], now: datetime) -> Registration:
    try:
        request = WaitlistRequest.model_validate(_blank_optional_as_absent(body))
    except ValidationError as error:
        errors = sorted({_field_error(detail) for detail in error.errors()}, key=lambda e: e.field)
        raise BadRequest("The waitlist registration is not valid.", errors=errors) from None
    return Registration(
        email=request.email,
        email_key=email_key(request.email),
        intent=request.intent,
        project=request.project,
        message=request.message,
        at=now,
    )


def trusts_proxies(config: Config) -> bool:
    """Whether Sanic is set to read client addresses from proxy headers at all."""
    return bool(config.PROXIES_COUNT or config.REAL_IP_HEADER or config.FORWARDED_SECRET)


def client_address(request: Request) -> str:
    # remote_addr is filled only from the proxy headers Sanic is configured to read
    # (PROXIES_COUNT, REAL_IP_HEADER, FORWARDED_SECRET), and believed only when the connection's
    # own peer is a trusted proxy (service.proxies), or when it comes from a Forwarded element
    # carrying FORWARDED_SECRET, which proves the proxy whatever its address; otherwise the peer
    # counts. With none of the settings on, the headers are not parsed at all (a few µs a request).
    ctx = request.app.ctx
    if ctx.trusts_proxies and (trusted_peer(request.ip, ctx.trusted_proxies) or _vouched_by_secret(request)):
        return request.remote_addr or request.ip
    return request.ip


def _vouched_by_secret(request: Request) -> bool:
    """Whether Sanic took the forwarded details from a ``Forwarded`` element that carries
    ``SANIC_FORWARDED_SECRET``, as ``secret=`` or as ``by=`` (which Sanic reads as an address, so
    lowercased unless it starts with ``_``). Sanic reads such an element only when the secret
    matches; X-Forwarded-For and REAL_IP_HEADER never give either member."""
    secret = request.app.config.FORWARDED_SECRET
    if not secret:
        return False
    forwarded = request.forwarded
    return forwarded.get("secret") == secret or forwarded.get("by") in (secret, secret.lower())


# What a refusal's redirect may name as the field: the form's own fields, never a name the client made up.
FORM_FIELDS = frozenset({"email", "intent", "project", "message", "body"})


def from_html_form(request: Request) -> bool:
    """A browser's form post: URL-encoded, and its Accept prefers text/html to JSON (ties go to JSON)."""
    if media_type(request)[0] != FORM:
        return False
    try:
        accept = request.accept
    except InvalidHeader:  # an Accept no one can read prefers nothing: JSON, as for a tie
        return False
    html = _quality(accept, "text", "html")
    return html > 0 and html > _quality(accept, "application", "json")


def _quality(accept: AcceptList, kind: str, subtype: str) -> float:
    """The weight ``accept`` gives ``kind/subtype``: that of the most specific range matching it
    (``text/html`` over ``text/*`` over ``*/*``, RFC 9110 section 12.5.1), media types compared
    without regard to case; 0 when none matches. Sanic's ``AcceptList.match`` takes the heaviest
    range that matches either type, so ``application/json;q=0.1, */*`` would prefer JSON."""
    found, weight = -1, 0.0
    for media in accept:
        given = (media.type.lower(), media.subtype.lower())
        specific = {(kind, subtype): 2, (kind, "*"): 1, ("*", "*"): 0}.get(given, -1)
        if specific > found:
            found, weight = specific, media.q
    return weight


def refused_url(redirect: str, error: ServiceError) -> str:
    """``redirect`` with ``error`` (the code of the first field at fault) and ``field`` in its query.

    Both are words the service chose (codes and the form's field names), URL-encoded; nothing the
    client sent is written back.
    """
    first = error.field_errors[0] if error.field_errors else None
    query = [("error", first.code if first else "invalid")]
    if first is not None and first.field in FORM_FIELDS:
        query.append(("field", first.field))
    parts = urlsplit(redirect)
    merged = "&".join(part for part in (parts.query, urlencode(query)) if part)
    return urlunsplit(parts._replace(query=merged))


def see_other(location: str) -> HTTPResponse:
    """303: the browser fetches ``location`` with GET (a reload never posts the form again).

    Sanic gives every 303 a Content-Type, ``application/octet-stream`` unless told, which names a
    download: the empty body is declared as text instead."""
    headers = {"Location": location, "Cache-Control": "no-store"}
    return raw(b"", status=303, headers=headers, content_type="text/plain; charset=utf-8")


def create_blueprint(clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Blueprint:
    bp = Blueprint("waitlist")

    @bp.post("/api/waitlist")
    async def register(request: Request) -> HTTPResponse:
        ctx = request.app.ctx
        try:
            retry_after = await ctx.limiter.hit(client_address(request))
        except Exception as error:  # the rate-limit storage is unreachable: accept nothing unlimited
            raise ServiceUnavailable() from error  # logged where it failed, once per batch of hits
        if retry_after is not None:
            ctx.metrics.waitlist_limited.inc()
            raise TooManyRequests(retry_after)
        # Accept is parsed only where the operator asked for redirects: the hot path stays as it was.
        redirect = ctx.settings.waitlist_redirect_url
        if redirect and not from_html_form(request):
            redirect = None
        try:
            registration = parse_registration(read_body(request), clock())
        except ServiceError as error:  # the client's mistake: answered here, not raised through Sanic
            if redirect:
                ctx.metrics.inc(ctx.metrics.client_errors, str(error.status_code))  # refused all the same
                return see_other(refused_url(redirect, error))
            return error_response(request, error)
        try:
            await ctx.registrations.submit(registration)
        except Exception as error:
            raise ServiceUnavailable() from error
        ctx.metrics.inc(ctx.metrics.registrations, registration.intent)
        if redirect:
            return see_other(redirect)
        return raw(_ACCEPTED_BODY, content_type="application/json", headers=cors_headers(request))

    return bp
