"""One signed HTTP attempt: the only code that talks to partner endpoints.

A ``Sender`` owns an aiohttp session (one connection pool, its limit counting idle connections
too) whose resolver refuses internal addresses, so the SSRF check and the connection use the same
addresses. Each attempt is signed with a fresh timestamp, POSTs the stored body bytes unchanged,
follows no redirect, is bounded by ``Settings.webhook_timeout``, and comes back as an ``Attempt``
(never an exception): what the partner answered, or which class of error stood in the way.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import json
import re
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import RawResponseMessage
from yarl import URL

from service.clock import Clock, Timer
from service.events import format_occurred_at, new_event_id
from service.text import readable
from service.webhooks.outbox import new_delivery_id
from service.webhooks.retry import Verdict, parse_retry_after, verdict_for
from service.webhooks.signing import SECRET_PREFIX, secret_digest, signature_headers
from service.webhooks.ssrf import (
    ForbiddenAddress,
    GuardedResolver,
    Resolve,
    UnsafeURL,
    check_literal,
    parse_partner_url,
    system_resolve,
)

USER_AGENT = "service-webhooks/1.0"
# Every attempt's headers besides the signatures. The answer's body is never decoded (only its
# first bytes are kept, as sent), so no encoding is asked for.
SESSION_HEADERS = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
EXCERPT_CHARS = 256  # of the answer body, kept in the attempt log
_EXCERPT_BYTES = EXCERPT_CHARS * 4  # UTF-8 needs at most 4 bytes a character
# Once the status is in, seconds the partner may take to send the excerpt's bytes. The status is
# what counts; a body that trickles would otherwise hold one of the partner's slots until the
# attempt's whole timeout.
EXCERPT_SECONDS = 1.0
# How much of an answer's body aiohttp buffers before it stops reading the connection
# (``read_bufsize``; aiohttp's default is 256 KiB). aiohttp also stops reading after a sixteenth of
# this many chunks of a chunked body, and takes in each chunk with a call into Python: a partner
# answering 20,000 chunks of one byte (120 KB) cost the worker 7.2-7.6 ms of CPU an attempt under
# the default (16,386 chunks taken in), 32-43 times a plain answer's, and took that CPU from every
# other partner; at 16 KiB, 1.7-2.2 ms (1,540 chunks; benchmarks/answers.py). Not smaller: the
# whole of an answer that fits is read, so its connection is kept for the next attempt, and
# a 16 KB page (a web framework's error page, say) at 2 KiB cost a new connection an attempt,
# three times a plain answer's CPU.
_BODY_BUFFER = 16 * 1024
TEST_EVENT = "webhook.test"  # kind of the admin's test delivery; not in the catalog, never retried
# What a partner's answer may spend on its head, set here rather than left to aiohttp's defaults:
# 8190 bytes a status or header line (the line limit HTTP servers commonly hold requests to) and
# 64 header lines, far more than any webhook receiver sends. Past either, the attempt fails as
# "protocol" and no more of the head is read.
MAX_HEADER_LINE_BYTES = 8190
MAX_HEADERS = 64
# Informational answers (1xx) a partner may send before its final one. The service asks for none
# (it sends no Expect: 100-continue), and a server sends a 103 Early Hints or two at most; past
# this the attempt fails as "protocol". aiohttp reads them in a loop that does not give the event
# loop back while it has more buffered: a partner streaming "100 Continue" kept the loop busy past
# the attempt's timeout, and every other partner waited behind it (eight such partners held the
# loop 1.3 s at a time).
MAX_INFORMATIONAL = 8
# How many pooled connections an attempt may find spoiled (below) before it gives up as "protocol".
STALE_TRIES = 4


class _Pool(aiohttp.TCPConnector):
    """aiohttp's connector with its ``limit`` over every open connection, idle ones included.

    aiohttp's ``limit`` counts the connections in use; each one given back stays open in the pool
    for ``keepalive_timeout`` (15 s) whatever the limit, and none of the connector's options bounds
    them. A worker delivering a burst to one partner after another kept each partner's connections
    open behind it, until its descriptors ran out and every partner's attempts failed as
    "connect". Here, before a new connection is opened (and only then: a connection taken again
    from the pool opens nothing), the pool's least recently used idle connections are closed
    until the connections in use, this new one among them, and the idle ones come to ``limit``.
    A busy partner's connections stay pooled and are taken again as before.

    One method is overridden, ``_create_connection``, which ``BaseConnector.connect`` calls only
    to open a new connection, after counting the new one in use (``_acquired``); it reads the pool
    (``_conns``: each endpoint's idle connections, oldest first, with when each was given back).
    tests/test_send_limits.py fails, naming them, when they move."""

    async def _create_connection(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> ResponseHandler:
        if self.limit:
            self._make_room()
        return await super()._create_connection(req, traces, timeout)

    def _make_room(self) -> None:
        """Close idle connections, least recently given back first, past the limit."""
        idle = self._conns
        excess = len(self._acquired) + sum(map(len, idle.values())) - self.limit
        while excess > 0:
            oldest = [(queue[0][1], key) for key, queue in idle.items() if queue]
            if not oldest:
                return
            _, key = min(oldest, key=lambda entry: entry[0])
            queue = idle[key]
            protocol, _ = queue.popleft()
            if not queue:
                del idle[key]
            protocol.close()
            excess -= 1


class StaleConnection(aiohttp.ClientConnectionError):
    """A pooled connection carried bytes its partner sent while it sat idle: an answer to no
    request. Taken as the next request's answer, it would stand for a request never sent."""


class UnsolicitedAnswer(aiohttp.ClientConnectionError):
    """A new connection carried bytes before a request was written on it (behind the TLS
    handshake, say): the partner answers what it was never asked. Not tried again elsewhere, since
    the partner would do it again, each time after the time a connection takes."""


class InformationalFlood(aiohttp.ClientError):
    """More informational (1xx) answers than ``MAX_INFORMATIONAL`` before the final one."""


class _Request(aiohttp.ClientRequest):
    """aiohttp's request (``ClientSession(request_class=...)``) with two guards on its connection.

    - Never a pooled connection its partner wrote on while it was idle: aiohttp checks a
      connection when it is given back, not when it is taken again, and would read those bytes as
      this request's answer (a stale 200 marked a delivery delivered that never left; a stale 410
      would pause the partner). Refused before a byte is written, so the attempt may go again on
      another connection. A new connection with bytes on it already fails the attempt instead
      (``UnsolicitedAnswer``).
    - At most ``MAX_INFORMATIONAL`` informational answers before each final one: the connection's
      reads are counted, once per connection (``_bounded``)."""

    async def send(self, conn: aiohttp.connector.Connection) -> aiohttp.ClientResponse:
        protocol = conn.protocol
        if protocol is not None:
            fresh = "read" not in vars(protocol)  # not yet bounded: its first request
            if protocol.should_close:  # bytes buffered, or a closing peer
                if fresh:
                    raise UnsolicitedAnswer("the partner wrote before it was asked")
                raise StaleConnection("the partner wrote on an idle connection")
            if fresh:
                protocol.read = _bounded(protocol.read)  # type: ignore[method-assign]
        return await super().send(conn)


def _bounded(
    read: Callable[[], Coroutine[Any, Any, tuple[RawResponseMessage, aiohttp.StreamReader]]],
) -> Callable[[], Coroutine[Any, Any, tuple[RawResponseMessage, aiohttp.StreamReader]]]:
    """A connection's ``read`` (what aiohttp's response awaits for each answer on it) failing
    past ``MAX_INFORMATIONAL`` informational answers in a row."""
    informational = 0

    async def bounded() -> tuple[RawResponseMessage, aiohttp.StreamReader]:
        nonlocal informational
        message, payload = await read()
        if 100 <= message.code < 200 and message.code != 101:
            informational += 1
            if informational > MAX_INFORMATIONAL:
                raise InformationalFlood("more informational answers than any server sends")
        else:
            informational = 0
        return message, payload

    return bounded


class Attempt(NamedTuple):
    """What one attempt met: an answer (status, excerpt, Retry-After) or an error class."""

    started_at: datetime
    duration_ms: int
    status_code: int | None = None  # None when no HTTP answer came
    error_class: str | None = None  # None on a 2xx
    response_excerpt: str | None = None
    retry_after: float | None = None  # seconds, from the partner's Retry-After

    @property
    def verdict(self) -> Verdict:
        return verdict_for(self.status_code)


def error_class(error: BaseException) -> str:
    """A stable token for why no usable answer came."""
    if isinstance(error, ForbiddenAddress):
        return "ssrf"
    if isinstance(error, aiohttp.ClientConnectorError) and isinstance(error.os_error, ForbiddenAddress):
        return "ssrf"
    if isinstance(error, UnsafeURL):
        return error.code
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return "timeout"  # aiohttp's ServerTimeoutError is one too
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        return "dns"
    if isinstance(error, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return "tls"
    if isinstance(error, aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(error, StaleConnection | UnsolicitedAnswer | InformationalFlood):
        return "protocol"
    if isinstance(error, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return "disconnected"
    if isinstance(error, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return "protocol"
    if isinstance(error, aiohttp.InvalidURL):
        return "invalid_url"
    return "error"


@functools.lru_cache(maxsize=4096)
def _target(url: str, allow_private: bool) -> URL:
    """The checked URL; cached, as partners are few and their URLs change only through onboarding."""
    target = parse_partner_url(url, allow_private=allow_private)
    check_literal(target, allow_private=allow_private)
    return target


def _status_error(status: int) -> str | None:
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return "redirect"  # never followed: a redirect could lead anywhere, internal hosts included
    return f"http_{status}"


class Sender:
    def __init__(
        self,
        *,
        timeout: float,
        allow_private: bool,
        clock: Clock,
        resolve: Resolve = system_resolve,
        limit: int = 32,
        limit_per_host: int = 0,
        connect_timeout: float | None = None,
        excerpt_timeout: float = EXCERPT_SECONDS,
        timer: Timer = time.perf_counter,
    ) -> None:
        # The connection (name resolution, TCP, TLS) must be made within connect_timeout; the
        # whole attempt, answer included, within timeout.
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._allow_private = allow_private
        self._clock = clock
        self._excerpt_timeout = excerpt_timeout
        self._timer = timer  # reads each attempt's duration
        self._resolve = resolve
        self._limit = limit
        self._limit_per_host = limit_per_host  # 0: none but ``limit``
        self._session: aiohttp.ClientSession | None = None

    @property
    def clock(self) -> Clock:
        return self._clock

    async def open(self) -> None:
        connector = _Pool(
            limit=self._limit,
            limit_per_host=self._limit_per_host,
            resolver=GuardedResolver(self._resolve, allow_private=self._allow_private),
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            request_class=_Request,
            # Partners must not share (or plant) cookies; proxies from the environment are ignored.
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            # Decoding an answer could lose its 2xx (or 410) to an encoding the partner chose and
            # aiohttp cannot read (br, zstd, a gzip header over plain bytes): the attempt would be
            # logged as no answer and the delivery sent again.
            auto_decompress=False,
            headers=SESSION_HEADERS,
            max_line_size=MAX_HEADER_LINE_BYTES,
            max_field_size=MAX_HEADER_LINE_BYTES,
            max_headers=MAX_HEADERS,  # aiohttp 3.13.4 and later
            read_bufsize=_BODY_BUFFER,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Sender:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(
        self,
        *,
        url: str,
        event: str,
        delivery_id: str,
        body: bytes,
        secrets: Sequence[str],
        digests: Collection[str] = (),
    ) -> Attempt:
        """POST ``body`` signed with every secret (newest first); never raises for the partner's sake.
        ``digests``: of every secret the partner was issued, to know a retired one in its answer."""
        if self._session is None:
            raise RuntimeError("the sender is not open")
        started_at = self._clock()
        began = self._timer()
        headers = signature_headers(
            event=event,
            delivery_id=delivery_id,
            body=body,
            secrets=secrets,
            timestamp=int(started_at.timestamp()),
        )
        headers["Content-Type"] = "application/json"
        redact = functools.partial(without_secrets, secrets=secrets, digests=digests)
        try:
            target = _target(url, self._allow_private)
            timeout = self._timeout
            for tried in range(1, STALE_TRIES + 1):
                try:
                    status, retry_after, excerpt = await self._post(target, body, headers, timeout, redact)
                    break
                except StaleConnection:  # closed with nothing sent on it: the request goes on another
                    if tried == STALE_TRIES:
                        raise
                    timeout = self._time_left(began)
        except Exception as error:  # whatever went wrong is this attempt's error class, never a crash
            return Attempt(started_at, self._ms_since(began), error_class=error_class(error))
        return Attempt(
            started_at,
            self._ms_since(began),
            status_code=status,
            error_class=_status_error(status),
            response_excerpt=excerpt,
            retry_after=retry_after,
        )

    def _time_left(self, began: float) -> aiohttp.ClientTimeout:
        """What is left of the attempt's timeout since ``began``: an attempt that goes again on
        another connection is bounded by one deadline, not one a connection."""
        total, connect = self._timeout.total, self._timeout.connect
        if total is None:
            return self._timeout
        left = total - (self._timer() - began)
        if left <= 0:
            raise TimeoutError("the attempt's time ran out")
        return aiohttp.ClientTimeout(total=left, connect=min(connect, left) if connect is not None else None)

    async def _post(
        self,
        target: URL,
        body: bytes,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        redact: Callable[[str], str],
    ) -> tuple[int, float | None, str | None]:
        """One POST, within ``timeout``: the answer's status, its Retry-After in seconds, and its excerpt."""
        assert self._session is not None
        async with self._session.post(
            target, data=body, headers=headers, allow_redirects=False, timeout=timeout
        ) as response:
            status = response.status
            header = response.headers.get("Retry-After")
            # The clock is read only when there is a header to read it against.
            retry_after = parse_retry_after(header, self._clock()) if header is not None else None
            return status, retry_after, await _excerpt(response, self._excerpt_timeout, redact)

    def _ms_since(self, began: float) -> int:
        return round((self._timer() - began) * 1000)


async def _excerpt(
    response: aiohttp.ClientResponse, timeout: float, redact: Callable[[str], str]
) -> str | None:
    """The first characters of the answer, as many as came within ``timeout``, with the partner's
    secrets written ``[secret]`` by ``redact`` (``without_secrets``); the rest is never read into
    memory."""
    data = bytearray()
    content = response.content
    try:
        if content.is_eof():  # the whole body came with the head, as it almost always does
            await _read_into(data, content)
        else:
            async with asyncio.timeout(timeout):
                await _read_into(data, content)
    except (TimeoutError, aiohttp.ClientError):
        pass  # the status already arrived; a body cut short does not change what it said
    if not data:
        return None
    text = _decoded(data, response.charset)
    plain = data.decode("utf-8", errors="replace")  # the same bytes as UTF-8, whatever was declared
    if not content.at_eof():  # cut short (by time or size): its last word may be a secret's start
        text, plain = _CUT_KEY.sub(REDACTED, text), _CUT_KEY.sub(REDACTED, plain)
    # Before the cut to EXCERPT_CHARS: a secret the cut would halve is all read here.
    kept = redact(text)
    if _spelled_apart(kept, None if plain == text else plain, redact):
        return SPELLED_APART
    # Whatever the partner sent: PostgreSQL would refuse a NUL, and a terminal obey an escape.
    return readable(kept[:EXCERPT_CHARS])


def _spelled_apart(kept: str, plain: str | None, redact: Callable[[str], str]) -> bool:
    """Whether the answer spells a secret other than plainly in ``kept`` (where ``redact`` wrote it
    ``[secret]``), so that a reader of the excerpt could recover it: with characters between that
    do not show (``readable`` would only mark them: NULs, as UTF-16 read as UTF-8 has, line breaks,
    format characters), or in its bytes read as UTF-8 (``plain``), where a declared character set
    made other characters of them (an ASCII answer labelled UTF-16)."""
    for view in (kept,) if plain is None else (kept, plain):
        if view is plain and redact(view) != view:
            return True
        if view.isprintable() and "\ufffd" not in view:  # most answers: one pass in C, and done
            continue
        skeleton = readable(view).replace("\ufffd", "")  # exactly what ``readable`` would mark
        if skeleton != view and redact(skeleton) != skeleton:
            return True
    return False


def _decoded(data: bytes | bytearray, charset: str | None) -> str:
    """The answer's text, in the character set it declares or its byte order mark names, else
    UTF-8 (UTF-16 and UTF-32 declared without a mark are big-endian, RFC 2781); what does not
    decode is U+FFFD. A name that is no text encoding, or one that refuses bytes even with
    replacement (``idna``, ``undefined``), reads as UTF-8: the status has arrived, and an excerpt
    must never fail the attempt."""
    for mark, codec in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            charset = codec
            break
    else:
        charset = _WITHOUT_MARK.get((charset or "").lower().replace("_", "-"), charset)
    try:
        return data.decode(charset or "utf-8", errors="replace")
    except (LookupError, UnicodeError, ValueError):
        return data.decode("utf-8", errors="replace")


_WITHOUT_MARK = {"utf-16": "utf-16-be", "utf16": "utf-16-be", "utf-32": "utf-32-be", "utf32": "utf-32-be"}
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16's: it begins with the same two bytes
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
    (codecs.BOM_UTF8, "utf-8-sig"),
)


REDACTED = "[secret]"
# The excerpt of an answer that spells a secret with characters between that do not show.
SPELLED_APART = "[secret] (the answer spells a secret apart; its excerpt is not kept)"
# Any secret in the form the service issues (``whsec_`` and the standard base64 of 32 bytes; its
# last "=" only pads), whoever it belongs to, and the bare key alone (44 characters of base64, as
# a signature is, or its 43 without the padding, as an encoder that strips it writes it).
_ISSUED_SECRET = re.compile(re.escape(SECRET_PREFIX) + r"[A-Za-z0-9+/]{43}(?:=|(?![A-Za-z0-9+/]))")
_BARE_KEY = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{43}(?:=|(?![A-Za-z0-9+/]))")
_KEY_CHARS = 43  # a bare key without its padding
# The end of an answer cut short, where it may be the start of a key: after ``whsec_``, or a run of
# key characters long enough to matter and no longer than a key (11 give away 66 of its 256 bits).
_CUT_KEY = re.compile(
    re.escape(SECRET_PREFIX) + r"[A-Za-z0-9+/]*=?\Z|(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{12,43}=?\Z"
)
# How a partner's encoder may escape the three characters of a key that are not letters or digits
# (no encoder escapes those), by the character the escape begins with: JSON as PHP (``\/``) or
# .NET (``\u002B``) writes it, percent-encoding, HTML's named character references.
_ESCAPES = {
    "\\": {
        "\\/": "/",
        "\\u002B": "+",
        "\\u002b": "+",
        "\\u002F": "/",
        "\\u002f": "/",
        "\\u003D": "=",
        "\\u003d": "=",
    },
    "%": {"%2B": "+", "%2b": "+", "%2F": "/", "%2f": "/", "%3D": "=", "%3d": "="},
    "&": {"&plus;": "+", "&sol;": "/", "&equals;": "="},
}
# And HTML's numeric character references: decimal or hex (either case), with any leading zeros.
_NUMERIC_REFERENCES = {
    "+": r"&#(?:0*43|[xX]0*2[Bb]);",
    "/": r"&#(?:0*47|[xX]0*2[Ff]);",
    "=": r"&#(?:0*61|[xX]0*3[Dd]);",
}
_NUMERIC_UNESCAPES = tuple((re.compile(reference), char) for char, reference in _NUMERIC_REFERENCES.items())
# Any other JSON escape or percent-encoded byte stands for no base64 character: read as a space, so
# a key after it (``\u0027KEY``, ``%20KEY``) stands alone, as ``_BARE_KEY``'s look-behind has it.
_OTHER_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|[\\bfnrt])|%[0-9A-Fa-f]{2}")
# Percent-encoding applied twice (a URL carried in another's query): decoded twice, ``%252B`` is
# "+". Read once it is an encoded "%" and then ``2B``, which may be a key's start, so a text holding
# ``%25`` is searched in both readings (``_unescaped(twice=...)``). Read twice, any other byte
# encoded twice (``%2522``, a quote) stands for no base64 character either.
_TWICE = {"%252B": "+", "%252b": "+", "%252F": "/", "%252f": "/", "%253D": "=", "%253d": "="}
_OTHER_TWICE = re.compile(r"%25[0-9A-Fa-f]{2}")


def _spellings(char: str) -> str:
    """A pattern of ``char`` written as it is or escaped in any of the ways above."""
    every = [*_ESCAPES.values(), _TWICE]
    escaped = [escape for escapes in every for escape, meant in escapes.items() if meant == char]
    return "(?:" + "|".join([re.escape(char), *map(re.escape, escaped), _NUMERIC_REFERENCES[char]]) + ")"


_SPELLINGS = {char: _spellings(char) for char in _NUMERIC_REFERENCES}
_SPELLED_KEY_CHAR = rf"(?:[A-Za-z0-9]|{_SPELLINGS['+']}|{_SPELLINGS['/']})"
# Its padding spelled, or none and no 44th key character (as ``_ISSUED_SECRET``).
_SPELLED_ISSUED_SECRET = re.compile(
    rf"{re.escape(SECRET_PREFIX)}{_SPELLED_KEY_CHAR}{{43}}(?:{_SPELLINGS['=']}|(?!{_SPELLED_KEY_CHAR}))"
)


def without_secrets(text: str, secrets: Sequence[str], digests: Collection[str] = ()) -> str:
    """``text`` with the partner's secrets written ``[secret]``: its live ``secrets``, whole or
    without their ``whsec_`` prefix (``redacted``); any value in the issued form, whoever's it is;
    and a bare key whose digest is in ``digests`` (``signing.secret_digest``), so a secret its
    rotation retired, which the service no longer holds, is known too. A partner echoing a secret
    (an error page quoting the key it expected, its verifier still holding an old one) must not
    have it kept in the attempt log, where listings and the console show it. Other 44-character
    base64 values, such as signatures, are kept: they are what a partner's error page explains.
    In a text that may hold escapes, the same secrets escaped too (``_without_escaped_secrets``)."""
    for secret in secrets:
        text = redacted(text, secret)
    if SECRET_PREFIX in text:
        text = _ISSUED_SECRET.sub(REDACTED, text)
    # What every escape begins with (``_ESCAPES``). Every attempt's excerpt comes here: on 200
    # characters, these three ``in``s took 60 ns, a search for the three 900 ns.
    known = _Known(digests)
    if "\\" in text or "%" in text or "&" in text:
        text = _without_escaped_secrets(text, secrets, known)
    # After the escaped spellings, which take a retired key's escaped padding with it (a key
    # written without its padding is found here too, and would leave that padding behind).
    if digests and len(text) >= _KEY_CHARS:
        text = _BARE_KEY.sub(lambda found: REDACTED if known(found[0]) else found[0], text)
    return text


class _Known:
    """Whether a bare key (padded or not) is one of ``digests``, each run of an answer hashed once
    however many of ``without_secrets``'s passes meet it."""

    def __init__(self, digests: Collection[str]) -> None:
        self.digests = digests
        self._seen: dict[str, bool] = {}

    def __bool__(self) -> bool:
        return bool(self.digests)

    def __call__(self, key: str) -> bool:
        key = _padded(key)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = _digest_of(key) in self.digests
        return found


def _without_escaped_secrets(text: str, secrets: Sequence[str], known: _Known) -> str:
    """``text`` without the secrets ``without_secrets`` knows, escaped as a partner's JSON, URL or
    HTML encoder writes them: the secret it echoes is as much the secret. They are found by the
    rules of ``without_secrets`` in the text unescaped, and only a secret found is matched in all
    its spellings (``_spelled``), the dearer pattern: whatever a partner writes, its answer costs a
    few passes over the text, never a match tried again at each of its characters."""
    once = _unescaped(text)
    if once == text:  # nothing escaped: ``without_secrets`` read all there was
        return text
    views = (once, _unescaped(text, twice=True)) if "%25" in text else (once,)
    for secret in secrets:
        key = secret.removeprefix(SECRET_PREFIX)
        unpadded = key.rstrip("=")  # as ``redacted``: a key without its padding is the key
        if len(key) >= _SHORTEST_REDACTED and any(unpadded in view for view in views):
            text = _spelled(secret).sub(REDACTED, text)
    if SECRET_PREFIX in text:
        text = _SPELLED_ISSUED_SECRET.sub(REDACTED, text)
    if known and len(once) >= _KEY_CHARS:
        for key in {_padded(found[0]) for view in views for found in _BARE_KEY.finditer(view)}:
            if known(key):
                text = _spelled(key).sub(REDACTED, text)
    return text


def _padded(key: str) -> str:
    """A bare key with its padding, whether written with it or without (its 43 characters say it
    all; ``_spelled`` then finds it either way)."""
    return key if key.endswith("=") else key + "="


def _digest_of(key: str) -> str:
    return secret_digest(SECRET_PREFIX + _padded(key))


def _unescaped(text: str, *, twice: bool = False) -> str:
    """``text`` as far as a key in it goes: each escaped "+", "/" and "=" as itself, any other
    escape a space; ``twice``: percent-encoding read twice first (``_TWICE``). Fixed strings, and
    only those of a lead the text holds, so no call into Python for each escape: a kilobyte of
    escapes took 3-41 us, where a callback for each took 32-126."""
    if twice:
        for escape, char in _TWICE.items():
            text = text.replace(escape, char)
        text = _OTHER_TWICE.sub(" ", text)
    for lead, escapes in _ESCAPES.items():
        if lead in text:
            for escape, char in escapes.items():
                text = text.replace(escape, char)
    if "&#" in text:
        for reference, char in _NUMERIC_UNESCAPES:
            text = reference.sub(char, text)
    if "\\" in text or "%" in text:
        text = _OTHER_ESCAPE.sub(" ", text)
    return text


# A key shorter than this is never looked for: redacting every "s" of an answer would hide what it
# said, and a key so short is no secret. The service issues keys of 44 characters.
_SHORTEST_REDACTED = 16


def redacted(text: str, secret: str) -> str:
    """``text`` with ``secret`` written as ``[secret]``, whole or without its ``whsec_`` prefix: a
    partner that echoes its signing secret (in an error page, say) must not have it kept in the
    attempt log, where listings and the console show it."""
    key = secret.removeprefix(SECRET_PREFIX)
    unpadded = key.rstrip("=")  # the padding carries nothing: a key without it is the key
    if len(key) < _SHORTEST_REDACTED or unpadded not in text:
        return text
    text = text.replace(secret, REDACTED).replace(key, REDACTED)
    if unpadded != key:
        text = text.replace(SECRET_PREFIX + unpadded, REDACTED).replace(unpadded, REDACTED)
    return text


@functools.lru_cache(maxsize=1024)
def _spelled(secret: str) -> re.Pattern[str]:
    """``secret``, whole or without its ``whsec_`` prefix, each "+", "/" and "=" in it written as
    it is or escaped (``_SPELLINGS``), its padding there or not. Compiled once a secret: a
    partner's change only at rotation, and a retired key is looked for only once found in an answer
    (its digest the partner's)."""
    key = secret.removeprefix(SECRET_PREFIX)
    unpadded = key.rstrip("=")
    spelled = "".join(_SPELLINGS.get(char) or re.escape(char) for char in unpadded)
    spelled += f"(?:{_SPELLINGS['=']})?" * (len(key) - len(unpadded))
    if key != secret:  # a secret older than ``whsec_`` ones has no prefix to leave out
        spelled = f"(?:{re.escape(SECRET_PREFIX)})?{spelled}"
    return re.compile(spelled)


async def _read_into(data: bytearray, content: aiohttp.StreamReader) -> None:
    while len(data) < _EXCERPT_BYTES and not content.at_eof():
        chunk = await content.read(_EXCERPT_BYTES - len(data))
        if not chunk:
            break
        data += chunk


@dataclass(frozen=True, slots=True)
class TestDelivery:
    delivery_id: str
    event_id: str
    attempt: Attempt


async def send_test(
    sender: Sender, *, partner_id: str, url: str, secrets: Sequence[str], digests: Collection[str] = ()
) -> TestDelivery:
    """A signed ``webhook.test`` delivery, sent once, now; for checking an endpoint and its verifier."""
    event_id = new_event_id()
    delivery_id = new_delivery_id()
    body = json.dumps(
        {
            "eventId": event_id,
            "event": TEST_EVENT,
            "occurredAt": format_occurred_at(sender.clock()),
            "partnerId": partner_id,
            "test": True,
        },
        separators=(",", ":"),
    ).encode()
    attempt = await sender.send(
        url=url, event=TEST_EVENT, delivery_id=delivery_id, body=body, secrets=secrets, digests=digests
    )
    return TestDelivery(delivery_id=delivery_id, event_id=event_id, attempt=attempt)
