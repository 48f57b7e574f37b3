"""The headers of the public answers: what a browser script may read, how long a 503 asks a client
to wait, where a redirect points under a base URL with a path, and which origins CORS names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.app import create_app
from service.cli import main
from service.errors import RETRY_AFTER_UNAVAILABLE
from service.settings import Settings
from tests.conftest import Client
from tests.webhook_helpers import TEST_SECRETS_KEY

ORIGIN = "https://launch.example"
BODY = {"email": "a@example.com", "intent": "claim"}
UNAVAILABLE = {"ok": False, "message": "The service is briefly unavailable; try again shortly."}


# --- D: a script on an allowed origin may read Retry-After ---------------------------------------


def test_a_script_on_an_allowed_origin_can_read_retry_after(make_client):
    """A browser shows a script only the safelisted headers of an answer unless told more: the 429's
    Retry-After is exposed to an allowed origin (and on every answer of the route alike)."""
    with make_client(cors_origins=(ORIGIN,), waitlist_rate_limit="1/minute") as client:
        accepted = client.post("/api/waitlist", json=BODY, headers={"origin": ORIGIN})
        limited = client.post("/api/waitlist", json=BODY, headers={"origin": ORIGIN})
    assert accepted.status_code == 200
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    for response in (accepted, limited):
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert response.headers["access-control-expose-headers"] == "Retry-After"


@pytest.mark.parametrize("origin", ["https://evil.example", None])
def test_nothing_is_exposed_to_another_origin(make_client, origin):
    """Another origin, or none, gets no CORS header but Vary."""
    headers = {"origin": origin} if origin else {}
    with make_client(cors_origins=(ORIGIN,), waitlist_rate_limit="1/minute") as client:
        limited = [client.post("/api/waitlist", json=BODY, headers=headers) for _ in range(2)][-1]
    assert limited.status_code == 429
    assert "access-control-allow-origin" not in limited.headers
    assert "access-control-expose-headers" not in limited.headers


# --- E: the service's own 503s say when to try again ----------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        # The rate-limit store cannot be reached.
        {"rate_limit_storage": "redis://127.0.0.1:9/0"},
        # The database cannot be reached (nothing listens on port 9).
        {"database_url": "postgresql://nobody@127.0.0.1:9/none", "secrets_key": TEST_SECRETS_KEY},
    ],
    ids=["rate-limit-store", "database"],
)
def test_a_503_carries_retry_after(sqlite_url, options):
    """Nothing was accepted and the client may try again shortly: how shortly is said, as nginx's
    own 503 page says it (5 s), and a script on an allowed origin can read it."""
    settings = Settings(**{"database_url": sqlite_url, "cors_origins": (ORIGIN,), **options})
    with Client(create_app(settings)) as client:
        response = client.post("/api/waitlist", json=BODY, headers={"origin": ORIGIN})
    assert (response.status_code, response.json) == (503, UNAVAILABLE)
    assert response.headers["retry-after"] == str(RETRY_AFTER_UNAVAILABLE) == "5"
    assert response.headers["access-control-expose-headers"] == "Retry-After"


def test_a_locked_sqlite_database_is_a_503_with_retry_after(make_client, sqlite_url, monkeypatch):
    """A SQLite file another process holds past the busy timeout: 503 with Retry-After, not 500."""
    import sqlite3

    from service.db import engine as engine_module

    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 50)
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        with make_client() as client:
            holder.execute("BEGIN EXCLUSIVE")
            response = client.post("/api/waitlist", json=BODY)
            holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert (response.status_code, response.json) == (503, UNAVAILABLE)
    assert response.headers["retry-after"] == "5"


# --- G: redirects of the partner pages keep the base URL's path -----------------------------------

BASE = "https://example.com/waitlist"


@pytest.mark.parametrize(
    ("path", "location"),
    [
        ("/docs/webhooks", BASE + "/docs/webhooks/"),
        ("/docs/webhooks//", BASE + "/docs/webhooks/"),
        ("/docs/webhooks/event-catalog/", BASE + "/docs/webhooks/event-catalog"),
        ("/docs/webhooks/verifying-signatures.md/", BASE + "/docs/webhooks/verifying-signatures.md"),
    ],
)
def test_a_partner_page_redirect_keeps_the_base_urls_path(make_client, path, location):
    """Behind a proxy that serves the service under /waitlist (and strips it), a Location of the
    path alone sent partners to https://example.com/docs/webhooks/, outside the service. It is
    written from SERVICE_BASE_URL, like every other absolute URL the service gives."""
    with make_client(base_url=BASE) as client:
        moved = client.get(path, follow_redirects=False)
        head = client.head(path, follow_redirects=False)
    assert (moved.status_code, moved.headers["location"]) == (308, location)
    assert (head.status_code, head.headers["location"]) == (308, location)


def test_the_redirect_ignores_a_hostile_host(make_client):
    """The Location comes from the setting, never from the request's Host or forwarded headers."""
    hostile = {"host": "evil.example", "x-forwarded-host": "evil.example", "forwarded": "host=evil.example"}
    with make_client(base_url=BASE) as client:
        moved = client.get("/docs/webhooks", headers=hostile, follow_redirects=False)
    assert moved.headers["location"] == BASE + "/docs/webhooks/"


