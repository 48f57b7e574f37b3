"""Partner URLs never reach internal networks: checked at onboarding and again at delivery."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from webhook_helpers import AUTH, Receiver, deliveries, drain, publish, room_claimed, settings

from service.webhooks.partners import NewPartner, create_partner
from service.webhooks.ssrf import (
    ForbiddenAddress,
    GuardedResolver,
    UnsafeURL,
    check_url,
    is_forbidden,
    parse_partner_url,
)

PUBLIC = "93.184.216.34"

FORBIDDEN = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback range"),
    ("::1", "IPv6 loopback"),
    ("10.1.2.3", "private 10/8"),
    ("172.16.0.1", "private 172.16/12"),
    ("192.168.1.1", "private 192.168/16"),
    ("fc00::1", "IPv6 unique local"),
    ("169.254.169.254", "link-local (cloud metadata)"),
    ("fe80::1", "IPv6 link-local"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "IPv6 multicast"),
    ("ff0e::1", "IPv6 global-scope multicast, which is_global calls global"),
    ("0.0.0.0", "unspecified"),  # noqa: S104 - a destination to refuse, not a bind address
    ("::", "IPv6 unspecified"),
    ("100.64.0.1", "shared address space 100.64/10"),
    ("100.127.255.254", "shared address space, top"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("192.0.2.1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped private"),
    ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
    ("::7f00:1", "IPv4-compatible loopback"),
    ("64:ff9b::a00:1", "NAT64 of a private address"),
    ("2002:a00:1::1", "6to4 of a private address"),
    ("2001:db8::1", "IPv6 documentation"),
    ("fec0::1", "IPv6 site-local, which is_global calls global"),
    ("feff::1", "IPv6 site-local, top"),
    ("192.0.0.8", "IETF protocol assignments, which Python 3.11 calls global"),
    ("192.88.99.1", "retired 6to4 relay anycast"),
    ("3fff::1", "IPv6 documentation, RFC 9637"),
]
# IPv4 spellings other than four decimal numbers, each 127.0.0.1 to a resolver (inet_aton).
NUMERIC_HOSTS = [
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "0177.0.0.01",
    "127.1",
    "127.0.1",
    "0x7f.1",
    "0x7F.0.0.1",
    "127.0.0.01",
    "127.0.0.1.",
]
NUMERIC_MESSAGE = "Write an IPv4 host as four decimal numbers, like 192.0.2.1."


@pytest.mark.parametrize(("address", "why"), FORBIDDEN)
def test_forbidden_addresses(address: str, why: str) -> None:
    """Every address class that is not globally routable is refused."""
    assert is_forbidden(ipaddress.ip_address(address)), why


@pytest.mark.parametrize("address", [PUBLIC, "8.8.8.8", "1.1.1.1", "2606:4700::1111", "2a00:1450::1"])
def test_public_addresses_are_allowed(address: str) -> None:
    """Globally routable addresses pass."""
    assert not is_forbidden(ipaddress.ip_address(address))


def _url_for(address: str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"https://{host}/hook"


def fake_dns(table: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


async def test_check_url_refuses_literals_and_names() -> None:
    """A literal or a name resolving to a forbidden address is refused; a public one passes."""
    dns = fake_dns({"partner.example": [PUBLIC], "sneaky.example": [PUBLIC, "10.0.0.7"]})
    await check_url("https://partner.example/hook", allow_private=False, resolve=dns)
    await check_url(f"https://{PUBLIC}:8443/hook", allow_private=False, resolve=dns)
    for url, code in [
        ("https://sneaky.example/hook", "forbidden_address"),  # one internal address is enough
        ("https://nowhere.example/hook", "unresolvable"),
        ("https://127.0.0.1/hook", "forbidden_address"),
        ("http://partner.example/hook", "insecure_scheme"),
        ("https://user:pw@partner.example/hook", "credentials_in_url"),
        ("ftp://partner.example/", "insecure_scheme"),
        ("partner.example/hook", "insecure_scheme"),
        ("https:///hook", "invalid_url"),
        ("https://partner.example/a b", "invalid_url"),
        ("https://a..b/hook", "invalid_url"),  # the IDNA codec refuses an empty label
        ("https://" + "a" * 64 + ".example/hook", "invalid_url"),  # or one over 63 characters
        ("https://" + "a." * 127 + "example/hook", "invalid_url"),  # or a name over 253
    ]:
        with pytest.raises(UnsafeURL) as caught:
            await check_url(url, allow_private=False, resolve=dns)
        assert caught.value.code == code, url


async def test_a_name_the_resolver_cannot_encode_does_not_resolve() -> None:
    """The system resolver's IDNA codec raises UnicodeError, not OSError, on a name it refuses;
    it is a name that does not resolve, never an error of the server's."""

    async def refusing(host: str, port: int) -> list[str]:
        raise UnicodeError("encoding with 'idna' codec failed")

    with pytest.raises(UnsafeURL) as caught:
        await check_url("https://partner.example/hook", allow_private=False, resolve=refusing)
    assert caught.value.code == "unresolvable"


