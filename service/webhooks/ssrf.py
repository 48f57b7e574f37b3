"""Keeping partner URLs off internal networks (server-side request forgery).

A partner URL is checked when it is onboarded and again on every delivery, because DNS can change
between the two. The delivery check lives in the HTTP client's resolver (``GuardedResolver``), so
the addresses that were checked are exactly the ones connected to: nothing resolves the name a
second time in between.

Refused: every address that is not globally routable — loopback, private, link-local, multicast,
unspecified, reserved, shared (100.64/10), documentation and benchmarking ranges, IPv6 site-local
(fec0::/10), local-use NAT64 (64:ff9b:1::/48) — and IPv6 forms that carry such an IPv4 address
(IPv4-mapped, IPv4-compatible, 6to4, NAT64, Teredo). An address in the well-known NAT64 prefix
(64:ff9b::/96) is how a DNS64 resolver writes an IPv4 host for an IPv6-only network: it is judged
on the IPv4 address it carries alone, so a public IPv4 partner is reached through NAT64 and a
private one is not. An IPv4 host must be written as four decimal numbers: the other spellings that
resolvers and browsers accept (``2130706433``, ``0177.0.0.1``, ``127.1``, ``0x7f.1``) are refused
by the parser itself, so no check ever reads such a host as a name while a resolver reads it as
an address.
``Settings.webhook_allow_private_urls`` lifts the rule for development and tests.

Partner names are looked up by ``system_resolve``: c-ares (aiodns) on the event loop, reading the
system's resolver configuration and hosts file, each lookup bounded by ``LOOKUP_SECONDS``. Never
asyncio's default thread pool: there a partner whose name servers never answer held a thread for
as long as the C library kept asking (past the attempt's own timeout), and a few such partners
held every thread, so every other partner's lookups, and the database's and Redis's, waited.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import weakref
from collections.abc import Awaitable, Callable, Sequence

import aiodns
import pycares
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> every address the name resolves to, as text.
Resolve = Callable[[str, int], Awaitable[list[str]]]

URL_MAX_LENGTH = 2048  # the partners.url column
# RFC 6598 shared address space; Python's is_global already excludes it, named here for the reader.
SHARED = ipaddress.ip_network("100.64.0.0/10")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d form (RFC 4291 2.5.5.1)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known NAT64 prefix (RFC 6052)
# Local-use NAT64 prefix (RFC 8215): an operator's own translators, whatever IPv4 address follows.
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
# Special ranges Python 3.11's tables call global, none of them a partner's endpoint: the IETF's
# protocol assignments (RFC 6890; its anycast addresses too), the retired 6to4 relays (RFC 7526) and
# IPv6's second documentation prefix (RFC 9637).
UNROUTED = (
    ipaddress.ip_network("192.0.0.0/24"),
    ipaddress.ip_network("192.88.99.0/24"),
    ipaddress.ip_network("3fff::/20"),
)
# The longest a partner name's lookup may take: about what the C library gives one name server that
# never answers (resolv.conf's defaults, 5 s twice). Past it the lookup fails as ``LookupTimeout``:
# an attempt's "timeout", as when its connect timeout (5 s by default, which includes the lookup)
# ends it first; at onboarding, a name that does not resolve.
LOOKUP_SECONDS = 10.0
FORBIDDEN_MESSAGE = "The host resolves to an address that is not publicly routable."
# The WHATWG URL standard's "ends in a number": such a host is an IPv4 address in some notation
# (inet_aton's decimal, octal, hex and short forms), never a name.
_NUMBER_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")


class UnsafeURL(Exception):
    """The URL may not be used for delivery; ``code`` is a stable token, ``str()`` a sentence."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class LookupTimeout(TimeoutError):
    """A name's servers did not answer within the lookup's bound (an ``OSError``, errno None, as
    asyncio's own timeouts are: aiohttp passes it on as a timeout, not as a failed lookup)."""


class ForbiddenAddress(OSError):
    """Raised inside the HTTP client's resolver, so aiohttp reports it as a connection error."""

    def __init__(self, host: str) -> None:
        super().__init__(f"{host} resolves to an address that is not globally routable")
        self.host = host


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's (obfuscation removed) address
    return None


