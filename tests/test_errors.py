"""One JSON error shape for every failure, and no traceback ever reaches a client."""

from __future__ import annotations

import asyncio

import pytest
from sanic import Request
from sanic.exceptions import MethodNotAllowed

from service.app import create_app
from service.exceptions import echoed_name
from service.handlers import assess
from service.settings import Settings
from tests.conftest import Client
from tests.test_waitlist import stored_rows
from tests.webhook_helpers import AUTH, TEST_SECRETS_KEY, milestone
from tests.webhook_helpers import settings as webhook_settings

LONG = "k" * 30_000  # a member name that, given twice, still fits the 64 KiB body limit
SHOWN = "k" * 64 + "…"
FORM = "application/x-www-form-urlencoded"


@pytest.mark.parametrize(
    ("method", "path", "status", "body"),
    [
        ("get", "/no/such/page", 404, {"ok": False, "message": "Nothing is here."}),
        ("get", "/api/waitlist", 405, {"ok": False, "message": "This method is not allowed here."}),
        ("delete", "/api/waitlist", 405, {"ok": False, "message": "This method is not allowed here."}),
        ("post", "/healthz", 405, {"ok": False, "message": "This method is not allowed here."}),
    ],
)
def test_routing_errors_are_json(make_client, method, path, status, body):
    """Unknown paths and methods answer in the error shape, as JSON."""
    with make_client() as client:
        response = client.request(method, path)
    assert (response.status_code, response.json) == (status, body)
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("listed", [["POST", "OPTIONS"], ["OPTIONS", "POST"], ["HEAD", "OPTIONS", "GET"]])
def test_the_allow_header_lists_its_methods_in_one_order(make_client, listed):
    """Sanic lists the methods a 405 allows from a set, in another order in each process (each has
    its own string hashes): two servers behind one proxy would answer one request two ways. The
    answer sorts them."""
    with make_client() as client:
        request = client.app.request_class(b"/api/waitlist", {}, "1.1", "GET", None, client.app)
        refused = MethodNotAllowed("no", method="GET", allowed_methods=listed)
        failure = assess(request, refused)
    assert failure.headers["Allow"] == ", ".join(sorted(listed))


def test_unexpected_error_is_a_plain_500(sqlite_url, caplog):
    """A bug answers 500 with a fixed sentence; the traceback goes to the log, not the client."""
    app = create_app(Settings(database_url=sqlite_url))

    async def boom(request: Request):
        raise RuntimeError("internal detail: password=hunter2")

    app.add_route(boom, "/boom")
    with Client(app) as client:
        response = client.get("/boom")
    assert (response.status_code, response.json) == (
        500,
        {"ok": False, "message": "The server could not complete the request."},
    )
    assert "hunter2" not in response.text and "Traceback" not in response.text
    assert any("hunter2" in str(record.exc_info) for record in caplog.records if record.exc_info)


def test_health_and_readiness(make_client, rate_limit_storage):
    """/healthz says alive; /readyz says the database and the rate-limit store answer."""
    with make_client(**rate_limit_storage) as client:
        alive, ready = client.get("/healthz"), client.get("/readyz")
    assert (alive.status_code, alive.json) == (200, {"ok": True})
    assert (ready.status_code, ready.json) == (200, {"ok": True, "database": "up", "rateLimitStore": "up"})


def test_readiness_fails_when_the_database_is_unreachable():
    """/readyz answers 503 when the database cannot be reached (a closed port here)."""
    app = create_app(Settings(database_url="postgresql://nobody@127.0.0.1:9/none", secrets_key=TEST_SECRETS_KEY))
    with Client(app) as client:
        ready = client.get("/readyz")
        registration = client.post("/api/waitlist", json={"email": "a@example.com", "intent": "claim"})
    assert (ready.status_code, ready.json) == (
        503,
        {"ok": False, "message": "The database is not reachable.", "database": "down", "rateLimitStore": "up"},
    )
    assert (registration.status_code, registration.json) == (
        503,
        {"ok": False, "message": "The service is briefly unavailable; try again shortly."},
    )


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [("https://launch.example", True), ("https://evil.example", False), (None, False)],
)
def test_cors_only_for_configured_origins(make_client, origin, allowed):
    """Browser scripts may POST from configured origins only, and never with credentials."""
    headers = {"origin": origin} if origin else {}
    with make_client(cors_origins=("https://launch.example",)) as client:
        preflight = client.request("options", "/api/waitlist", headers=headers)
        post = client.post("/api/waitlist", json={"email": "a@example.com", "intent": "claim"}, headers=headers)
    assert preflight.status_code == 204
    assert preflight.headers.get("access-control-allow-origin") == (origin if allowed else None)
    assert post.headers.get("access-control-allow-origin") == (origin if allowed else None)
    assert "access-control-allow-credentials" not in post.headers


