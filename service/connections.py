"""Slow clients: a cap on open connections, and absolute deadlines for a request to arrive.

Sanic restarts its request timer on every byte, so a client trickling one byte every few seconds
holds a connection for ever, and nothing caps how many it may hold: a thousand such clients use up
the process's file descriptors and lock everyone else out. ``GuardedProtocol`` (passed to Sanic as
its protocol, a public option of ``app.prepare``) adds what is missing (docs/architecture.md
"Faults and slow clients"):

- at most ``limit`` open connections per process; when a new one would exceed it, the connection
  that has been quiet longest among those waiting between requests (kept alive after an answer, or
  not yet through a request's head) is closed, so a new client finds room. A connection whose
  request's head is in is never closed for room: it is being answered, and closing it would lose an
  answer to work already done (a registration committed, never answered). Only when every other
  connection is being answered is the newcomer itself closed (``Registry.admit``);
- a request's headers must arrive within ``HEADERS_WITHIN`` seconds of its first byte, and its body
  within ``BODY_WITHIN`` seconds of it, however slowly they trickle; otherwise the connection is
  closed;
- a connection closed while the client is still sending (a head or a body refused before it was
  read: 400, 413, 414, 431; any answer to a body over the limit that its route never read) closes
  in two steps, as nginx's lingering close does: the answer goes out with a FIN after it, and
  what the client goes on sending is read and thrown away until it closes its side, for
  ``LINGER_FOR`` seconds or ``LINGER_BYTES`` at most. Closed at once, with its bytes
  unread, the socket would answer them with a reset, and the client's kernel could drop the answer
  it had not yet read.

The protocol learns that a request's headers are in when Sanic builds its request object, and
that its body is in when ``receive_body`` returns: ``GuardedRequest`` (Sanic's documented
``request_class`` hook) tells it. Whether a request is being answered it reads, when it must choose
a connection to close, from the stage of the protocol's HTTP/1 exchange (its ``http``, whose
``keep_alive`` the request class already sets; ``sanic.http.Stage``), as Sanic's own
``close_if_idle`` does, and from the transport's write buffer. Everything here is Sanic's public
surface: the protocol class it documents for subclassing (its ``close``, its ``recv_buffer``, the
bytes received and not yet read, and its ``http``), asyncio's protocol callbacks and transport, and
the request class.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import time
from typing import Any

from sanic import Request
from sanic.compat import Header
from sanic.exceptions import BadRequest, BadURL
from sanic.http import Stage
from sanic.server.protocols.http_protocol import HttpProtocol

from service.errors import PayloadTooLarge
from service.framing import framing_fault, host_fault, unfinished_fault

log = logging.getLogger(__name__)

SWEEP_EVERY = 0.5  # seconds between deadline checks: a deadline is kept to within this
HEADERS_WITHIN = 10.0  # seconds from a request's first byte to the end of its headers
BODY_WITHIN = 30.0  # seconds from a request's first byte to the end of its body
# How long a refused client may go on sending while it reads its answer, and how much of what it
# sends is read and thrown away meanwhile: a client that reads as it writes has its answer within
# a round trip; one that never stops is bounded.
LINGER_FOR = 2.0
LINGER_BYTES = 1 << 20
# File descriptors a server process keeps for what is not a client connection: the database pool,
# Redis, log and SQLite files, the listening socket, and the delivery worker's connections to
# partners (its sender pool) when it runs in the process.
RESERVE = 128
WORKER_RESERVE = 512 + 64  # the worker's concurrency (webhooks.worker.CONCURRENCY) and its database pool


# What a standalone worker keeps for itself besides its partner connections: its database pool,
# the /healthz, /readyz and /metrics port, log files.
WORKER_OWN = 64


def _soft_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def worker_concurrency(wanted: int, descriptors: int | None = None) -> int:
    """``wanted`` attempts in flight for a standalone worker, never more than the soft descriptor
    limit leaves beside its own (and at least 1): past it, connects would fail with EMFILE and be
    logged as healthy partners' failures, opening their circuits."""
    if descriptors is None:
        descriptors = _soft_limit()
    if descriptors == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, descriptors - WORKER_OWN))


def connection_limit(wanted: int, run_worker: bool, descriptors: int | None = None) -> int:
    """``wanted``, never more than the soft descriptor limit less the reserve (and at least 1)."""
    if descriptors is None:
        descriptors = _soft_limit()
    if descriptors == resource.RLIM_INFINITY:
        return wanted
    reserve = RESERVE + (WORKER_RESERVE if run_worker else 0)
    return max(1, min(wanted, descriptors - reserve))


