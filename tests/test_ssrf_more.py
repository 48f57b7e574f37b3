"""Partner names looked up off the thread pool, each lookup bounded, the SSRF check unchanged; and
NAT64 addresses judged on the IPv4 address they carry."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import cast

import pytest

from service.clock import ManualClock
from service.webhooks.send import Attempt, Sender
from service.webhooks.ssrf import (
    GuardedResolver,
    LookupTimeout,
    NameResolver,
    UnsafeURL,
    check_url,
    is_forbidden,
    system_resolve,
)

# --- A name server on loopback --------------------------------------------------------------------


class NameServer(asyncio.DatagramProtocol):
    """Answers A queries from ``records``, "no such name" for the other names, and never answers a
    name under ``.silent.test`` (a partner whose name servers are down). Every query it is asked
    is counted in ``asked``."""

    def __init__(self, records: dict[str, str]) -> None:
        self.records = records
        self.asked: list[str] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        labels, end = [], 12
        while data[end]:
            labels.append(data[end + 1 : end + 1 + data[end]].decode().lower())
            end += 1 + data[end]
        name, (qtype,) = ".".join(labels), struct.unpack("!H", data[end + 1 : end + 3])
        self.asked.append(name)
        if name.endswith(".silent.test"):
            return
        question = data[12 : end + 5]
        address = self.records.get(name)
        answers = b""
        if address is not None and qtype == 1:
            answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(address)
        rcode = 0 if name in self.records else 3  # NOERROR (no AAAA: no data), or NXDOMAIN
        head = data[:2] + struct.pack("!HHHHH", 0x8180 | rcode, 1, 1 if answers else 0, 0, 0)
        assert self.transport is not None
        self.transport.sendto(head + question + answers, addr)


@asynccontextmanager
async def name_server(records: dict[str, str]) -> AsyncIterator[tuple[NameServer, str]]:
    """The server and its ``host:port``, for ``NameResolver(nameservers=...)``."""
    transport, server = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: NameServer(records), local_addr=("127.0.0.1", 0)
    )
    try:
        yield server, f"127.0.0.1:{transport.get_extra_info('sockname')[1]}"
    finally:
        transport.close()


@asynccontextmanager
async def resolver(address: str, timeout: float = 5.0) -> AsyncIterator[NameResolver]:
    """A ``NameResolver`` asking only the name server at ``address``; its lookups still in flight
    (a silent server is asked again for a while after the bound) cancelled at the end."""
    resolve = NameResolver(timeout=timeout, nameservers=[address])
    try:
        yield resolve
    finally:
        await resolve.close()


@asynccontextmanager
async def partner() -> AsyncIterator[int]:
    """A partner on loopback that answers 200; its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def post(sender: Sender, url: str) -> Attempt:
    return await sender.send(url=url, event="room.claimed", delivery_id="dlv_1", body=b"{}", secrets=["s"])


# --- Lookups off the thread pool ------------------------------------------------------------------


async def test_partner_lookups_take_no_thread_from_the_default_pool() -> None:
    """The default resolver answers while every thread of asyncio's default pool is held (as a few
    partners whose name servers never answer held them all, through getaddrinfo, and every other
    lookup waited: the partners', the database's, Redis's)."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=2)
    loop.set_default_executor(pool)
    held = threading.Event()
    try:
        blocked = [loop.run_in_executor(None, held.wait) for _ in range(4)]  # both threads, and a queue
        addresses = await asyncio.wait_for(system_resolve("localhost", 443), timeout=5)
        assert not any(future.done() for future in blocked)
    finally:
        held.set()
    await asyncio.gather(*blocked)
    assert "127.0.0.1" in addresses


async def test_a_partner_whose_name_servers_never_answer_delays_only_its_own_deliveries() -> None:
    """Forty partners' names hang: another partner is delivered to at once and a lookup through the
    default thread pool (the database's, Redis's) answers at once; the forty end at the lookup's
    bound as "timeout", as when the attempt's connect timeout ends a lookup."""
    async with (
        partner() as port,
        name_server({"healthy.test": "127.0.0.1"}) as (server, address),
        # Two seconds: the healthy delivery and the lookup beside it take milliseconds, and must
        # finish before the forty time out even through a pause of the test process.
        resolver(address, timeout=2.0) as resolve,
        Sender(timeout=30, allow_private=True, clock=ManualClock(), limit=64, resolve=resolve) as sender,
    ):
        hanging = [asyncio.create_task(post(sender, f"http://p{n}.silent.test:{port}/")) for n in range(40)]
        healthy = await asyncio.wait_for(post(sender, f"http://healthy.test:{port}/"), timeout=5)
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo("localhost", 5432), timeout=5)
        assert not any(task.done() for task in hanging)
        silent = await asyncio.gather(*hanging)
    assert (healthy.status_code, healthy.error_class) == (200, None)
    assert {(attempt.status_code, attempt.error_class) for attempt in silent} == {(None, "timeout")}
    assert {f"p{n}.silent.test" for n in range(40)} <= set(server.asked)