# --- H: SERVICE_CORS_ORIGINS is held to what an origin is ------------------------------------------


@pytest.mark.parametrize(
    ("value", "origins"),
    [
        ("https://launch.example/", ("https://launch.example",)),
        ("https://Launch.Example", ("https://launch.example",)),
        ("HTTPS://launch.example:443", ("https://launch.example",)),
        ("http://launch.example:80/, http://launch.example:8080", ("http://launch.example", "http://launch.example:8080")),
        ("https://[0:0::1]:8443", ("https://[::1]:8443",)),
        (" https://a.example , https://A.example/ ,", ("https://a.example",)),
        ("", ()),
    ],
)
def test_origins_are_written_as_browsers_send_them(monkeypatch, value, origins):
    """Entries are compared with the Origin header as they stand, and a browser writes an origin one
    way: scheme and host in lower case, no default port, no slash. Entries are written so at start."""
    monkeypatch.setenv("SERVICE_CORS_ORIGINS", value)
    assert Settings().cors_origins == origins


@pytest.mark.parametrize("entry", ["https://Launch.example/", "https://launch.example:443"])
def test_an_origin_written_otherwise_is_allowed(make_client, entry):
    """`https://Launch.example/` in the setting allows the scripts of https://launch.example, the
    Origin browsers send for it (it silently allowed nothing)."""
    with make_client(cors_origins=(entry,)) as client:
        preflight = client.request("options", "/api/waitlist", headers={"origin": ORIGIN})
        post = client.post("/api/waitlist", json=BODY, headers={"origin": ORIGIN})
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert post.headers["access-control-allow-origin"] == ORIGIN


@pytest.mark.parametrize(
    "entry",
    [
        "*",
        "launch.example",
        "//launch.example",
        "https://launch.example/waitlist",
        "https://launch.example?x=1",
        "https://launch.example#top",
        "https://user@launch.example",
        "https://launch.example:99999",
        "ftp://launch.example",
        "null",
        "https://",
        "https://bücher.example",
    ],
)
def test_an_entry_that_is_no_origin_stops_the_start(monkeypatch, capsys, entry):
    """A path, a query, `*`, no scheme: none can ever equal an Origin header, so the start stops
    with the reason in one line (exit status 2), as other settings do."""
    with pytest.raises(ValidationError, match="SERVICE_CORS_ORIGINS: not an origin"):
        Settings(cors_origins=(ORIGIN, entry))
    monkeypatch.setenv("SERVICE_CORS_ORIGINS", f"{ORIGIN},{entry}")
    assert main(["migrate"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith(f"configuration error: SERVICE_CORS_ORIGINS: not an origin: {entry!r}")


def test_a_storage_fault_met_anywhere_is_a_503_with_retry_after():
    """A storage fault no route turns into an error of its own (the admin listing with the database
    out of reach) reaches the error handler, which answers 503 with the same Retry-After; and the
    published contract says so for every 503 it lists."""
    settings = Settings(
        database_url="postgresql://nobody@127.0.0.1:9/none",
        secrets_key=TEST_SECRETS_KEY,
        admin_token="t" * 32,
    )
    with Client(create_app(settings)) as client:
        response = client.get("/admin/waitlist", headers={"authorization": "Bearer " + "t" * 32})
        document = client.get("/api/v1/openapi.json").json
    assert response.status_code == 503
    assert response.headers["retry-after"] == str(RETRY_AFTER_UNAVAILABLE)
    unavailable = [
        operation["responses"]["503"]
        for path in document["paths"].values()
        for operation in path.values()
        if "503" in operation.get("responses", {}) and "Error" in str(operation["responses"]["503"])
    ]
    assert unavailable and all("Retry-After" in answer.get("headers", {}) for answer in unavailable)