def is_forbidden(address: IPAddress) -> bool:
    """True for any address a delivery must not reach."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            return True  # a zone index only makes sense on a local link
        if address in NAT64:
            # An IPv4 host as DNS64 writes it: the IPv4 address alone decides. The prefix itself
            # is no destination (Python calls all of ::/8 reserved).
            return is_forbidden(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address in NAT64_LOCAL:
            return True  # Python versions differ on it (reserved, private); never a partner
        embedded = _embedded_ipv4(address)
        if embedded is not None and is_forbidden(embedded):
            return True
        if address in IPV4_COMPATIBLE:
            return True  # ::, ::1 and the deprecated compatible form: never a real destination
    return (
        not address.is_global
        # is_global is not enough on its own: it is True for some multicast ranges (ff0e::/16)
        # and Python versions differ on the special ranges, so the classes are named too.
        or address.is_multicast
        or address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_unspecified
        or address.is_reserved
        or (isinstance(address, ipaddress.IPv4Address) and address in SHARED)
        # Deprecated (RFC 3879) yet still routed inside some networks; is_global calls it global.
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
        or any(address in network for network in UNROUTED)
    )


def is_numeric_host(host: str) -> bool:
    """Whether ``host`` is an IPv4 address in some notation: its last label is a number."""
    return bool(_NUMBER_LABEL.fullmatch(host.removesuffix(".").rpartition(".")[2]))


def is_host_name(host: str) -> bool:
    """Whether ``host`` (as yarl gives it: IDNA-encoded) is a name DNS can carry: labels of 1 to 63
    characters, 253 in all, one trailing dot allowed. Any other name fails in the resolver's IDNA
    codec (``UnicodeError``), not as a name that does not resolve."""
    name = host.removesuffix(".")
    return 0 < len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def parse_address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class NameResolver:
    """A ``Resolve``: every address of a name, looked up by c-ares (aiodns) on the running event
    loop, within ``timeout`` seconds.

    No thread is held while a name server is silent, so a partner whose name servers never answer
    delays only its own lookups: the others', and every lookup through asyncio's default thread
    pool (the database's, Redis's), go on. c-ares reads the system's resolver configuration and
    hosts file as the C library does; ``nameservers`` (``host:port``) replaces the configured ones,
    for tests. A lookup past ``timeout`` raises ``LookupTimeout``; one the name servers answer with
    no address, or refuse, an ``OSError``.
    """

    def __init__(self, *, timeout: float = LOOKUP_SECONDS, nameservers: Sequence[str] | None = None) -> None:
        self._timeout = timeout
        self._nameservers = nameservers
        # One c-ares channel an event loop (its callbacks run there), dropped with the loop.
        self._channels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiodns.DNSResolver] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, host: str, port: int) -> list[str]:
        if parse_address(host) is not None:
            return [host]
        loop = asyncio.get_running_loop()
        channel = self._channels.get(loop)
        if channel is None:
            # c-ares's own retries (resolv.conf's default: 5 s, twice) end about the bound or
            # soon after it; the bound is what the caller waits.
            try:
                channel = aiodns.DNSResolver(self._nameservers, loop=loop, timeout=self._timeout / 2, tries=2)
            except pycares.AresError as error:  # no resolver configuration c-ares can use
                raise OSError(None, f"{host}: no name resolution: {error}") from error
            self._channels[loop] = channel
        try:
            async with asyncio.timeout(self._timeout):
                result = await channel.getaddrinfo(host, socket.AF_UNSPEC, port, type=socket.SOCK_STREAM)
        except TimeoutError:
            raise LookupTimeout(f"{host}: no answer within {self._timeout:g} s") from None
        except aiodns.error.DNSError as error:
            message = error.args[1] if len(error.args) > 1 else "DNS lookup failed"
            if error.args and error.args[0] == aiodns.error.ARES_ETIMEOUT:
                raise LookupTimeout(f"{host}: {message}") from None
            raise OSError(None, f"{host}: {message}") from None
        return list(dict.fromkeys(_text(node.addr) for node in result.nodes))

    async def close(self) -> None:
        """Cancel the running loop's lookups still in flight and close its channel. (c-ares goes on
        asking a silent name server for a while after the bound; a process's channels end with it.)"""
        channel = self._channels.pop(asyncio.get_running_loop(), None)
        if channel is not None:
            await channel.close()


def _text(addr: tuple[bytes, int] | tuple[bytes, int, int, int]) -> str:
    """An address c-ares gives, as text; an IPv6 address with its zone index (which refuses it)."""
    text = addr[0].decode("ascii")
    return f"{text}%{addr[3]}" if len(addr) > 3 and addr[3] else text


# Every partner name's lookup, at onboarding and at delivery, unless a test passes its own.
system_resolve: Resolve = NameResolver()