async def test_a_lookup_times_out_as_the_attempts_connect_timeout_would() -> None:
    """Whichever bound ends a hanging lookup, the lookup's own or the attempt's connect timeout,
    the attempt's error class is "timeout"; at onboarding the name does not resolve."""
    async with (
        name_server({}) as (_, address),
        resolver(address, timeout=0.2) as slow,
        resolver(address, timeout=30) as patient,
    ):
        with pytest.raises(LookupTimeout):
            await slow("partner.silent.test", 443)
        with pytest.raises(UnsafeURL) as refused:
            await check_url("https://partner.silent.test/hook", allow_private=False, resolve=slow)
        assert refused.value.code == "unresolvable"
        for resolve, connect_timeout in ((slow, 30.0), (patient, 0.2)):
            async with Sender(
                timeout=30, connect_timeout=connect_timeout, allow_private=True, clock=ManualClock(), resolve=resolve
            ) as sender:
                attempt = await asyncio.wait_for(post(sender, "http://partner.silent.test/hook"), timeout=10)
            assert (attempt.status_code, attempt.error_class) == (None, "timeout")


async def test_a_name_that_does_not_exist_is_a_dns_error() -> None:
    async with name_server({}) as (_, address), resolver(address) as resolve:
        with pytest.raises(OSError, match=r"missing\.test"):
            await resolve("missing.test", 443)
        async with Sender(timeout=10, allow_private=True, clock=ManualClock(), resolve=resolve) as sender:
            attempt = await post(sender, "http://missing.test/hook")
        with pytest.raises(UnsafeURL) as refused:
            await check_url("https://missing.test/hook", allow_private=False, resolve=resolve)
    assert (attempt.status_code, attempt.error_class) == (None, "dns")
    assert refused.value.code == "unresolvable"


async def test_the_addresses_checked_are_the_addresses_the_name_server_gave() -> None:
    """Through the new resolver the SSRF check is where it was: the HTTP client's resolver refuses
    a name whose answer is internal, before any connection, and onboarding refuses it too."""
    async with (
        name_server({"inside.test": "10.0.0.7", "public.test": "93.184.216.34"}) as (_, address),
        resolver(address) as resolve,
    ):
        assert await resolve("public.test", 443) == ["93.184.216.34"]
        [result] = await GuardedResolver(resolve).resolve("public.test", 443, socket.AF_UNSPEC)
        assert result["host"] == "93.184.216.34"
        async with Sender(timeout=10, allow_private=False, clock=ManualClock(), resolve=resolve) as sender:
            attempt = await post(sender, "https://inside.test/hook")
        with pytest.raises(UnsafeURL) as refused:
            await check_url("https://inside.test/hook", allow_private=False, resolve=resolve)
    assert (attempt.status_code, attempt.error_class) == (None, "ssrf")
    assert refused.value.code == "forbidden_address"


async def test_an_address_literal_is_never_looked_up() -> None:
    async with name_server({}) as (server, address), resolver(address) as resolve:
        assert await resolve("93.184.216.34", 443) == ["93.184.216.34"]
        assert await resolve("2606:4700::1111", 443) == ["2606:4700::1111"]
    assert server.asked == []


# --- NAT64 ----------------------------------------------------------------------------------------

NAT64_PUBLIC = ["64:ff9b::808:808", "64:ff9b::5db8:d822", "64:ff9b::101:101"]  # 8.8.8.8, 93.184.216.34, 1.1.1.1
NAT64_REFUSED = [
    ("64:ff9b::7f00:1", "loopback"),
    ("64:ff9b::a00:1", "private"),
    ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
    ("64:ff9b::c000:201", "documentation"),
    ("64:ff9b::6440:1", "shared"),
    ("64:ff9b::", "unspecified"),
    ("64:ff9b::e000:1", "multicast"),
    ("64:ff9b:1::808:808", "local-use NAT64 (64:ff9b:1::/48), whatever it carries"),
    ("64:ff9b:1:ffff::1", "local-use NAT64, top"),
]


@pytest.mark.parametrize("address", NAT64_PUBLIC)
def test_nat64_addresses_of_public_ipv4_hosts_are_allowed(address: str) -> None:
    """On an IPv6-only host behind DNS64 every IPv4-only partner resolves into 64:ff9b::/96; the
    IPv4 address it carries decides (Python calls the whole prefix reserved)."""
    assert not is_forbidden(ipaddress.ip_address(address))


@pytest.mark.parametrize(("address", "why"), NAT64_REFUSED)
def test_nat64_addresses_of_refused_ipv4_hosts_are_refused(address: str, why: str) -> None:
    assert is_forbidden(ipaddress.ip_address(address)), why


async def test_a_partner_reached_through_dns64_is_onboarded_and_delivered_to_its_address() -> None:
    async def dns64(host: str, port: int) -> list[str]:
        return {"v4only.example": ["64:ff9b::5db8:d822"], "inside.example": ["64:ff9b::a00:1"]}[host]

    await check_url("https://v4only.example/hook", allow_private=False, resolve=dns64)
    [result] = await GuardedResolver(dns64).resolve("v4only.example", 443, socket.AF_UNSPEC)
    assert result["host"] == "64:ff9b::5db8:d822"
    with pytest.raises(UnsafeURL) as refused:
        await check_url("https://inside.example/hook", allow_private=False, resolve=dns64)
    assert refused.value.code == "forbidden_address"
