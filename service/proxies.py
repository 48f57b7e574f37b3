"""Which peers' forwarded headers are believed: ``SERVICE_TRUSTED_PROXIES``.

Sanic reads client addresses from ``X-Forwarded-For``, ``Forwarded`` or ``REAL_IP_HEADER`` once one
of its proxy settings is on (``SANIC_PROXIES_COUNT``, ``SANIC_REAL_IP_HEADER``,
``SANIC_FORWARDED_SECRET``). Anyone who can reach the port directly could then pick their own
address on every request and dodge every per-client limit. So the headers count only when the
connection's own peer is one of the trusted proxies (addresses or networks), or, for a ``Forwarded``
element, when it carries ``SANIC_FORWARDED_SECRET``: the shared secret proves the proxy whatever
its address (``service.waitlist.client_address``). From anyone else the peer address is the client.
A counting setting (``SANIC_PROXIES_COUNT``, ``SANIC_REAL_IP_HEADER``) without any trusted proxy
stops the start, with the reason (docs/architecture.md "Faults and slow clients").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the settings import this module, and analytics the settings: no server here
    from sanic.config import Config

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")  # IPv4 addresses written as IPv6 (RFC 4291)


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses (one-address networks) or networks in CIDR form; ValueError names the bad one.

    An IPv4-mapped entry (``::ffff:10.0.0.5``) is kept as the IPv4 network it names: a peer is
    compared as its IPv4 address (``trusted_peer``), so kept as IPv6 it would match nobody."""
    networks: list[Network] = []
    for value in values:
        try:
            network = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            raise ValueError(f"not an address or network: {value.strip()!r}") from None
        if isinstance(network, ipaddress.IPv6Network) and network.subnet_of(_MAPPED):
            mapped = network.network_address.ipv4_mapped
            assert mapped is not None  # inside ::ffff:0:0/96
            network = ipaddress.IPv4Network((mapped, network.prefixlen - _MAPPED.prefixlen))
        networks.append(network)
    return tuple(networks)


def header_settings(config: Config) -> list[str]:
    """Sanic's proxy settings that turn forwarded-header parsing on, by their variable names."""
    named = {
        "SANIC_PROXIES_COUNT": config.PROXIES_COUNT,
        "SANIC_REAL_IP_HEADER": config.REAL_IP_HEADER,
        "SANIC_FORWARDED_SECRET": config.FORWARDED_SECRET,
    }
    return [name for name, value in named.items() if value]


def misconfiguration(config: Config, trusted: tuple[Network, ...]) -> str | None:
    """Why the start must stop, in one line; None when the proxy settings agree."""
    count = config.PROXIES_COUNT
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        # Sanic takes the variable as it is written, and would fail at start (or on the first
        # proxied request) on anything but a count.
        return "SANIC_PROXIES_COUNT must be a whole number of proxies, 0 or more"
    counting = [name for name in header_settings(config) if name != "SANIC_FORWARDED_SECRET"]
    if counting and not trusted:
        return (
            f"{' and '.join(counting)} is set but SERVICE_TRUSTED_PROXIES is empty: forwarded "
            "addresses would be believed from anyone; list the proxies' addresses or networks in "
            "SERVICE_TRUSTED_PROXIES, or unset it"
        )
    return None


def trusted_peer(peer: str, trusted: tuple[Network, ...]) -> bool:
    """Whether the connection's own peer address is one of the trusted proxies."""
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in trusted)