async def test_a_name_of_long_labels_dns_can_carry_passes() -> None:
    name = ".".join(["a" * 63] * 3) + ".example"  # 63-character labels, 200 in all
    dns = fake_dns({name: [PUBLIC]})
    await check_url(f"https://{name}/hook", allow_private=False, resolve=dns)
    await check_url(f"https://{name}./hook", allow_private=False, resolve=fake_dns({f"{name}.": [PUBLIC]}))


async def test_private_urls_allowed_only_when_configured() -> None:
    """With private URLs allowed, loopback and plain http are accepted (development, tests)."""
    await check_url("http://127.0.0.1:9/hook", allow_private=True)
    assert str(parse_partner_url("http://localhost/x", allow_private=True)) == "http://localhost/x"


async def test_guarded_resolver_refuses_forbidden_answers() -> None:
    """The HTTP client's resolver refuses a name with any internal address, and passes public ones."""
    resolver = GuardedResolver(fake_dns({"ok.example": [PUBLIC], "bad.example": ["192.168.0.2"]}))
    [result] = await resolver.resolve("ok.example", 443, socket.AF_UNSPEC)
    assert result["host"] == PUBLIC and result["port"] == 443
    with pytest.raises(ForbiddenAddress):
        await resolver.resolve("bad.example", 443)
    open_resolver = GuardedResolver(fake_dns({"bad.example": ["192.168.0.2"]}), allow_private=True)
    assert (await open_resolver.resolve("bad.example", 80))[0]["host"] == "192.168.0.2"


@pytest.mark.parametrize(("address", "why"), FORBIDDEN)
def test_onboarding_refuses_every_forbidden_class(make_client: Any, address: str, why: str) -> None:
    """POST /admin/partners answers 400 on the url for each internal address class."""
    with make_client(**settings(webhook_allow_private_urls=False)) as client:
        response = client.post(
            "/admin/partners", json={"name": "P", "url": _url_for(address)}, headers=AUTH
        )
        assert response.status == 400, why
        assert response.json == {
            "ok": False,
            "message": "The request is not valid.",
            "errors": [
                {
                    "field": "url",
                    "code": "forbidden_address",
                    "message": "The host resolves to an address that is not publicly routable.",
                }
            ],
        }


def test_onboarding_refuses_a_name_resolving_to_a_private_address(make_client: Any) -> None:
    """A host name is resolved at onboarding; one pointing inside is refused, a public one accepted."""
    with make_client(**settings(webhook_allow_private_urls=False)) as client:
        client.app.ctx.resolve = fake_dns(
            {"internal.example": ["10.0.0.5"], "partner.example": [PUBLIC]}
        )
        refused = client.post(
            "/admin/partners", json={"name": "P", "url": "https://internal.example/h"}, headers=AUTH
        )
        assert refused.status == 400
        assert refused.json["errors"][0]["code"] == "forbidden_address"
        plain_http = client.post(
            "/admin/partners", json={"name": "P", "url": "http://partner.example/h"}, headers=AUTH
        )
        assert plain_http.json["errors"][0]["code"] == "insecure_scheme"
        accepted = client.post(
            "/admin/partners", json={"name": "P", "url": "https://partner.example/h"}, headers=AUTH
        )
        assert accepted.status == 201


def test_delivery_rechecks_dns_and_refuses_without_connecting(make_client: Any) -> None:
    """A name that later resolves inside (DNS rebinding) is refused at delivery: logged as ssrf."""
    with Receiver() as receiver, make_client(**settings(webhook_allow_private_urls=False)) as client:
        dns = {"partner.example": [PUBLIC]}
        client.app.ctx.resolve = fake_dns(dns)
        response = client.post(
            "/admin/partners",
            json={"name": "P", "url": f"https://partner.example:{receiver.port}/hook"},
            headers=AUTH,
        )
        assert response.status == 201
        dns["partner.example"] = ["127.0.0.1"]  # the receiver is listening right there
        publish(client, room_claimed())
        assert drain(client) == 1
        [delivery] = deliveries(client)
        assert delivery["status"] == "pending"
        [attempt] = delivery["attempts"]
        assert attempt["errorClass"] == "ssrf"
        assert attempt["statusCode"] is None
        assert attempt["outcome"] == "retry"
        assert receiver.requests == []

        test = client.post(f"/admin/partners/{response.json['id']}/test", headers=AUTH)
        assert test.json["ok"] is False
        assert test.json["attempt"]["errorClass"] == "ssrf"
        assert receiver.requests == []


