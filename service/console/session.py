"""Signing in and out, the session cookie, and what guards every console request.

The session is an itsdangerous ``URLSafeTimedSerializer`` value holding a random session id and
a CSRF token, signed with a key derived from the admin token (a new token signs everyone out) and
valid for eight hours of the app's clock. Signing out ends the session on the server too: its id is
kept as ended, until its eight hours are up, in the rate limiter's store (``EndedSessions``; with
Redis, every server refuses it), so a copy of the cookie taken before is refused. Every POST must
carry the session's CSRF token and come from the base URL's origin (``Origin``, else ``Referer``);
anything else is 403 and changes nothing.
Wrong tokens at sign-in count against the admin API's throttle (``service.admin.FailedAttempts``).

One-time messages after an action (post/redirect/get), and a partner's new secret, travel in a
short-lived cookie sealed with Fernet under another key derived from the token: unreadable to
anyone else, unforgeable, and gone once the page that shows it is served.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from itsdangerous import BadSignature, TimestampSigner, URLSafeTimedSerializer
from limits.aio.storage import Storage
from sanic import HTTPResponse, Request

from service.admin import tokens_match
from service.clock import Clock
from service.text import text_fault

COOKIE = "console_session"
FLASH_COOKIE = "console_flash"
PATH = "/console"
SESSION_SECONDS = 8 * 3600  # a working day; then sign in again
FLASH_SECONDS = 300  # a message waits this long for the page after its action
CSRF_FIELD = "csrf"


def _derive(token: str, purpose: str) -> bytes:
    return hmac.new(token.encode(), f"service console {purpose}".encode(), hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Session:
    id: str
    csrf: str
    issued: int = 0  # when it was signed in, seconds since the epoch on the app's clock


class Sessions:
    """Makes, reads and seals what the console keeps in cookies, bound to one admin token."""

    def __init__(self, admin_token: str, clock: Clock, *, secure: bool) -> None:
        self.secure = secure
        self._clock = clock
        clock_seconds = self._seconds

        class ClockSigner(TimestampSigner):
            def get_timestamp(self) -> int:
                return clock_seconds()

        self._serializer = URLSafeTimedSerializer(
            _derive(admin_token, "session"), salt="console-session", signer=ClockSigner
        )
        self._fernet = Fernet(base64.urlsafe_b64encode(_derive(admin_token, "flash")))

    def _seconds(self) -> int:
        return int(self._clock().timestamp())

    def new(self) -> tuple[Session, str]:
        session = Session(secrets.token_urlsafe(16), secrets.token_urlsafe(32), self._seconds())
        return session, self._serializer.dumps({"sid": session.id, "csrf": session.csrf})

    def left(self, session: Session) -> int:
        """Seconds until ``session`` expires of itself (0 once it has)."""
        return max(0, session.issued + SESSION_SECONDS - self._seconds())

    def read(self, request: Request) -> Session | None:
        value = request.cookies.get(COOKIE)
        if not value:
            return None
        try:
            data, signed_at = self._serializer.loads(value, max_age=SESSION_SECONDS, return_timestamp=True)
        except (BadSignature, UnicodeEncodeError):  # a forged, stale or old-token value, or not text
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(key), str) for key in ("sid", "csrf")):
            return None
        return Session(data["sid"], data["csrf"], int(signed_at.timestamp()))

    def set_cookie(self, response: HTTPResponse, value: str) -> None:
        self._cookie(response, COOKIE, value, SESSION_SECONDS)

    def clear_cookie(self, response: HTTPResponse) -> None:
        self._cookie(response, COOKIE, "", 0)

    def _cookie(self, response: HTTPResponse, name: str, value: str, seconds: int) -> None:
        """Set one of the console's cookies, or with ``seconds`` 0 delete it. A deletion carries the
        attributes the cookie was set with: Sanic's ``delete_cookie`` always says ``Secure``, which a
        browser ignores on a plain-http answer (the cookie then survives sign-out)."""
        response.add_cookie(
            name,
            value,
            path=PATH,
            httponly=True,
            samesite="Strict",
            secure=self.secure,
            max_age=seconds,
        )

    # --- one-time messages --------------------------------------------------------------------

    def flash(self, response: HTTPResponse, session: Session, message: dict[str, Any]) -> None:
        """Leave ``message`` for the next page this session opens. Its JSON is UTF-8 as written, not
        ``\\u`` escapes (twelve bytes for one emoji): a test delivery's excerpt of 256 characters
        stays within the 4,096 bytes a browser keeps of a cookie."""
        document = json.dumps({"sid": session.id, **message}, ensure_ascii=False)
        sealed = self._fernet.encrypt_at_time(document.encode(), self._seconds()).decode()
        self._cookie(response, FLASH_COOKIE, sealed, FLASH_SECONDS)

    def take_flash(self, request: Request, session: Session) -> dict[str, Any] | None:
        """The message left for this session, if any (the page then clears the cookie)."""
        sealed = request.cookies.get(FLASH_COOKIE)
        if not sealed:
            return None
        try:
            data = json.loads(self._fernet.decrypt_at_time(sealed.encode(), FLASH_SECONDS, self._seconds()))
        except (InvalidToken, ValueError):
            return None
        if not isinstance(data, dict) or data.pop("sid", None) != session.id:
            return None
        return data

    def clear_flash(self, response: HTTPResponse) -> None:
        self._cookie(response, FLASH_COOKIE, "", 0)


class EndedSessions:
    """Sessions signed out before they expired, by id, each kept until it would have expired: on
    the rate limiter's store (``SERVICE_RATE_LIMIT_STORAGE``), so with Redis a sign-out on one
    server is refused on every other. A key of this store is a count, so an ended session counts 1."""

    PREFIX = "console-session-ended/"

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    async def end(self, session: Session, seconds: int) -> None:
        """Refuse ``session`` from now on, for the ``seconds`` it has left."""
        if seconds > 0:
            await self._storage.incr(self.PREFIX + session.id, seconds)

    async def ended(self, session: Session) -> bool:
        return await self._storage.get(self.PREFIX + session.id) > 0


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url`` as a browser writes an ``Origin``: scheme and host lowered,
    the scheme's default port left out (a base URL of ``https://ops.example:443`` is the origin
    ``https://ops.example``). None for what is no absolute URL (a ``Referer`` of ``http://[``, say,
    which ``urlsplit`` refuses, or a port that is no number)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if not scheme or not host:
        return None
    if ":" in host:  # an IPv6 address, which urlsplit gives without its brackets
        host = f"[{host}]"
    if port is None or port == DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def same_origin(request: Request, base_url: str) -> bool:
    """The request's ``Origin`` (or, without one, its ``Referer``) is the base URL's origin."""
    expected = origin_of(base_url)
    origin = request.headers.get("origin")
    if not isinstance(origin, str):
        origin = request.headers.get("referer")
    return expected is not None and isinstance(origin, str) and origin_of(origin) == expected


def csrf_matches(given: str | None, session: Session) -> bool:
    """Whether ``given`` (the form's first ``csrf`` field) is the session's token."""
    return isinstance(given, str) and tokens_match(given, session.csrf)


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a console path of this origin, else the overview (also for
    text that is not valid Unicode, which no ``Location`` can carry)."""
    if not value or text_fault(value) is not None:
        return PATH
    if not value.startswith(PATH) or value.startswith("//") or "\\" in value:
        return PATH
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not (parts.path == PATH or parts.path.startswith(PATH + "/")):
        return PATH
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in value):
        return PATH
    return value