@pytest.mark.parametrize("path", ["/api/waitlist", "/api/waitlist/"])
@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b'{"email": "not-an-address", "intent": "claim"}', "application/json", 400),
        (b"email=a%40example.com", "text/plain", 415),
        (b"{" + b" " * 70_000 + b"}", "application/json", 413),
    ],
)
def test_the_routes_error_answers_carry_cors_for_an_allowed_origin(
    make_client, content, content_type, status, path
):
    """A browser script on a configured origin can read why its registration was refused, at the
    route's path with or without the trailing slash it also answers."""
    origin = "https://launch.example"
    with make_client(cors_origins=(origin,)) as client:
        refused = client.post(path, content=content, headers={"origin": origin, "content-type": content_type})
    assert refused.status_code == status
    assert refused.json["ok"] is False
    assert (refused.headers.get("access-control-allow-origin"), refused.headers.get("vary")) == (origin, "Origin")


@pytest.mark.parametrize(
    "coding", [["gzip"], ["br"], ["GZIP"], ["identity, gzip"], ["identity", "gzip"], ["gzip", "identity"]]
)
def test_a_body_under_a_content_encoding_is_415_and_stores_nothing(make_client, coding):
    """A body is never decoded: read as it stands, a gzip-labelled body would be stored as the
    wrong bytes (or refused as JSON it is not). Refused, with the reason, however many lines the
    field takes (one list, RFC 9110 section 5.3)."""
    with make_client() as client:
        refused = client.post(
            "/api/waitlist",
            json={"email": "coded@example.com", "intent": "claim"},
            headers=[("content-encoding", line) for line in coding],
        )
        plain = client.post(
            "/api/waitlist",
            json={"email": "plain@example.com", "intent": "claim"},
            headers=[("content-encoding", "identity"), ("content-encoding", "Identity")],
        )
        stored = client.run(_emails(client.app.ctx.engine))
    assert (refused.status_code, refused.json) == (
        415,
        {"ok": False, "message": "Send the body without a Content-Encoding."},
    )
    assert plain.status_code == 200
    assert stored == ["plain@example.com"]


def test_two_content_types_are_415_and_store_nothing(make_client):
    """Content-Type is one field: given twice, which one a proxy in front read is unknown."""
    body = b'{"email": "twice@example.com", "intent": "claim"}'
    with make_client() as client:
        refused = client.post(
            "/api/waitlist",
            content=body,
            headers=[("content-type", "application/json"), ("content-type", "text/plain")],
        )
        stored = client.run(_emails(client.app.ctx.engine))
    assert (refused.status_code, refused.json) == (415, {"ok": False, "message": "Send one Content-Type."})
    assert stored == []


async def _emails(engine) -> list[str]:
    from sqlalchemy import select

    from service.db.tables import registrations

    async with engine.connect() as conn:
        return list((await conn.execute(select(registrations.c.email))).scalars())


def test_readiness_names_both_when_both_are_unreachable():
    """/readyz says which of the two cannot be reached, here both."""
    settings = Settings(
        database_url="postgresql://nobody@127.0.0.1:9/none",
        rate_limit_storage="redis://127.0.0.1:9/0",
        secrets_key=TEST_SECRETS_KEY,
    )
    with Client(create_app(settings)) as client:
        ready = client.get("/readyz")
    assert (ready.status_code, ready.json) == (
        503,
        {
            "ok": False,
            "message": "The database and the rate-limit store are not reachable.",
            "database": "down",
            "rateLimitStore": "down",
        },
    )