class Registry:
    """The open connections of one server process, the cap over them, and the sweep that holds
    them to their deadlines (once a second: no timer is set or cancelled per request)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: set[GuardedProtocol] = set()
        self.evicted = 0  # connections closed to make room (for tests and the log)
        self.refused = 0  # newcomers closed because every other connection was being answered
        self._sweep: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._sweep = asyncio.get_running_loop().call_later(SWEEP_EVERY, self._expire)

    def stop(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def _expire(self) -> None:
        now = time.monotonic()
        for held in [held for held in self.open if held.overdue(now)]:
            held.drop()
        self.start()

    def admit(self, newcomer: GuardedProtocol) -> None:
        """Count ``newcomer`` in; past the cap, close the connection quiet longest to make room. A
        connection being answered is never quiet (its ``active_at`` is infinite): when every other
        one is, the newcomer is closed instead, before anything it sent is read."""
        self.open.add(newcomer)
        if len(self.open) <= self.limit:
            return
        quietest = min((held for held in self.open if held is not newcomer), key=lambda held: held.active_at)
        if quietest.active_at == math.inf:
            self.open.discard(newcomer)
            self.refused += 1
            log.debug("connection limit reached, every connection being answered: closing the new one")
            newcomer.drop()
            return
        self.evicted += 1
        log.debug("connection limit reached: closing the longest-idle one", extra={"limit": self.limit})
        quietest.drop()


class GuardedProtocol(HttpProtocol):
    """Sanic's HTTP/1.1 protocol under the cap and the deadlines above."""

    __slots__ = ("_began", "_headers_in", "_lingering", "after_chunked", "heard_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heard_at = time.monotonic()  # the connection's last byte from its client
        self._began: float | None = None  # first byte of the request being received
        self._headers_in = False
        self.after_chunked = False  # the last request's body was chunked: no request may follow
        self._lingering: int | None = None  # bytes thrown away since the answer's FIN, while lingering

    # asyncio's protocol callbacks --------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[no-untyped-call]
        registry: Registry | None = getattr(self.app.ctx, "connections", None)
        if registry is not None:
            registry.admit(self)

    def data_received(self, data: bytes) -> None:
        self.heard_at = time.monotonic()
        if self._lingering is not None:
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self._end_linger()
            return
        if self._began is None and data:
            self._began, self._headers_in = self.heard_at, False
        super().data_received(data)
        if not self._headers_in and self._began is not None:
            self._end_doomed_head()

    def _end_doomed_head(self) -> None:
        """A head still arriving that framing must refuse once whole (``unfinished_fault``) is
        given the blank line its client never sends: Sanic reads it at once and it is refused
        with 400 (``GuardedRequest``), as every refused head is, instead of waiting out
        ``HEADERS_WITHIN`` to be closed without an answer."""
        buffer = self.recv_buffer  # Sanic's own buffer, which its reader looks at next
        if b"\r\n\r\n" in buffer:
            return  # whole: Sanic reads it now, and framing checks it then
        fault = unfinished_fault(bytes(buffer))
        if fault is not None:
            log.debug("request framing refused before the head ended: %s", fault)
            buffer.extend(b"\r\n\r\n")

    def connection_lost(self, exc: Exception | None) -> None:
        registry: Registry | None = getattr(self.app.ctx, "connections", None)
        if registry is not None:
            registry.open.discard(self)
        super().connection_lost(exc)  # type: ignore[no-untyped-call]

    def close(self, timeout: float | None = None) -> None:
        """Sanic's close, unless the client may still be sending what was never read: then a
        lingering close (above)."""
        transport = self.transport
        if (
            self._lingering is None
            and self.recv_buffer  # a request not read to its end: the client is mid-send
            and transport is not None
            and not transport.is_closing()
            and transport.can_write_eof()
        ):
            self._linger(transport)
            return
        self._lingering = None
        super().close(timeout)

    def _linger(self, transport: Any) -> None:
        self._lingering, self._began = 0, None
        self.recv_buffer.clear()
        transport.write_eof()  # after the answer, once it is written
        transport.resume_reading()
        self.loop.call_later(LINGER_FOR, self._end_linger)

    def _end_linger(self) -> None:
        if self._lingering is not None:
            self.close()

    # what GuardedRequest reports -----------------------------------------------------------------

    def headers_in(self, with_body: bool, pipelined: bool = False) -> None:
        """The request's head is in; ``pipelined``: bytes of another request came after it."""
        if self._began is None:  # a request that came in one read: its clock started there
            self._began = time.monotonic()
        self._headers_in = True
        if not with_body:
            self._next_request(pipelined)

    def body_in(self) -> None:
        self._next_request(bool(self.recv_buffer))

    def refused(self) -> None:
        """The request is refused and the connection ends: no deadline runs on it."""
        self._began = None

    def _next_request(self, pipelined: bool) -> None:
        """The request is read. Bytes of the next one already here came without a read of their
        own (``data_received`` starts the clock): its deadline for headers starts now."""
        if pipelined:
            self._began, self._headers_in = time.monotonic(), False
        else:
            self._began = None

    # the cap -------------------------------------------------------------------------------------

    @property
    def active_at(self) -> float:
        """When the connection was last active, which orders closing for room (``Registry.admit``):
        its client's last byte, or, while a request of it is being answered, infinity (active now)."""
        return math.inf if self.answering() else self.heard_at

    def answering(self) -> bool:
        """Whether a request whose head is in has not had all its answer sent: Sanic's exchange is
        past the head (``HANDLER``, ``RESPONSE``, ``FAILED``) and not yet back to waiting for the
        next request (``IDLE``), or the answer is still in the transport's buffer. A connection
        waiting between requests, or still receiving a head (``REQUEST``), is not answering."""
        http = self.http  # None once Sanic's connection task has ended (lingering, closing)
        if http is not None and http.stage is not Stage.IDLE and http.stage is not Stage.REQUEST:
            return True
        transport = self.transport
        return transport is not None and transport.get_write_buffer_size() > 0

    def overdue(self, now: float) -> bool:
        """Whether the request being received has missed its deadline (headers, then body)."""
        began = self._began
        if began is None:
            return False
        late = now - began > (BODY_WITHIN if self._headers_in else HEADERS_WITHIN)
        if late:
            part = "body" if self._headers_in else "headers"
            log.debug("a request's %s did not arrive in time: closing the connection", part)
        return late

    def drop(self) -> None:
        """Close the connection now, whatever it was doing."""
        self._began = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


def _has_path(request: Request) -> bool:
    try:
        request.path  # noqa: B018 - httptools gives an absolute-form target without a path none
    except AttributeError:
        return False
    return True


class GuardedRequest(Request):
    """Sanic's request, its framing checked (``service.framing``), telling ``GuardedProtocol`` when
    the headers and the body are in.

    Raised while Sanic is still reading the request, a ``BadRequest`` answers 400 and closes the
    connection (Sanic keeps no connection alive after an error in reading a request).
    """

    # Sanic's own parameters, named: passed on as they came, without a tuple and a dict packed and
    # unpacked on every request (a microsecond of the documents' 30).
    def __init__(
        self,
        url_bytes: bytes,
        headers: Header,
        version: str,
        method: str,
        transport: Any,
        app: Any,
        head: bytes = b"",
        stream_id: int = 0,
    ) -> None:
        try:
            super().__init__(url_bytes, headers, version, method, transport, app, head, stream_id)
            if url_bytes[:1] != b"/" and not _has_path(self):
                # An absolute-form target without a path ("GET http://evil"): httptools reads no
                # path, and routing, then the error handler, failed on it (a plain-text 500).
                raise BadURL("Bad Request")
        except BadURL:
            if head:
                raise  # a request whose target is no URL: 400, through the empty request below
            # The empty request Sanic makes to answer that 400 carries the same target, which would
            # fail again and leave the connection without an answer (Sanic 25.12): it is made for
            # the target "*", as when no target was read at all.
            super().__init__(b"*", headers, version, method, transport, app, head, stream_id)
        if not self.head:
            return  # the empty request Sanic makes to answer an error: nothing was read
        protocol = self.transport.get_protocol() if self.transport is not None else None
        guard = protocol if isinstance(protocol, GuardedProtocol) else None
        fault = framing_fault(self.head) or host_fault(self.version, self.headers.getall("host", []))
        if fault is None and guard is not None and guard.after_chunked:
            fault = "a request after a chunked body on the same connection"
        if fault is not None:
            log.debug("request framing refused: %s", fault)
            if guard is not None:
                guard.refused()
            raise BadRequest("Bad Request")
        length = self.headers.get("content-length")
        over = length is not None and self._over_the_limit(length)
        if over and self._expects_continue():
            # Refused before Sanic answers 100 Continue, which it does before it compares the
            # length with its limit: told to go on, the client would send a body only to have it
            # thrown away.
            if guard is not None:
                guard.refused()
            raise PayloadTooLarge()
        chunked = "transfer-encoding" in self.headers
        http = protocol.http if isinstance(protocol, HttpProtocol) else None
        if (chunked or over) and http is not None:
            # No request follows on this connection: none after a chunked one (above), and none
            # after a body over the limit, which a route that reads it refuses with 413 and which
            # Sanic will not skip for a route that answers without reading it (404, 405, 401, a
            # GET). The answer says so (Connection: close) and the connection ends, so a client
            # never sends its next request on it only to see it closed.
            http.keep_alive = False
        if guard is not None:
            guard.after_chunked = chunked
            with_body = chunked or (length is not None and length.strip() != "0")
            # Sanic drops the head (and its blank line) from the buffer after this: anything more
            # there is the next request.
            guard.headers_in(with_body, pipelined=len(guard.recv_buffer) > len(self.head) + 4)

    def _expects_continue(self) -> bool:
        """Whether the client waits for 100 Continue before sending its body."""
        expect = self.headers.get("expect")
        return expect is not None and expect.lower() == "100-continue"

    def _over_the_limit(self, length: str) -> bool:
        """Whether a Content-Length (ASCII digits, by framing) is over the body limit."""
        digits = length.strip()  # no int() of thousands of digits
        return len(digits) > 15 or int(digits) > self.app.config.REQUEST_MAX_SIZE

    async def receive_body(self) -> None:
        await super().receive_body()  # type: ignore[no-untyped-call]
        protocol = self.transport.get_protocol() if self.transport is not None else None
        if isinstance(protocol, GuardedProtocol):
            protocol.body_in()