@pytest.mark.parametrize("host", NUMERIC_HOSTS)
@pytest.mark.parametrize("allow_private", [False, True])
def test_numeric_host_forms_are_refused_by_the_parser(host: str, allow_private: bool) -> None:
    """Decimal, octal, hex and short IPv4 forms are refused before any resolver sees them."""
    with pytest.raises(UnsafeURL) as caught:
        parse_partner_url(f"https://{host}:8443/hook", allow_private=allow_private)
    assert (caught.value.code, str(caught.value)) == ("invalid_url", NUMERIC_MESSAGE)


@pytest.mark.parametrize("host", ["[::1%]", "[::ffff:7f00:1%25%30]", "[1:2:3:4:5:6:7:8:9]", "[::1:]"])
@pytest.mark.parametrize("allow_private", [False, True])
def test_an_ipv6_literal_python_cannot_read_is_refused_by_the_parser(host: str, allow_private: bool) -> None:
    """aiohttp takes any host with a colon for an address and never asks the resolver: one the
    address check cannot read would be checked by nothing, so it is refused when it is written."""
    with pytest.raises(UnsafeURL) as caught:
        parse_partner_url(f"https://{host}/hook", allow_private=allow_private)
    assert (caught.value.code, str(caught.value)) == (
        "invalid_url",
        "Write an IPv6 host as an address in brackets, like [2001:db8::1].",
    )


@pytest.mark.parametrize("host", ["[2606:4700::1111]", "[fe80::1%25eth0]"])
def test_ipv6_literals_python_reads_still_parse(host: str) -> None:
    """A readable IPv6 literal (a zone too) parses; where it points is the address check's to judge."""
    assert parse_partner_url(f"https://{host}/hook", allow_private=True).raw_host


@pytest.mark.parametrize("host", ["192.0.2.1", "partner.example", "1e100.net", "deadbeef.cafe", "a.b1"])
def test_names_and_dotted_quads_still_parse(host: str) -> None:
    """A host whose last label is not a number is a name; four decimal numbers are an address."""
    assert parse_partner_url(f"https://{host}/hook", allow_private=False).raw_host == host


@pytest.mark.parametrize("host", NUMERIC_HOSTS)
def test_onboarding_refuses_numeric_host_forms(make_client: Any, host: str) -> None:
    """POST /admin/partners answers 400 on the url for every non-standard IPv4 spelling."""
    with make_client(**settings(webhook_allow_private_urls=False)) as client:
        response = client.post("/admin/partners", json={"name": "P", "url": f"https://{host}/h"}, headers=AUTH)
    assert (response.status_code, response.json) == (
        400,
        {
            "ok": False,
            "message": "The request is not valid.",
            "errors": [{"field": "url", "code": "invalid_url", "message": NUMERIC_MESSAGE}],
        },
    )


@contextmanager
def connection_recorder() -> Iterator[tuple[int, list[Any]]]:
    """A loopback TCP listener that records every connection it accepts, and closes it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[Any] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer)
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_a_stored_numeric_host_is_never_connected_to(make_client: Any, clock: Any) -> None:
    """A partner URL stored before the rule (a numeric host) fails each attempt without connecting."""
    with connection_recorder() as (port, accepted), make_client(
        **settings(webhook_allow_private_urls=False)
    ) as client:
        engine = client.app.ctx.engine

        async def store_partners() -> None:
            async with engine.begin() as conn:
                for host in NUMERIC_HOSTS:
                    new = NewPartner(host, f"https://{host}:{port}/hook", None)
                    await create_partner(conn, new, now=clock(), keyring=client.app.ctx.keyring)

        client.run(store_partners())
        publish(client, room_claimed())
        assert drain(client) == len(NUMERIC_HOSTS)
        attempts = [attempt for delivery in deliveries(client) for attempt in delivery["attempts"]]
    assert [(attempt["errorClass"], attempt["statusCode"]) for attempt in attempts] == [
        ("invalid_url", None)
    ] * len(NUMERIC_HOSTS)
    assert accepted == []
