"""The ``Sender`` alone, against partners that answer in ways an HTTP server library would not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from service.clock import ManualClock
from service.webhooks.send import Sender


@asynccontextmanager
async def trickling(status: int) -> AsyncIterator[str]:
    """A partner that sends its head and the first bytes of a long body, then nothing more until
    the test is over; the URL to reach it."""
    done = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {status} OK\r\nContent-Length: 100000\r\n\r\nreceived".encode())
        await writer.drain()
        await done.wait()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        done.set()
        server.close()
        await server.wait_closed()


async def test_a_body_that_trickles_after_its_status_frees_the_slot_within_the_excerpt_bound() -> None:
    """The status is what counts: once it is in, the partner has the excerpt's bound (not the
    attempt's whole timeout) to send the bytes the log keeps, and what came by then is kept."""
    async with (
        trickling(200) as url,
        Sender(timeout=60, allow_private=True, clock=ManualClock(), excerpt_timeout=0.05) as sender,
    ):
        attempt = await asyncio.wait_for(
            sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"]),
            timeout=10,  # the attempt's own timeout is a minute; an unbounded excerpt would hit this
        )
    assert (attempt.status_code, attempt.error_class, attempt.response_excerpt) == (200, None, "received")
