"""The registration form without JavaScript: SERVICE_WAITLIST_REDIRECT_URL sends a browser's form post on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from pydantic import ValidationError

from service.settings import Settings
from service.waitlist import ACCEPTED
from tests.processes import free_port, kill, start_server
from tests.test_waitlist import stored_rows
from tests.tools import chromium

THANKS = "https://launchrooms.example/waitlist/thanks?from=form"
BROWSER = {
    "content-type": "application/x-www-form-urlencoded",
    "accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
}
GOOD = urlencode({"email": "ada@example.com", "intent": "claim", "project": "", "message": ""}).encode()


def query(location: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(location).query)


def test_a_browser_form_post_is_sent_to_the_thank_you_url(make_client: Any, database_url: str) -> None:
    """Stored first, then 303 to the configured URL, its own query kept."""
    with make_client(database_url=database_url, waitlist_redirect_url=THANKS) as client:
        response = client.post("/api/waitlist", content=GOOD, headers=BROWSER)
        assert response.status_code == 303
        assert response.headers["location"] == THANKS
        assert response.headers["cache-control"] == "no-store"
        assert (response.headers["content-type"], response.content) == ("text/plain; charset=utf-8", b"")
        rows = client.run(stored_rows(database_url))
    assert [row["email"] for row in rows] == ["ada@example.com"]


@pytest.mark.parametrize("accept", ["text/html;q=garbage", ",,,;;;"])
def test_an_accept_no_one_can_read_is_answered_in_json(make_client: Any, database_url: str, accept: str) -> None:
    """Not a 400 that loses the registration: an unreadable Accept prefers nothing, as a tie does."""
    headers = {**BROWSER, "accept": accept}
    with make_client(database_url=database_url, waitlist_redirect_url=THANKS) as client:
        response = client.post("/api/waitlist", content=GOOD, headers=headers)
        rows = client.run(stored_rows(database_url))
    assert response.status_code == 200
    assert response.json["ok"] is True
    assert [row["email"] for row in rows] == ["ada@example.com"]


@pytest.mark.parametrize(
    ("fields", "error", "field"),
    [
        ({"email": "not-an-address", "intent": "claim"}, "invalid_email", "email"),
        ({"email": "ada@example.com", "intent": "steal"}, "invalid_choice", "intent"),
        ({"email": "ada@example.com"}, "missing", "intent"),
        ({"email": "ada@example.com", "intent": "claim", "<script>x</script>": "1"}, "unknown_field", None),
    ],
    ids=["bad-email", "bad-intent", "missing-intent", "made-up-field"],
)
def test_a_refused_form_post_is_sent_back_with_the_error(
    make_client: Any, sqlite_url: str, fields: dict[str, str], error: str, field: str | None
) -> None:
    """303 to the URL with error and field, URL-encoded; a field name the client made up is never written back."""
    with make_client(waitlist_redirect_url=THANKS) as client:
        response = client.post("/api/waitlist", content=urlencode(fields).encode(), headers=BROWSER)
        rows = client.run(stored_rows(sqlite_url))
    assert response.status_code == 303
    location = response.headers["location"]
    assert location.startswith("https://launchrooms.example/waitlist/thanks?from=form&error=")
    expected = {"from": ["form"], "error": [error]} | ({"field": [field]} if field else {})
    assert query(location) == expected
    assert "script" not in location
    assert rows == []


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "application/json", "accept": BROWSER["accept"]},  # a script, whatever it accepts
        {"content-type": "application/x-www-form-urlencoded", "accept": "*/*"},  # curl
        {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"},
        {"content-type": "application/x-www-form-urlencoded"},  # no Accept at all
    ],
    ids=["json-body", "any", "json-accept", "no-accept"],
)
def test_other_clients_keep_the_json_answers(make_client: Any, headers: dict[str, str]) -> None:
    """Only a form post preferring HTML is redirected; everyone else gets the documented 200 and 400 in JSON."""
    good = b'{"email":"ada@example.com","intent":"claim"}' if "json" in headers["content-type"] else GOOD
    bad = (
        b'{"email":"nope","intent":"claim"}'
        if "json" in headers["content-type"]
        else b"email=nope&intent=claim"
    )
    with make_client(waitlist_redirect_url=THANKS) as client:
        accepted = client.post("/api/waitlist", content=good, headers=headers)
        refused = client.post("/api/waitlist", content=bad, headers=headers)
    assert (accepted.status_code, accepted.json) == (200, {"ok": True, "message": ACCEPTED})
    assert refused.status_code == 400
    assert refused.json["errors"][0]["code"] == "invalid_email"


@pytest.mark.parametrize(
    ("accept", "redirected"),
    [
        ("TEXT/HTML", True),  # media types are compared without regard to case
        ("application/json;q=0.2, text/*;q=0.5, */*", True),
        ("application/json;q=0.1, */*", True),  # the more specific range weighs JSON, not */*
        ("text/*;q=0.9, application/json;q=0.8", True),
        ("text/html;q=0", False),  # not acceptable at all
        ("text/html;q=0, */*", False),
        ("text/html, application/json", False),  # a tie goes to JSON
        ("application/json, text/html;q=0.9", False),
    ],
)
def test_the_redirect_follows_what_accept_prefers(make_client: Any, accept: str, redirected: bool) -> None:
    """HTML is preferred when the most specific range naming it weighs more than the one naming
    JSON (RFC 9110 section 12.5.1)."""
    headers = {"content-type": "application/x-www-form-urlencoded", "accept": accept}
    with make_client(waitlist_redirect_url=THANKS) as client:
        refused = client.post("/api/waitlist", content=b"email=nope&intent=claim", headers=headers)
    assert refused.status_code == (303 if redirected else 400)


def test_without_the_setting_browsers_get_json(make_client: Any) -> None:
    """Unset (the default), a browser's form post is answered 200 JSON as before."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=GOOD, headers=BROWSER)
    assert (response.status_code, response.json) == (200, {"ok": True, "message": ACCEPTED})


