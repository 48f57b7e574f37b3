"""Forwarded addresses are believed only from SERVICE_TRUSTED_PROXIES."""

from __future__ import annotations

import pytest

from service import cli
from service.app import create_app
from service.clock import ManualClock
from service.proxies import misconfiguration, parse_networks, trusted_peer
from service.settings import Settings
from tests.conftest import Client
from tests.webhook_helpers import ADMIN_TOKEN

BODY = {"email": "a@example.com", "intent": "claim"}
PROXY_VARIABLES = ("SANIC_PROXIES_COUNT", "SANIC_REAL_IP_HEADER", "SANIC_FORWARDED_SECRET")


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _proxied(monkeypatch, sqlite_url, trusted, **options) -> Client:
    monkeypatch.setenv("SANIC_PROXIES_COUNT", "1")
    settings = Settings(database_url=sqlite_url, trusted_proxies=trusted, **options)
    return Client(create_app(settings, clock=ManualClock()))  # the limiter's windows stand still


def test_a_rotating_forwarded_for_from_an_untrusted_peer_changes_nothing(monkeypatch, sqlite_url, rate_limit_storage):
    """A peer that is not a trusted proxy is the client, whatever X-Forwarded-For it invents: the
    waitlist limit and the admin throttle hold."""
    options = {"waitlist_rate_limit": "2/minute", "admin_token": ADMIN_TOKEN, **rate_limit_storage}
    with _proxied(monkeypatch, sqlite_url, ("192.0.2.10",), **options) as client:
        registrations = [
            client.post("/api/waitlist", json=BODY, headers={"x-forwarded-for": f"203.0.113.{n}"}).status_code
            for n in range(4)
        ]
        guesses = [
            client.get(
                "/admin/waitlist", headers={"authorization": "Bearer wrong", "x-forwarded-for": f"198.51.100.{n}"}
            ).status_code
            for n in range(12)
        ]
    assert registrations == [200, 200, 429, 429]
    assert guesses == [401] * 10 + [429] * 2


def test_from_a_trusted_proxy_two_clients_each_get_their_own_allowance(monkeypatch, sqlite_url, rate_limit_storage):
    """Through a trusted proxy (loopback here) the forwarded address is the client: two clients
    behind it are counted apart, each with its own allowance."""
    with _proxied(
        monkeypatch, sqlite_url, ("127.0.0.0/8",), waitlist_rate_limit="1/minute", **rate_limit_storage
    ) as client:
        statuses = [
            client.post("/api/waitlist", json=BODY, headers={"x-forwarded-for": address}).status_code
            for address in ("203.0.113.1", "203.0.113.2", "203.0.113.1", "203.0.113.2")
        ]
    assert statuses == [200, 200, 429, 429]


@pytest.mark.parametrize(
    ("variable", "value"), [("SANIC_PROXIES_COUNT", "1"), ("SANIC_REAL_IP_HEADER", "x-real-ip")]
)
def test_a_proxy_setting_without_trusted_proxies_stops_the_start_in_one_line(monkeypatch, capsys, tmp_path, variable, value):
    """`serve` with a Sanic proxy setting but no SERVICE_TRUSTED_PROXIES exits 2 with the reason."""
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("SERVICE_DATABASE_URL", f"sqlite:///{tmp_path / 'service.db'}")
    monkeypatch.delenv("SERVICE_TRUSTED_PROXIES", raising=False)
    assert cli.main(["serve", "--port", "0"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"configuration error: {variable} is set but SERVICE_TRUSTED_PROXIES is empty")
    assert not (tmp_path / "service.db").exists()  # stopped before anything was made


def test_create_app_refuses_the_same(monkeypatch, sqlite_url):
    """An app built with a proxy setting and no trusted proxies is refused with the same reason."""
    monkeypatch.setenv("SANIC_PROXIES_COUNT", "2")
    with pytest.raises(ValueError, match="SANIC_PROXIES_COUNT is set but SERVICE_TRUSTED_PROXIES is empty"):
        create_app(Settings(database_url=sqlite_url))


@pytest.mark.parametrize(
    ("peer", "trusted", "believed"),
    [
        ("10.0.0.5", ("10.0.0.0/8",), True),
        ("10.0.0.5", ("10.0.0.6",), False),
        ("::ffff:10.0.0.5", ("10.0.0.5",), True),
        ("2001:db8::1", ("2001:db8::/32",), True),
        ("fe80::1%eth0", ("fe80::/10",), True),
        ("unix-socket", ("0.0.0.0/0",), False),
        ("10.0.0.5", (), False),
        # An entry written IPv4-mapped names the IPv4 address or network, as a peer is read.
        ("10.0.0.5", ("::ffff:10.0.0.5",), True),
        ("::ffff:10.0.0.5", ("::ffff:10.0.0.5",), True),
        ("10.0.0.77", ("::ffff:10.0.0.0/120",), True),
        ("10.0.1.77", ("::ffff:10.0.0.0/120",), False),
        ("10.0.0.6", ("::ffff:10.0.0.5",), False),
    ],
)
def test_trusted_peer(peer, trusted, believed):
    """A peer is trusted when its address (IPv4-mapped as IPv4) falls in a listed network."""
    assert trusted_peer(peer, parse_networks(trusted)) is believed


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("10.0.0.1", ("10.0.0.1/32",)),
        (" 10.0.0.0/8 , ::1 ", ("10.0.0.0/8", "::1/128")),
        ("::ffff:10.0.0.5,::ffff:192.0.2.0/120", ("10.0.0.5/32", "192.0.2.0/24")),
        ("", ()),
    ],
)
def test_the_setting_takes_addresses_and_networks(monkeypatch, value, stored):
    """SERVICE_TRUSTED_PROXIES is comma-separated addresses or networks."""
    monkeypatch.setenv("SERVICE_TRUSTED_PROXIES", value)
    assert Settings().trusted_proxies == stored


def test_the_setting_refuses_what_is_not_an_address(monkeypatch):
    """A value that is not an address or a network stops the start, naming it."""
    monkeypatch.setenv("SERVICE_TRUSTED_PROXIES", "10.0.0.1,proxy.example")
    with pytest.raises(ValueError, match=r"not an address or network: 'proxy\.example'"):
        Settings()


def test_forwarded_secret_alone_needs_no_list():
    """SANIC_FORWARDED_SECRET proves the proxy by a shared secret, so it alone is not refused."""
    from sanic.config import Config

    config = Config()
    config.FORWARDED_SECRET = "s3cret"
    assert misconfiguration(config, ()) is None