def parse_partner_url(text: str, *, allow_private: bool) -> URL:
    """The URL if its shape is acceptable (scheme, host, no credentials), else ``UnsafeURL``."""
    if len(text) > URL_MAX_LENGTH:
        raise UnsafeURL("too_long", f"Must be at most {URL_MAX_LENGTH} characters.")
    if any(ord(char) < 0x21 or ord(char) == 0x7F for char in text):
        raise UnsafeURL("invalid_url", "Must be an absolute URL without spaces or control characters.")
    try:
        url = URL(text)
        host = url.raw_host
        port = url.port  # a malformed port only shows when it is read
    except (ValueError, TypeError):
        raise UnsafeURL("invalid_url", "Must be an absolute URL.") from None
    if port is not None and not 1 <= port <= 65535:  # yarl reads "0" and never checks the range
        raise UnsafeURL("invalid_url", "Must name a port from 1 to 65535.")
    schemes = ("https", "http") if allow_private else ("https",)
    if url.scheme not in schemes:
        raise UnsafeURL(
            "insecure_scheme",
            "Must be an https URL." if not allow_private else "Must be an http or https URL.",
        )
    if not host:
        raise UnsafeURL("invalid_url", "Must name a host.")
    if is_numeric_host(host) and not isinstance(parse_address(host), ipaddress.IPv4Address):
        raise UnsafeURL("invalid_url", "Write an IPv4 host as four decimal numbers, like 192.0.2.1.")
    if ":" in host and parse_address(host) is None:
        # An IPv6 literal Python cannot read ([::1%], nine groups): aiohttp would take it for an
        # address and connect without asking the resolver, so no check would ever see it.
        raise UnsafeURL("invalid_url", "Write an IPv6 host as an address in brackets, like [2001:db8::1].")
    if parse_address(host) is None and not is_host_name(host):
        raise UnsafeURL("invalid_url", "Must name a host of dot-separated labels, 1 to 63 characters each.")
    if url.raw_user is not None or url.raw_password is not None:
        # Credentials in the URL would be listed to every admin; partners authenticate us by signature.
        raise UnsafeURL("credentials_in_url", "Must not carry a user name or password.")
    if url.fragment:
        raise UnsafeURL("invalid_url", "Must not carry a fragment.")
    return url


async def check_url(text: str, *, allow_private: bool, resolve: Resolve = system_resolve) -> URL:
    """Shape and destination check used at onboarding; raises ``UnsafeURL``."""
    url = parse_partner_url(text, allow_private=allow_private)
    if allow_private:
        return url
    host = url.raw_host or ""
    literal = parse_address(host)
    if literal is not None:
        if is_forbidden(literal):
            raise UnsafeURL("forbidden_address", FORBIDDEN_MESSAGE)
        return url
    try:
        addresses = await resolve(host, url.port or 443)
    except (OSError, UnicodeError):  # UnicodeError: a name the IDNA codec refuses
        raise UnsafeURL("unresolvable", "The host name does not resolve.") from None
    if not addresses:
        raise UnsafeURL("unresolvable", "The host name does not resolve.")
    for text_address in addresses:
        address = parse_address(text_address)
        if address is None or is_forbidden(address):
            raise UnsafeURL("forbidden_address", FORBIDDEN_MESSAGE)
    return url


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that refuses a name with any forbidden address (unless private is allowed).

    One forbidden address refuses the whole name: a name that resolves to both a public and an
    internal address is a rebinding attempt, not a partner.
    """

    def __init__(self, resolve: Resolve = system_resolve, *, allow_private: bool = False) -> None:
        self._resolve = resolve
        self._allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results: list[ResolveResult] = []
        for text in await self._resolve(host, port):
            address = parse_address(text)
            if address is None:
                continue
            if not self._allow_private and is_forbidden(address):
                raise ForbiddenAddress(host)
            if family == socket.AF_INET and address.version == 6:
                continue
            if family == socket.AF_INET6 and address.version == 4:
                continue
            results.append(_result(host, str(address), port, address.version))
        if not results:
            raise OSError(f"{host} has no usable address")
        return results

    async def close(self) -> None:
        return None


def _result(hostname: str, host: str, port: int, version: int) -> ResolveResult:
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    return ResolveResult(
        hostname=hostname, host=host, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST
    )


def check_literal(url: URL, *, allow_private: bool) -> None:
    """aiohttp does not consult the resolver for IP literals, so they are checked here."""
    address = parse_address(url.raw_host or "")
    if address is not None and not allow_private and is_forbidden(address):
        raise ForbiddenAddress(str(address))