def test_an_unreachable_rate_limit_store_is_503_and_stores_nothing(sqlite_url, caplog):
    """With Redis down, registrations are refused as briefly unavailable, not accepted unlimited, and
    the server says it is not ready."""
    settings = Settings(database_url=sqlite_url, rate_limit_storage="redis://127.0.0.1:9/0")
    with Client(create_app(settings)) as client:
        registration = client.post("/api/waitlist", json={"email": "down@example.com", "intent": "claim"})
        ready = client.get("/readyz")
    assert (registration.status_code, registration.json) == (
        503,
        {"ok": False, "message": "The service is briefly unavailable; try again shortly."},
    )
    assert (ready.status_code, ready.json) == (
        503,
        {"ok": False, "message": "The rate-limit store is not reachable.", "database": "up", "rateLimitStore": "down"},
    )
    assert asyncio.run(stored_rows(sqlite_url)) == []
    assert [record.getMessage() for record in caplog.records if record.name == "service.db.batch"] == [
        "rate-limit hits failed"
    ]


def test_a_postgresql_server_that_never_answers_is_503_after_the_connect_timeout(monkeypatch, sqlite_url):
    """A server that accepts and then says nothing (a hung proxy, say): 503 once the timeout passes."""
    import socket

    from service.db import engine as engine_module

    monkeypatch.setattr(engine_module, "POSTGRESQL_CONNECT_TIMEOUT_S", 0.3)
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    try:
        app = create_app(Settings(database_url=f"postgresql://nobody@127.0.0.1:{port}/none", secrets_key=TEST_SECRETS_KEY))
        with Client(app) as client:
            registration = client.post("/api/waitlist", json={"email": "a@example.com", "intent": "claim"})
    finally:
        silent.close()
    assert (registration.status_code, registration.json) == (
        503,
        {"ok": False, "message": "The service is briefly unavailable; try again shortly."},
    )


@pytest.mark.parametrize(
    ("name", "shown"),
    [("a", "a"), ("k" * 64, "k" * 64), ("k" * 65, SHOWN), (LONG, SHOWN), ("x\ud800", "x\ufffd"), ("é🐸", "é🐸")],
)
def test_echoed_names_are_bounded(name, shown):
    """At most 64 characters and a marker; a lone surrogate becomes U+FFFD; the rest is kept."""
    assert echoed_name(name) == shown


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "code"),
    [
        ("post", "/api/waitlist", {"json": {"email": "a@example.com", "intent": "claim", LONG: 1}}, "unknown_field"),
        ("post", "/api/waitlist", {"content": f'{{"{LONG}": 1, "{LONG}": 2}}'.encode()}, "repeated"),
        ("post", "/api/waitlist", {"content": f"{LONG}=1&{LONG}=2".encode()}, "repeated"),
        ("post", "/admin/events", {"json": {**milestone(), LONG: 1}, "headers": AUTH}, "unknown_field"),
        ("post", "/admin/partners", {"json": {"name": "P", "url": "http://127.0.0.1:9/", LONG: 1}, "headers": AUTH}, "unknown_field"),
        ("get", f"/admin/deliveries?{LONG[:4000]}=1", {"headers": AUTH}, "unknown_parameter"),
        ("get", f"/admin/waitlist?{LONG[:2000]}=1&{LONG[:2000]}=2", {"headers": AUTH}, "repeated"),
    ],
    ids=["waitlist member", "json repeated", "form repeated", "event member", "partner member", "query", "query repeated"],
)
def test_error_bodies_never_echo_a_long_name_whole(make_client, method, path, kwargs, code):
    """Wherever a name comes from the client, the error shows 64 characters of it and a marker."""
    if "content" in kwargs:
        form = kwargs["content"].endswith(b"=2")
        kwargs["headers"] = {"content-type": FORM if form else "application/json"}
    with make_client(**webhook_settings()) as client:
        response = client.request(method, path, **kwargs)
    assert response.status_code == 400
    assert [(error["field"], error["code"]) for error in response.json["errors"]] == [(SHOWN, code)]
