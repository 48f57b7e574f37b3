"""``GuardedProtocol`` against a recording transport, its timers taken from the loop rather than
waited for: a connection closed while its client is still sending closes in two steps (the answer
and a FIN, then what the client still sends is read and thrown away, within a time and a byte
budget; the real server's side of it is in tests/test_framing.py), and a pipelined request gets
its own deadline."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
from sanic import Sanic

from service.connections import HEADERS_WITHIN, LINGER_BYTES, LINGER_FOR, GuardedProtocol

_names = itertools.count()


class Transport:
    """What the protocol does to its connection, recorded."""

    def __init__(self, *, can_write_eof: bool = True) -> None:
        self._can_write_eof = can_write_eof
        self.calls: list[str] = []
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return self._can_write_eof

    def write_eof(self) -> None:
        self.calls.append("write_eof")

    def resume_reading(self) -> None:
        self.calls.append("resume_reading")

    def pause_reading(self) -> None:
        self.calls.append("pause_reading")

    def close(self) -> None:
        self.calls.append("close")
        self.closing = True

    def abort(self) -> None:
        self.calls.append("abort")
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, **_: int) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5555) if name in ("peername", "sockname") else default


class Timers:
    """The loop's ``call_later``, kept instead of run: the test fires them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []
        self._handle = loop.call_later  # the loop's own, for a handle never due in a test

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        self.pending.append((delay, lambda: callback(*args)))
        return self._handle(3600, lambda: None)


@pytest.fixture
async def timers(monkeypatch: pytest.MonkeyPatch) -> Timers:
    loop = asyncio.get_running_loop()
    kept = Timers(loop)
    monkeypatch.setattr(loop, "call_later", kept.call_later)
    return kept


def connected(transport: Transport) -> GuardedProtocol:
    """A protocol on ``transport`` with no request in progress (Sanic's connection task not run)."""
    app = Sanic(f"linger_{next(_names)}")
    protocol = GuardedProtocol(loop=asyncio.get_running_loop(), app=app)
    protocol.transport = cast(asyncio.Transport, transport)
    protocol.recv_buffer = bytearray()
    return protocol


async def test_a_request_not_read_to_its_end_lingers(timers: Timers) -> None:
    """Bytes the server never read: the answer gets a FIN after it, reading goes on, the
    connection stays open, and the linger ends after ``LINGER_FOR`` seconds."""
    transport = Transport()
    protocol = connected(transport)
    protocol.recv_buffer += b"X-Big: aaaa"

    protocol.close()

    assert transport.calls == ["write_eof", "resume_reading"]
    assert not protocol.recv_buffer
    assert [delay for delay, _ in timers.pending] == [LINGER_FOR]
    protocol.data_received(b"a" * 4096)  # what the client goes on sending is thrown away
    assert not protocol.recv_buffer
    assert "close" not in transport.calls

    timers.pending[0][1]()
    assert transport.calls[-1] == "close"


async def test_a_linger_ends_once_the_client_sends_past_its_budget(timers: Timers) -> None:
    transport = Transport()
    protocol = connected(transport)
    protocol.recv_buffer += b"POST / HTTP/1.1\r\n"
    protocol.close()

    protocol.data_received(b"a" * LINGER_BYTES)
    assert "close" not in transport.calls
    protocol.data_received(b"a")
    assert transport.calls[-1] == "close"
    timers.pending[0][1]()  # the timer that follows finds the connection closed: nothing more
    assert transport.calls.count("close") == 1


@pytest.mark.parametrize(
    ("unread", "transport"),
    [
        pytest.param(b"", Transport(), id="everything-read"),
        pytest.param(b"GET / HTTP/1.1\r\n", Transport(can_write_eof=False), id="no-half-close"),
    ],
)
async def test_a_connection_with_nothing_left_to_read_closes_at_once(
    timers: Timers, unread: bytes, transport: Transport
) -> None:
    protocol = connected(transport)
    protocol.recv_buffer += unread
    protocol.close()
    assert transport.calls == ["close"]
    assert not any(delay == LINGER_FOR for delay, _ in timers.pending)


async def test_closing_a_lingering_connection_closes_it(timers: Timers) -> None:
    """A second close (the server stopping, say) during a linger ends it at once."""
    transport = Transport()
    protocol = connected(transport)
    protocol.recv_buffer += b"GET"
    protocol.close()
    protocol.close()
    assert transport.calls == ["write_eof", "resume_reading", "close"]


@pytest.mark.parametrize(
    ("with_body", "pipelined"), [(False, True), (False, False), (True, True), (True, False)]
)
async def test_a_pipelined_request_gets_its_own_headers_deadline(
    timers: Timers, with_body: bool, pipelined: bool
) -> None:
    """Bytes of a second request that came in the same read as the first start no clock in
    ``data_received``: its deadline for headers starts once the first is read, so a head left
    unfinished is cut at HEADERS_WITHIN, not at Sanic's own 60 s request timeout."""
    protocol = connected(Transport())
    protocol.data_received(b"first request...")
    protocol.headers_in(with_body, pipelined=pipelined and not with_body)
    if with_body:
        protocol.recv_buffer.clear()  # Sanic has read the first request
        protocol.recv_buffer += b"GET / HTTP/1.1\r\nX-a: b" if pipelined else b""
        protocol.body_in()
    now = time.monotonic()
    assert protocol.overdue(now + HEADERS_WITHIN + 1) is pipelined
    assert not protocol.overdue(now + HEADERS_WITHIN - 1)
