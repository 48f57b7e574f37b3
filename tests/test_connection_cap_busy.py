"""The connection cap never closes a connection whose request is being answered.

The app runs in this process on Sanic's reusable test server, with ``GuardedProtocol`` as its
protocol as ``serve`` passes it, and a cap of three connections. Registrations wait in their
handler on a SQLite write lock the test holds (an auditor's reproduction: the row was committed and
its connection closed without an answer); a request middleware says when each handler has begun.
Nothing waits for time to pass: the test moves on when the server has done what it waits for.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sanic import Request
from sanic_testing.reusable import ReusableClient

from service.app import create_app
from service.clock import ManualClock
from service.connections import GuardedProtocol, Registry
from service.settings import Settings
from tests.processes import free_port

LIMIT = 3
WITHIN = 5.0  # seconds: a bound on what the server does at once, so a failure does not hang

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextmanager
def serving(app: Any) -> Iterator[tuple[asyncio.AbstractEventLoop, int]]:
    """The app served on loopback with the service's protocol; the loop to run the client on."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    port = free_port()
    try:
        with ReusableClient(app, port=port, loop=loop, server_kwargs={"protocol": GuardedProtocol}):
            yield loop, port
    finally:
        loop.close()


async def _status(reader: asyncio.StreamReader) -> int:
    """The status of the answer on ``reader``, its body read; 0 if the connection closed first."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WITHIN)
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return 0
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        (int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:")), 0
    )
    await asyncio.wait_for(reader.readexactly(length), WITHIN)
    return int(lines[0].split(" ")[1])


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (at once: False if it is still open after WITHIN)."""
    try:
        return await asyncio.wait_for(reader.read(1), WITHIN) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _registration(email: str) -> bytes:
    body = json.dumps({"email": email, "intent": "claim"}).encode()
    return (
        b"POST /api/waitlist HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )


def test_a_connection_whose_request_is_being_answered_is_never_closed_for_room(
    sqlite_url: str, clock: ManualClock
) -> None:
    """At the cap, a newcomer closes the quietest connection waiting between requests (kept alive,
    then one still sending its head), never one whose registration is waiting on the database,
    though that one has been quiet longest; when every other connection is being answered, the
    newcomer is closed. Once the lock goes, every registration is answered 200 and stored."""
    app = create_app(
        Settings(database_url=sqlite_url, waitlist_rate_limit="1000/minute", max_connections=LIMIT),
        clock=clock,
    )
    handling: asyncio.Queue[str] = asyncio.Queue()

    @app.on_request
    async def handler_begins(request: Request) -> None:
        if request.path == "/api/waitlist":
            handling.put_nowait(request.path)

    async def connect(port: int, send: bytes = b"") -> Streams:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        if send:
            writer.write(send)
        return reader, writer

    async def register(streams: Streams, email: str) -> None:
        """Send a registration on ``streams`` and return once its handler runs (and waits)."""
        streams[1].write(_registration(email))
        await asyncio.wait_for(handling.get(), WITHIN)

    async def scenario(port: int, registry: Registry, database: Path) -> dict[str, Any]:
        lock = sqlite3.connect(database, isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")  # registrations wait on it in their handler
            busy = await connect(port)
            await register(busy, "first@example.com")
            kept_alive = await connect(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert await _status(kept_alive[0]) == 200  # answered, kept alive, idle
            half_sent = await connect(port, b"GET /healthz HTTP/1.1\r\nHo")  # its head not yet in
            # The cap is reached. The busy connection has been quiet longest: it stays.
            second = await connect(port)
            kept_alive_closed = await _closed(kept_alive[0])
            await register(second, "second@example.com")
            third = await connect(port)
            half_sent_closed = await _closed(half_sent[0])
            await register(third, "third@example.com")
            # Every connection is being answered: the newcomer is refused.
            refused = await connect(port)
            refused_closed = await _closed(refused[0])
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        statuses = [await _status(streams[0]) for streams in (busy, second, third)]
        for streams in (busy, kept_alive, half_sent, second, third, refused):
            streams[1].close()
        return {
            "kept alive closed": kept_alive_closed,
            "half sent closed": half_sent_closed,
            "newcomer refused": refused_closed,
            "answers": statuses,
            "evicted": registry.evicted,
        }

    database = Path(sqlite_url.removeprefix("sqlite:///"))
    with serving(app) as (loop, port):
        registry = app.ctx.connections
        assert registry is not None and registry.limit == LIMIT
        outcome = loop.run_until_complete(scenario(port, registry, database))

    assert outcome == {
        "kept alive closed": True,
        "half sent closed": True,
        "newcomer refused": True,
        "answers": [200, 200, 200],
        "evicted": 2,  # the kept-alive one and the half-sent one; the newcomer refused is no eviction
    }
    assert registry.refused == 1
    with sqlite3.connect(database) as stored:
        emails = {email for (email,) in stored.execute("SELECT email FROM registrations")}
    assert emails == {"first@example.com", "second@example.com", "third@example.com"}
