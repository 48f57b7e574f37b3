"""What a console route raises is the console's page, never the API's JSON: the database busy or
unreachable (503, ``Retry-After`` kept) and a bug (500), each with the five headers, the reason
and the way back. The faults are injected, never waited for: a SQLite file held locked with no
busy timeout, a connection refused, an error no route expects."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from typing import Any

import pytest
from markupsafe import escape

from service.console.pages import HEADERS
from service.db import engine as engine_module
from service.db import registrations as registrations_store
from service.db import summaries as summaries_store
from service.errors import RETRY_AFTER_UNAVAILABLE
from tests.test_console import ORIGIN, TOKEN, _csrf, _session, _sign_in

BEARER = {"authorization": f"Bearer {TOKEN}"}
EMAIL = "kept@example.com"
# Called before the app starts (what it must know as it opens connections); entered around the request.
Fault = Callable[[pytest.MonkeyPatch, str], AbstractContextManager[None]]


def _locked(monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> AbstractContextManager[None]:
    """Another connection holds the SQLite file's write lock; the app's connections, opened with
    no busy timeout to wait out, give up at once, as they would once it ran out."""
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 0)  # read as each connection opens
    return _held(sqlite_url)


@contextmanager
def _held(sqlite_url: str) -> Iterator[None]:
    with closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)) as holder:
        holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")


def _refused(monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> AbstractContextManager[None]:
    """The database refuses the connection (PostgreSQL restarting, say) as the page reads it."""

    async def refused(*_: object, **__: object) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    return _patched(monkeypatch, summaries_store, "deliveries_page", refused)


def _bug(monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> AbstractContextManager[None]:
    """An error no route expects, raised inside the action."""

    async def broken(*_: object, **__: object) -> int:
        raise RuntimeError("a bug")

    return _patched(monkeypatch, registrations_store, "erase_registrations", broken)


@contextmanager
def _patched(monkeypatch: pytest.MonkeyPatch, module: object, name: str, value: object) -> Iterator[None]:
    with monkeypatch.context() as patched:
        patched.setattr(module, name, value)
        yield


ERASE = ("POST", "/console/waitlist/erase", {"email": EMAIL, "confirm": "yes"})
DELIVERIES = ("GET", "/console/deliveries", None)
UNAVAILABLE = "The service is briefly unavailable, so nothing was changed; try again shortly."
INTERNAL = "The server could not complete the request; look at the page again before you repeat it."


@pytest.mark.parametrize(
    ("fault", "action", "status", "message", "logged"),
    [
        (_locked, ERASE, 503, UNAVAILABLE, ("WARNING", "storage unavailable")),
        (_refused, DELIVERIES, 503, UNAVAILABLE, ("WARNING", "storage unavailable")),
        (_bug, ERASE, 500, INTERNAL, ("ERROR", "unhandled error")),
    ],
    ids=["locked-erase", "refused-listing", "bug-erase"],
)
def test_a_fault_in_a_console_route_is_the_consoles_page(
    make_client: Any,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    fault: Fault,
    action: tuple[str, str, dict[str, str] | None],
    status: int,
    message: str,
    logged: tuple[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The console's HTML message page, not the API's JSON: the status, ``Retry-After`` on a 503
    only, the five headers, the sentence saying nothing was changed, and a link back to the page
    the form was on; the registration is still there. Logged and counted as the API's routes are:
    the database busy a WARNING, a bug an ERROR, each one server error by status."""
    caplog.set_level(logging.INFO, logger="service.errors")
    method, path, fields = action
    during = fault(monkeypatch, sqlite_url)
    with make_client(admin_token=TOKEN) as client:
        assert client.post("/api/waitlist", json={"email": EMAIL, "intent": "member"}).status_code == 200
        cookies = _session(_sign_in(client))
        csrf = _csrf(client.get("/console/waitlist", cookies=cookies).text)
        data = {**fields, "csrf": csrf} if fields is not None else None
        headers = {**ORIGIN, "referer": ORIGIN["origin"] + "/console/waitlist"}
        with during:
            response = client.request(method, path, data=data, headers=headers, cookies=cookies)
        kept = client.get("/admin/waitlist", headers=BEARER).json["entries"]
        scraped = client.get("/admin/metrics", headers=BEARER).text.splitlines()
    assert response.status_code == status
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert {name: response.headers.get(name) for name in HEADERS} == HEADERS
    assert response.headers.get("retry-after") == (str(RETRY_AFTER_UNAVAILABLE) if status == 503 else None)
    assert f'<p role="alert">{escape(message)}</p>' in response.text
    assert '<a href="/console/waitlist">Back</a>' in response.text
    assert [entry["email"] for entry in kept] == [EMAIL]
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "service.errors"] == [logged]
    assert f'service_http_server_errors_total{{status="{status}"}} 1.0' in scraped
