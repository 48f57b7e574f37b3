"""A TCP proxy on loopback that can go silent, freeze, or go down.

- ``silence()``: it stops forwarding without closing anything. That is what a dead link or a
  failed-over host looks like to a client: the connection stays open, writes are accepted by the
  kernel, and nothing ever comes back. Connections open then stay silent for good (the host behind
  them is gone); connections made while it is silent are accepted and never answered; after
  ``heal()`` new connections work.
- ``freeze()``: nothing moves, as when the server process is stopped; after ``thaw()`` every
  connection carries on where it was, what was sent meanwhile delivered late.
- ``down()``: every connection is cut and new ones are refused at once, as when the server is down;
  ``up()`` accepts them again.
- ``hold_closes()``: when the server closes a connection, its last bytes reach the client but the
  close does not. That is the moment between a server's goodbye and its close, held open:
  ``closed_by_server(n)`` waits until the server has closed ``n``; ``pass_closes()`` passes on
  those held and every later one.

It runs on its own thread and event loop, so a test can drive a server in another process (or on
another loop) while it flips the link.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class _Pipe(asyncio.Protocol):
    """One direction's receiving end: forwards what it reads to ``peer`` unless the link is dead."""

    def __init__(self, link: _Link, upstream: bool = False) -> None:
        self.link = link
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.buffered: list[bytes] = []
        self.held: list[bytes] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if self.link.dead or self.link.frozen:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        if self.link.dead:
            return  # swallowed: a silent link answers nothing
        if self.link.frozen:
            self.held.append(data)  # in flight when the freeze began: delivered on thaw
            return
        if self.peer is None or self.peer.transport is None:
            self.buffered.append(data)
        else:
            self.peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.link.dead:
            return  # the other side never hears of it
        if self.upstream:
            self.link.server_closed = True
            self.link.closed_by_server()
            if self.link.closes_held:
                return  # the client has what the server sent last, and not its close
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Link:
    def __init__(self, closes_held: bool, closed_by_server: Any) -> None:
        self.dead = False
        self.frozen = False
        self.closes_held = closes_held
        self.closed_by_server = closed_by_server
        self.server_closed = False
        self.pipes: list[_Pipe] = []

    def freeze(self) -> None:
        self.frozen = True
        for pipe in self.pipes:
            if pipe.transport is not None:
                pipe.transport.pause_reading()

    def thaw(self) -> None:
        self.frozen = False
        for pipe in self.pipes:
            held, pipe.held = pipe.held, []
            if pipe.peer is not None and pipe.peer.transport is not None:
                for data in held:
                    pipe.peer.transport.write(data)
            if pipe.transport is not None and not self.dead:
                pipe.transport.resume_reading()

    def cut(self) -> None:
        for pipe in self.pipes:
            if pipe.transport is not None:
                pipe.transport.abort()

    def kill(self) -> None:
        self.dead = True
        for pipe in self.pipes:
            if pipe.transport is not None:
                pipe.transport.pause_reading()


class SilentProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0  # accepted so far
        self._silent = False
        self._frozen = False
        self._down = False
        self._closes_held = False
        self._server_closes = 0
        self._closed = asyncio.Condition()
        self._links: list[_Link] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="silent-proxy")
        self._server: asyncio.Server | None = None

    def __enter__(self) -> SilentProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def silence(self) -> None:
        """Stop forwarding: every open connection and every new one hears nothing, for good."""
        self._call(self._silence())

    def heal(self) -> None:
        """Forward new connections again (those made while silent stay dead)."""
        self._call(self._heal())

    def freeze(self) -> None:
        """Move nothing, on any connection, until ``thaw()``."""
        self._call(self._freeze(True))

    def thaw(self) -> None:
        self._call(self._freeze(False))

    def down(self) -> None:
        """Cut every connection and refuse new ones until ``up()``."""
        self._call(self._set_down(True))

    def up(self) -> None:
        self._call(self._set_down(False))

    def hold_closes(self) -> None:
        """From now on, a connection the server closes stays open to its client."""
        self._call(self._hold_closes())

    def pass_closes(self) -> None:
        """Pass on the closes held, and every later one."""
        self._call(self._pass_closes())

    def closed_by_server(self, count: int) -> None:
        """Wait (10 s at most) until the server has closed ``count`` connections in all."""
        self._call(self._closed_by_server(count))

    async def _hold_closes(self) -> None:
        self._closes_held = True
        for link in self._links:
            link.closes_held = True

    async def _pass_closes(self) -> None:
        self._closes_held = False
        for link in self._links:
            link.closes_held = False
            client = link.pipes[0]
            if link.server_closed and client.transport is not None:
                client.transport.close()

    async def _closed_by_server(self, count: int) -> None:
        async with self._closed:
            await self._closed.wait_for(lambda: self._server_closes >= count)

    def _server_closed(self) -> None:
        self._server_closes += 1

        async def tell() -> None:
            async with self._closed:
                self._closed.notify_all()

        self._loop.create_task(tell())

    async def _freeze(self, frozen: bool) -> None:
        self._frozen = frozen
        for link in self._links:
            if frozen:
                link.freeze()
            else:
                link.thaw()

    async def _set_down(self, down: bool) -> None:
        self._down = down
        if down:
            for link in self._links:
                link.cut()
            self._links.clear()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        self._server = await asyncio.get_running_loop().create_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in self._links:
            for pipe in link.pipes:
                if pipe.transport is not None:
                    pipe.transport.abort()

    async def _silence(self) -> None:
        self._silent = True
        for link in self._links:
            link.kill()

    async def _heal(self) -> None:
        self._silent = False

    def _accept(self) -> _Pipe:
        self.connections += 1
        link = _Link(self._closes_held, self._server_closed)
        self._links.append(link)
        client = _Pipe(link)
        link.pipes.append(client)
        if self._down:
            asyncio.get_running_loop().call_soon(link.cut)  # refused as soon as it is made
        elif self._frozen:
            link.freeze()
            asyncio.get_running_loop().create_task(self._connect(link, client))
        elif self._silent:
            link.dead = True  # accepted, never answered
        else:
            asyncio.get_running_loop().create_task(self._connect(link, client))
        return client

    async def _connect(self, link: _Link, client: _Pipe) -> None:
        upstream = _Pipe(link, upstream=True)
        try:
            await asyncio.get_running_loop().create_connection(lambda: upstream, *self.target)
        except OSError:
            if client.transport is not None:
                client.transport.close()
            return
        link.pipes.append(upstream)
        client.peer, upstream.peer = upstream, client
        assert upstream.transport is not None
        if link.frozen:
            upstream.transport.pause_reading()
            client.held[:0], client.buffered = client.buffered, []
        if not link.dead:
            for data in client.buffered:
                upstream.transport.write(data)
        client.buffered.clear()
        if link.dead:
            link.kill()
