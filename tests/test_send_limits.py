"""The ``Sender``'s connections at their limit: every open connection, idle ones included, held to
the pool's limit. And the aiohttp internals that relies on, checked against the pinned version."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp.client_proto import ResponseHandler
from aiohttp.connector import BaseConnector, TCPConnector

from service.clock import ManualClock
from service.settings import Settings
from service.webhooks import send, wiring
from service.webhooks.send import Attempt, Sender
from tests.pins import exact_pin

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def on(loop: str, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``main()`` run to its end on ``loop`` (uvloop is where ``serve`` and ``worker`` deliver)."""
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main())


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    await reader.readexactly(int(fields[b"Content-Length"]))


async def post(sender: Sender, url: str, delivery_id: str = "dlv_1") -> Attempt:
    return await sender.send(url=url, event="room.claimed", delivery_id=delivery_id, body=b"{}", secrets=["s"])


# --- Every open connection, idle ones included, within the limit -----------------------------------


class Partner:
    """A receiver on loopback answering 200 on kept-alive connections. A burst's answers wait until
    ``burst`` requests are in, so the burst holds that many connections at once."""

    def __init__(self, burst: int) -> None:
        self.burst = burst
        self.accepted = 0  # connections the partner took
        self._waiting: list[asyncio.Future[None]] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Partner:
        self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while True:
                await _read_request(reader)
                turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiting.append(turn)
                if len(self._waiting) >= self.burst:
                    for waiting in self._waiting:
                        waiting.set_result(None)
                    self._waiting.clear()
                await turn
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def open_sockets_to(ports: set[int]) -> int:
    """This process's open TCP sockets whose far end is one of ``ports``: the sender's connections
    to those partners, in use or idle (each holds a file descriptor until it is closed)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) in ports and fields[9] in inodes:
                    count += 1
    return count


async def _settle() -> None:
    """A few turns of the loop: closes already asked for are carried out (no time passes)."""
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.mark.parametrize("loop", LOOPS)
def test_idle_connections_count_against_the_limit_so_partner_after_partner_stays_within_it(loop: str) -> None:
    """A burst of 4 to each of 6 partners in turn through a pool of 8: aiohttp kept every burst's
    connections open, idle, behind it (24 descriptors for a limit of 8; a worker at its descriptor
    limit then failed every partner's attempts as "connect"). Now a new connection closes the
    least recently used idle ones first: never more than 8 open, and every attempt delivered."""

    async def main() -> tuple[list[int], set[tuple[int | None, str | None]]]:
        async with AsyncExitStack() as stack:
            partners = [await stack.enter_async_context(Partner(burst=4)) for _ in range(6)]
            sender = await stack.enter_async_context(
                Sender(timeout=10, allow_private=True, clock=ManualClock(), limit=8)
            )
            ports = {partner.port for partner in partners}
            counts, results = [], set()
            for partner in partners:
                attempts = await asyncio.gather(*(post(sender, partner.url) for _ in range(4)))
                results |= {(attempt.status_code, attempt.error_class) for attempt in attempts}
                await _settle()
                counts.append(open_sockets_to(ports))
            return counts, results

    counts, results = on(loop, main)
    assert results == {(200, None)}
    assert max(counts) <= 8, f"open connections after each burst: {counts} (limit 8)"
    assert counts[-1] == 8  # the limit is used: the last two partners' connections stay pooled


@pytest.mark.parametrize("loop", LOOPS)
def test_a_busy_partner_keeps_its_connections_and_the_least_recently_used_go_first(loop: str) -> None:
    """Within the limit nothing is closed: a partner sent to again reuses its idle connections.
    Past it, the connections closed for a newcomer are those given back longest ago: a partner
    used since keeps its own."""

    async def main() -> tuple[int, int, int, int]:
        async with (
            Partner(burst=4) as quiet,
            Partner(burst=4) as busy,
            Partner(burst=4) as newcomer,
            Sender(timeout=10, allow_private=True, clock=ManualClock(), limit=8) as sender,
        ):
            for partner in (quiet, busy, busy):  # 8 open: quiet's 4, then busy's 4 (reused once)
                await asyncio.gather(*(post(sender, partner.url) for _ in range(4)))
            reused = busy.accepted
            await asyncio.gather(*(post(sender, newcomer.url) for _ in range(4)))  # quiet's 4 make room
            await asyncio.gather(*(post(sender, busy.url) for _ in range(4)))
            await _settle()
            return reused, busy.accepted, quiet.accepted, open_sockets_to({quiet.port, busy.port, newcomer.port})

    reused, busy_accepted, quiet_accepted, open_now = on(loop, main)
    assert reused == 4  # the second burst went out on the first one's connections
    assert busy_accepted == 4  # still: its connections were not the ones closed for the newcomer
    assert quiet_accepted == 4
    assert open_now == 8


async def test_the_connector_internals_the_pool_relies_on_are_where_they_were() -> None:
    """``send._Pool`` overrides ``TCPConnector._create_connection`` and reads ``_acquired`` and
    ``_conns``. This fails, naming them, when aiohttp moves them: ``BaseConnector.connect`` must
    call ``_create_connection`` only to open a new connection, once that connection is counted in
    ``_acquired``, and the pool must keep each endpoint's idle connections in ``_conns`` as a deque
    of (protocol, time given back), oldest first."""
    for name, owner in (("_create_connection", TCPConnector), ("connect", BaseConnector)):
        assert name in vars(owner), f"aiohttp {aiohttp.__version__}: {owner.__name__}.{name} is gone"
    assert list(inspect.signature(TCPConnector._create_connection).parameters) == [
        "self", "req", "traces", "timeout",
    ], f"aiohttp {aiohttp.__version__}: TCPConnector._create_connection changed its parameters"

    counted: list[int] = []

    class Probe(send._Pool):
        async def _create_connection(self, *args: Any) -> ResponseHandler:
            counted.append(len(self._acquired))
            return await super()._create_connection(*args)

    async with Partner(burst=2) as partner:
        connector = Probe(limit=8)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one() -> None:
                async with session.post(partner.url, data=b"{}") as response:
                    await response.read()

            await asyncio.gather(one(), one())
            assert counted == [1, 2], "each new connection is counted in _acquired before it is opened"
            pool = connector._conns
            assert [len(idle) for idle in pool.values()] == [2], "the idle connections are in _conns"
            (idle,) = pool.values()
            assert all(isinstance(protocol, ResponseHandler) and isinstance(when, float) for protocol, when in idle)
            assert idle[0][1] <= idle[1][1], "oldest first"
            partner.burst = 1
            await one()
            assert counted == [1, 2], "a connection taken again from the pool opens nothing"


def test_aiohttp_is_the_pinned_version_whose_connector_the_pool_overrides() -> None:
    """aiohttp is pinned exactly: ``send._Pool`` overrides a method of its connector and reads its
    pool. Before moving the pin, run this file."""
    pinned = exact_pin("aiohttp")
    assert pinned, "pyproject.toml must pin aiohttp exactly (==): service.webhooks.send relies on its internals"
    assert aiohttp.__version__ == pinned, (
        f"service.webhooks.send relies on aiohttp {pinned}'s internals; aiohttp {aiohttp.__version__} "
        "is installed. Run tests/test_send_limits.py against it, then move the pin in pyproject.toml."
    )


# --- Test deliveries: one hanging partner cannot take the pool -------------------------------------


async def _hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A partner that takes the request and never answers."""
    with contextlib.suppress(Exception):
        await reader.read()
    writer.close()


async def _ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    await writer.drain()
    writer.close()


async def test_test_deliveries_to_a_hanging_partner_leave_others_a_connection() -> None:
    """More test deliveries to a hanging partner than its share of the pool: a test of another
    partner still gets a connection at once and its 200, instead of waiting for one past the
    connect timeout (which aiohttp counts the wait against) and failing as a timeout."""
    settings = Settings(webhook_allow_private_urls=True, webhook_timeout=30, webhook_connect_timeout=2)
    hanging = await asyncio.start_server(_hang, "127.0.0.1", 0)
    healthy = await asyncio.start_server(_ok, "127.0.0.1", 0)
    stuck = f"http://127.0.0.1:{hanging.sockets[0].getsockname()[1]}/hook"
    fine = f"http://127.0.0.1:{healthy.sockets[0].getsockname()[1]}/hook"
    async with hanging, healthy, wiring.sender(settings, clock=ManualClock()) as sender:
        waiting = [
            asyncio.ensure_future(post(sender, stuck, f"dlv_h{n}"))
            for n in range(wiring.TEST_CONNECTIONS_PER_HOST + 2)
        ]
        await asyncio.sleep(0)  # the hanging ones take their connections first
        attempt = await post(sender, fine)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    assert (attempt.status_code, attempt.error_class) == (200, None)