@pytest.mark.parametrize(
    "value", ["/thanks", "javascript:alert(1)", "ftp://example.com/", "https://a.example/\r\nX: y"]
)
def test_the_setting_must_be_an_absolute_web_url(value: str) -> None:
    """A relative, script or header-splitting URL stops the start with the reason, not repeating it."""
    with pytest.raises(ValidationError, match="SERVICE_WAITLIST_REDIRECT_URL must be an absolute") as caught:
        Settings(waitlist_redirect_url=value)
    assert value not in str(caught.value)


FORM_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Join the waitlist</title></head>
<body><form method="post" action="{action}" novalidate>
<label>Email <input name="email" type="email"></label>
<label>I want to <select name="intent"><option value="claim">claim a room</option>
<option value="member">follow rooms</option></select></label>
<label>Project <input name="project"></label>
<label>Message <textarea name="message"></textarea></label>
<button type="submit">Join</button>
</form></body></html>
"""


@contextmanager
def site(action: Callable[[], str]) -> Iterator[int]:
    """The site the service sits behind: a page with the form, and the thank-you page, on their own
    port. The form's action is asked for when the page is served, so the service's port can be
    picked after this server holds its own."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            text = FORM_PAGE.format(action=action()) if path == "/" else "<!doctype html><title>Thanks</title>"
            payload = text.encode()
            self.send_response(200 if path in ("/", "/thanks") else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads the browser's address bar."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_chromium_without_javascript_lands_on_the_thank_you_and_error_urls(tmp_path: Path) -> None:
    """A real browser with scripts off: submit, land on the thank-you URL; a bad email lands on it with the error."""
    service: list[int] = []
    with site(lambda: f"http://127.0.0.1:{service[0]}/api/waitlist") as site_port:
        service_port = free_port()
        service.append(service_port)
        thanks = f"http://127.0.0.1:{site_port}/thanks"
        env = {
            "SERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'service.db'}",
            "SERVICE_WAITLIST_REDIRECT_URL": thanks,
        }
        server = start_server(service_port, env, "--no-worker")
        try:
            with chromium() as browser:
                context = browser.new_context(java_script_enabled=False)
                page = context.new_page()
                page.goto(f"http://127.0.0.1:{site_port}/")
                page.get_by_label("Email").fill("ada@example.com")
                page.get_by_label("I want to").select_option("member")
                with page.expect_navigation(url=f"{thanks}**"):
                    page.get_by_role("button", name="Join").click()
                assert page.url == thanks

                page.goto(f"http://127.0.0.1:{site_port}/")
                page.get_by_label("Email").fill("ada at example")
                with page.expect_navigation(url=f"{thanks}**"):
                    page.get_by_role("button", name="Join").click()
                assert urlsplit(page.url)._replace(query="").geturl() == thanks
                assert query(page.url) == {"error": ["invalid_email"], "field": ["email"]}
                context.close()
        finally:
            kill(server)
