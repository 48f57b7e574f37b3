"""The operator console in a real Chromium, on SQLite and PostgreSQL: signing in, every page, every
action through its button (then checked through the admin API), hostile text shown as text, a form
posted from another origin refused, and axe-core's WCAG 2.1 A/AA checks on every page.

One browser and one server per database serve the module; each test makes its own partners and
events, so the tests do not depend on each other's order.
"""

from __future__ import annotations

import asyncio
import csv
import io
import itertools
import threading
import urllib.error
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from console_helpers import ConsoleServer, free_port, sign_in
from sqlalchemy.engine import make_url
from webhook_helpers import ADMIN_TOKEN, TEST_SECRETS_KEY, Receiver, Reply

from service.clock import ManualClock, format_timestamp
from service.db.engine import migrate
from service.webhooks import roster
from service.webhooks.signing import verify
from tests.conftest import POSTGRES_URL, RUN_ID
from tests.scratch import admin_execute
from tests.tools import chromium

SCRIPT = "<script>alert('script')</script>"
IMAGE = "<img src=x onerror=alert('img')>"
WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
_serial = itertools.count(1)


class Site:
    def __init__(self, server: ConsoleServer, receiver: Receiver) -> None:
        self.server = server
        self.receiver = receiver
        self.url = server.base_url

    def partner(self, name: str | None = None, path: str | None = None, **body: Any) -> dict[str, Any]:
        number = next(_serial)
        document: dict[str, Any] = self.server.admin(
            "POST",
            "/admin/partners",
            {
                "name": name or f"Partner {number}",
                "url": self.receiver.url(path or f"/p{number}"),
                "events": ["platform.milestone"],
                **body,
            },
        )
        return document

    def publish(self) -> dict[str, Any]:
        number = next(_serial)
        document: dict[str, Any] = self.server.admin(
            "POST",
            "/admin/events",
            {
                "event": "platform.milestone",
                "eventId": f"evt_console_{number}",
                "occurredAt": format_timestamp(self.server.clock()),
                "milestone": f"{number} rooms",
                "value": number,
            },
        )
        return document

    def deliveries(self, partner_id: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.server.admin("GET", f"/admin/deliveries?partner={partner_id}")[
            "deliveries"
        ]
        return found

    def failed_delivery(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """A partner whose endpoint answers 500, and its one delivery, failed after the schedule."""
        partner = self.partner()
        path = partner["url"].rsplit(":", 1)[1].split("/", 1)[1]
        self.receiver.script("/" + path, 500, 500)
        self.publish()
        self.server.drain()
        self.server.clock.advance(13)  # past the one retry (10 s, with at most 20% jitter)
        self.server.drain()
        (delivery,) = self.deliveries(partner["id"])
        assert delivery["status"] == "failed"
        return partner, delivery


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def _off_loop(function: Any, *args: Any) -> Any:
    """Run ``function`` on a thread of its own: Playwright's sync API keeps a loop running on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The console of a migrated, empty database of its own, with a loopback receiver for its partners."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('console') / 'service.db'}"
        _off_loop(migrate, url)
        drop = None
    else:
        if not POSTGRES_URL:
            pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
        name = f"service_test_{RUN_ID}_console"
        _off_loop(asyncio.run, admin_execute(POSTGRES_URL, f'CREATE DATABASE "{name}"'))
        drop = f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
        url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        _off_loop(migrate, url)
    try:
        with Receiver() as receiver, ConsoleServer(url, ManualClock(), secrets_key=TEST_SECRETS_KEY) as server:
            yield Site(server, receiver)
    finally:
        if drop is not None:
            _off_loop(asyncio.run, admin_execute(POSTGRES_URL or "", drop))


class Page:
    """A signed-in page, and every dialog any script on it tried to open."""

    def __init__(self, page: Any, site: Site) -> None:
        self.page = page
        self.site = site
        self.dialogs: list[str] = []
        page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, path: str) -> Any:
        response = self.page.goto(self.site.url + path)
        assert response is not None
        return response

    def click(self, name: str) -> None:
        with self.page.expect_navigation():
            self.page.get_by_role("button", name=name, exact=True).click()

    def status(self) -> str:
        text: str = self.page.get_by_role("status").inner_text()
        return text


@pytest.fixture
def page(browser: Any, site: Site) -> Iterator[Page]:
    context = browser.new_context(accept_downloads=True)
    opened = context.new_page()
    sign_in(opened, site.url)
    try:
        yield Page(opened, site)
    finally:
        context.close()


def _admin_status(site: Site, path: str) -> int:
    try:
        site.server.admin("GET", path)
    except urllib.error.HTTPError as error:
        return error.code
    return 200


# --- signing in -------------------------------------------------------------------------------------


def test_a_wrong_token_is_refused_and_the_right_one_signs_in(browser: Any, site: Site) -> None:
    """A wrong admin token stays on the sign-in page with the reason; the right one opens the overview."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(site.url + "/console/partners")
        assert page.url.startswith(site.url + "/console/login?next=")
        page.get_by_label("Admin token").fill("not-the-token-" + "x" * 32)
        with page.expect_navigation():
            page.get_by_role("button", name="Sign in").click()
        assert page.get_by_role("alert").inner_text() == "That is not the admin token."
        assert context.cookies() == []
        page.get_by_label("Admin token").fill(ADMIN_TOKEN)
        with page.expect_navigation():
            page.get_by_role("button", name="Sign in").click()
        assert page.url == site.url + "/console/partners"
        assert page.get_by_role("heading", level=1).inner_text() == "Partners"
        with page.expect_navigation():
            page.get_by_role("button", name="Sign out").click()
        assert page.url == site.url + "/console/login"
        page.goto(site.url + "/console")
        assert page.url.startswith(site.url + "/console/login")
    finally:
        context.close()


# --- every page ---------------------------------------------------------------------------------------


def _every_page(site: Site) -> list[tuple[str, str]]:
    partner = site.partner(name="Every page")
    site.publish()
    site.server.drain()
    (delivery,) = site.deliveries(partner["id"])
    site.server.register(f"every{next(_serial)}@example.com", "claim", project="Every", message="Page")
    return [
        ("/console", "Overview"),
        ("/console/partners", "Partners"),
        ("/console/partners/new", "Add partner"),
        (f"/console/partners/{partner['id']}", "Partner Every page"),
        (f"/console/partners/{partner['id']}/edit", "Edit partner Every page"),
        (f"/console/partners/{partner['id']}/remove", "Remove partner Every page?"),
        ("/console/deliveries", "Deliveries"),
        (f"/console/deliveries?partner={partner['id']}&status=delivered", "Deliveries"),
        (f"/console/deliveries/{delivery['id']}", f"Delivery {delivery['id']}"),
        ("/console/events/new", "Publish an event"),
        ("/console/waitlist", "Waitlist"),
        ("/console/waitlist?intent=claim&q=every", "Waitlist"),
    ]


def test_every_page_renders(page: Page) -> None:
    """Each page answers 200 with its heading and the security headers."""
    for path, heading in _every_page(page.site):
        response = page.open(path)
        assert response.status == 200, path
        assert page.page.get_by_role("heading", level=1).inner_text() == heading, path
        headers = response.headers
        assert headers["x-frame-options"] == "DENY"
        assert headers["cache-control"] == "no-store"
        assert headers["content-security-policy"].startswith("default-src 'none'")
    assert page.dialogs == []


def test_pages_list_by_key_and_the_next_page_continues(page: Page) -> None:
    """Past one page of registrations, "Older registrations" shows the rest, none twice."""
    marker = f"keyset{next(_serial)}"
    for number in range(55):
        page.site.server.register(f"{marker}.{number}@example.com", "member")
        page.site.server.clock.advance(1)
    page.open(f"/console/waitlist?q={marker}")
    first = page.page.locator("tbody th[scope=row]").all_inner_texts()
    page.page.get_by_role("link", name="Older registrations").click()
    page.page.wait_for_load_state()
    second = page.page.locator("tbody th[scope=row]").all_inner_texts()
    assert len(first) == 50
    assert sorted(first + second) == sorted(f"{marker}.{number}@example.com" for number in range(55))
    assert first[0] == f"{marker}.54@example.com"


# --- partner actions ----------------------------------------------------------------------------------


def test_add_partner_shows_the_secret_once(page: Page) -> None:
    """Add partner: the partner exists, its secret signs its deliveries, and a reload never shows it."""
    site = page.site
    page.open("/console/partners")
    page.page.get_by_role("link", name="Add partner").click()
    page.page.get_by_label("Name").fill("Added in the console")
    page.page.get_by_label("Endpoint URL").fill(site.receiver.url("/added"))
    page.page.get_by_label("platform.milestone").check()
    page.page.get_by_label("Deliveries in flight at most").fill("3")
    page.click("Add partner")
    secret = page.page.locator("code.secret").inner_text()
    partner_id = page.page.url.rsplit("/", 1)[1]
    shown = site.server.admin("GET", f"/admin/partners/{partner_id}")
    assert (shown["name"], shown["url"], shown["events"], shown["maxInFlight"]) == (
        "Added in the console", site.receiver.url("/added"), ["platform.milestone"], 3,
    )
    assert secret.startswith("whsec_")
    page.page.reload()
    assert secret not in page.page.content()
    assert page.page.get_by_role("status").count() == 0
    page.click("Send test")
    (received,) = site.receiver.to("/added")
    headers = {key.lower(): value for key, value in received.headers.items()}
    verify(headers, received.body, [secret], now=site.server.clock().timestamp())  # raises unless signed with it


def test_add_partner_shows_errors_by_field(page: Page) -> None:
    """A partner the operation refuses is not added; the form says which field is wrong."""
    before = len(page.site.server.admin("GET", "/admin/partners")["partners"])
    page.open("/console/partners/new")
    page.page.get_by_label("Name").fill("Bad URL")
    page.page.get_by_label("Endpoint URL").fill("ftp://example.com/hook")
    page.click("Add partner")
    assert page.page.locator("#url-error").inner_text() != ""
    assert len(page.site.server.admin("GET", "/admin/partners")["partners"]) == before


def test_edit_changes_the_partner(page: Page) -> None:
    """Edit: the new name, URL and cap are what the admin API then reports."""
    site = page.site
    partner = site.partner()
    page.open(f"/console/partners/{partner['id']}")
    page.page.get_by_role("link", name="Edit").click()
    page.page.get_by_label("Name").fill("Renamed")
    page.page.get_by_label("Endpoint URL").fill(site.receiver.url("/renamed"))
    page.page.get_by_label("Deliveries in flight at most").fill("7")
    page.click("Save")
    assert page.status() == "Partner changed."
    shown = site.server.admin("GET", f"/admin/partners/{partner['id']}")
    assert (shown["name"], shown["url"], shown["maxInFlight"]) == ("Renamed", site.receiver.url("/renamed"), 7)


def test_pause_and_resume(page: Page) -> None:
    """Pause makes the partner paused; Resume makes it active again."""
    site = page.site
    partner = site.partner()
    page.open(f"/console/partners/{partner['id']}")
    page.click("Pause")
    assert site.server.admin("GET", f"/admin/partners/{partner['id']}")["status"] == "paused"
    assert page.page.get_by_role("button", name="Pause").count() == 0
    page.click("Resume")
    assert site.server.admin("GET", f"/admin/partners/{partner['id']}")["status"] == "active"
    assert page.status() == "Partner resumed: what waited goes out now."


def test_resume_on_an_open_circuit_delivers_the_held_backlog_at_once(page: Page) -> None:
    """Resume on an open circuit probes at once: with the endpoint fixed and the clock standing
    still (the cool-down and every retry still ahead), the held backlog is delivered."""
    site = page.site
    partner = site.partner(path="/fixed-while-open")
    site.receiver.script("/fixed-while-open", *[500] * 5)  # five failures in a row open the circuit
    for _ in range(5):
        site.publish()
    site.server.drain()
    assert site.server.admin("GET", f"/admin/partners/{partner['id']}")["circuit"] == "open"
    site.publish()  # held by the open circuit: not attempted
    site.server.drain()
    held = site.deliveries(partner["id"])
    assert [found.get("heldBy") for found in held] == ["circuit"] * 6
    assert len(site.receiver.to("/fixed-while-open")) == 5
    page.open(f"/console/partners/{partner['id']}")
    page.click("Resume")
    site.server.drain()  # the probe, then what it held, at the same instant
    assert [found["status"] for found in site.deliveries(partner["id"])] == ["delivered"] * 6
    assert len(site.receiver.to("/fixed-while-open")) == 5 + 6
    assert site.server.admin("GET", f"/admin/partners/{partner['id']}")["circuit"] == "closed"


def test_send_test_reaches_the_endpoint(page: Page) -> None:
    """Send test: one signed webhook.test request reaches the endpoint; the page says how it went."""
    site = page.site
    partner = site.partner(path="/tested")
    page.open(f"/console/partners/{partner['id']}")
    page.click("Send test")
    (received,) = site.receiver.to("/tested")
    assert b'"webhook.test"' in received.body
    assert page.status().startswith("Test delivery delivered: 200.")


def test_rotate_secret_with_an_overlap(page: Page) -> None:
    """Rotate secret: two secrets sign for the overlap, the new one shown once."""
    site = page.site
    partner = site.partner()
    page.open(f"/console/partners/{partner['id']}")
    page.page.get_by_label("Overlap in seconds").fill("600")
    page.click("Rotate secret")
    secret = page.page.locator("code.secret").inner_text()
    shown = site.server.admin("GET", f"/admin/partners/{partner['id']}")
    assert shown["liveSecrets"] == 2
    assert shown["previousSecretExpiresAt"] == format_timestamp(site.server.clock() + timedelta(seconds=600))
    assert secret.startswith("whsec_") and secret != partner["secret"]
    page.page.reload()
    assert secret not in page.page.content()


def test_retry_failed_requeues(page: Page) -> None:
    """Retry failed: the partner's failed delivery is pending again."""
    site = page.site
    partner, _ = site.failed_delivery()
    page.open(f"/console/partners/{partner['id']}")
    page.click("Retry failed")
    assert page.status() == "1 failed deliveries requeued."
    assert [found["status"] for found in site.deliveries(partner["id"])] == ["pending"]


def test_remove_after_confirmation(page: Page) -> None:
    """Remove asks first; confirmed, the partner is gone and its waiting delivery cancelled."""
    site = page.site
    partner = site.partner()
    site.server.admin("POST", f"/admin/partners/{partner['id']}/pause")
    site.publish()
    page.open(f"/console/partners/{partner['id']}")
    page.page.get_by_role("link", name="Remove").click()
    page.page.wait_for_load_state()
    assert _admin_status(site, f"/admin/partners/{partner['id']}") == 200
    page.click("Remove")
    assert page.status() == "Partner removed; 1 undelivered deliveries cancelled."
    assert _admin_status(site, f"/admin/partners/{partner['id']}") == 404
    assert [found["status"] for found in site.deliveries(partner["id"])] == ["cancelled"]


# --- deliveries and events ------------------------------------------------------------------------------


def test_resend_a_delivered_delivery(page: Page) -> None:
    """Resend: a delivered delivery is pending again, then sent a second time."""
    site = page.site
    partner = site.partner(path="/resent")
    site.publish()
    site.server.drain()
    (delivery,) = site.deliveries(partner["id"])
    assert delivery["status"] == "delivered"
    page.open(f"/console/deliveries/{delivery['id']}")
    page.click("Resend")
    assert page.status() == "Delivery resent: a fresh attempt is due now."
    assert [found["status"] for found in site.deliveries(partner["id"])] == ["pending"]
    site.server.drain()
    assert len(site.receiver.to("/resent")) == 2


def test_replay_a_window(page: Page) -> None:
    """Replay: the failed deliveries created in the window, for the partner chosen, are pending."""
    site = page.site
    partner, _ = site.failed_delivery()
    page.open("/console/deliveries")
    since = (site.server.clock() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    page.page.get_by_label("Created since (UTC)").fill(since)
    page.page.get_by_label("Partner to replay").select_option(partner["id"])
    page.page.get_by_label("Status to replay").select_option("failed")
    page.click("Replay")
    assert page.status() == "1 deliveries requeued."
    assert [found["status"] for found in site.deliveries(partner["id"])] == ["pending"]


def test_publish_the_catalog_example(page: Page) -> None:
    """Publish: the prefilled example is a valid event; it reaches the partners subscribed to it."""
    site = page.site
    partner = site.partner()
    page.open("/console/events/new?kind=platform.milestone")
    example = page.page.get_by_label("Members (JSON)").input_value()
    assert '"milestone": "10,000 rooms claimed"' in example
    page.click("Publish")
    assert page.status().endswith("deliveries.")
    (delivery,) = site.deliveries(partner["id"])
    assert delivery["event"] == "platform.milestone"
    assert page.page.url.endswith(f"/console/deliveries?event={delivery['eventId']}")


def test_publish_shows_errors_by_field(page: Page) -> None:
    """An event the catalog refuses is not stored; the page names the member at fault."""
    site = page.site
    partner = site.partner()
    page.open("/console/events/new?kind=platform.milestone")
    page.page.get_by_label("Members (JSON)").fill('{"eventId": "evt_bad", "milestone": "x", "value": "many"}')
    page.click("Publish")
    assert "value" in page.page.get_by_role("alert").inner_text()
    assert site.deliveries(partner["id"]) == []


# --- the waitlist ---------------------------------------------------------------------------------------


def test_export_csv_matches_the_admin_listing(page: Page) -> None:
    """Export CSV downloads every registration the admin API lists, formula cells neutralised."""
    site = page.site
    site.server.register(f"formula{next(_serial)}@example.com", "claim", project="=HYPERLINK(1)")
    page.open("/console/waitlist")
    with page.page.expect_download() as download:
        page.page.get_by_role("button", name="Export CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    entries = site.server.admin("GET", "/admin/waitlist")["entries"]
    assert sorted(row["email"] for row in rows) == sorted(entry["email"] for entry in entries)
    assert "'=HYPERLINK(1)" in [row["project"] for row in rows]


def test_erase_after_confirmation(page: Page) -> None:
    """Erase asks first; confirmed, the admin API no longer lists the address."""
    site = page.site
    email = f"erase{next(_serial)}@example.com"
    site.server.register(email, "claim")
    site.server.register(email, "arcade")
    page.open("/console/waitlist")
    page.page.get_by_label("Address to erase").fill(email)
    page.click("Erase")
    assert page.page.get_by_role("heading", level=1).inner_text() == f"Erase {email}?"
    assert email in [entry["email"] for entry in site.server.admin("GET", "/admin/waitlist")["entries"]]
    page.click("Erase")
    assert page.status() == "2 registrations of that address erased."
    assert email not in [entry["email"] for entry in site.server.admin("GET", "/admin/waitlist")["entries"]]


# --- hostile text ---------------------------------------------------------------------------------------


def test_hostile_text_is_shown_as_text(page: Page) -> None:
    """Markup in a partner's name and answers, a payload and a registration shows as text; no script runs."""
    site = page.site
    name = f"{SCRIPT}{IMAGE}"
    partner = site.partner(name=name, path="/hostile")
    site.receiver.script("/hostile", Reply(500, SCRIPT), Reply(500, IMAGE))
    site.server.admin(
        "POST", "/admin/events",
        {"event": "platform.milestone", "eventId": f"evt_hostile_{next(_serial)}", "milestone": SCRIPT + IMAGE,
         "value": 1, "occurredAt": format_timestamp(site.server.clock())},
    )
    site.server.drain()
    site.server.clock.advance(13)
    site.server.drain()
    email = f"hostile{next(_serial)}@example.com"
    site.server.register(email, "claim", project=SCRIPT[:100], message=IMAGE)
    (delivery,) = site.deliveries(partner["id"])
    pages = {
        "/console": [name],
        "/console/partners": [name],
        f"/console/partners/{partner['id']}": [name],
        f"/console/deliveries?partner={partner['id']}": [name],
        f"/console/deliveries/{delivery['id']}": [name, SCRIPT, IMAGE],
        "/console/waitlist": [SCRIPT[:100], IMAGE],
    }
    for path, texts in pages.items():
        page.open(path)
        shown = page.page.locator("main").inner_text()
        for text in texts:
            assert text in shown, (path, text)
        assert page.page.locator("main script, main img").count() == 0, path
    site.receiver.script("/hostile", Reply(500, SCRIPT + IMAGE))
    page.open(f"/console/partners/{partner['id']}")
    page.click("Send test")
    assert SCRIPT + IMAGE in page.status()
    assert page.page.locator("main script, main img").count() == 0
    assert page.dialogs == []


# --- security -----------------------------------------------------------------------------------------


class _Attacker:
    """A page on another loopback origin whose form posts to the console."""

    def __init__(self, action: str, csrf: str) -> None:
        self.body = (
            f'<!doctype html><form method="post" action="{action}">'
            f'<input type="hidden" name="csrf" value="{csrf}"><button>Go</button></form>'
        ).encode()
        attacker = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.end_headers()
                self.wfile.write(attacker.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Attacker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_form_from_another_origin_is_refused(page: Page) -> None:
    """A form on another loopback origin, even with the session's own CSRF token, gets 403 and
    pauses nothing; a same-origin post without the token is refused too."""
    site = page.site
    partner = site.partner()
    page.open(f"/console/partners/{partner['id']}")
    csrf = page.page.locator("input[name=csrf]").first.input_value()
    with _Attacker(f"{site.url}/console/partners/{partner['id']}/pause", csrf) as attacker:
        page.page.goto(attacker.url)
        with page.page.expect_navigation() as navigation:
            page.page.get_by_role("button", name="Go").click()
        assert navigation.value.status == 403
    assert site.server.admin("GET", f"/admin/partners/{partner['id']}")["status"] == "active"
    answer = page.page.request.post(
        f"{site.url}/console/partners/{partner['id']}/pause", headers={"origin": site.url}, form={"csrf": "wrong"}
    )
    assert answer.status == 403
    assert site.server.admin("GET", f"/admin/partners/{partner['id']}")["status"] == "active"


def test_the_session_cookie_carries_its_attributes(page: Page) -> None:
    """HttpOnly, SameSite=Strict, Path=/console; not Secure on an http base URL."""
    (cookie,) = [cookie for cookie in page.page.context.cookies() if cookie["name"] == "console_session"]
    assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"], cookie["secure"]) == (
        True, "Strict", "/console", False,
    )


# --- accessibility ------------------------------------------------------------------------------------


def _list_workers(site: Site) -> None:
    """A live worker and a silent one in the roster."""

    async def beat() -> None:
        now = site.server.clock()
        async with site.server.app.ctx.engine.begin() as conn:
            for host, seen in (("edge-silent", now - 2 * roster.SILENT_AFTER), ("edge-live", now)):
                worker_id = f"w-{host}-{next(_serial)}"
                await roster.beat(
                    conn,
                    roster.Presence(worker_id, host, 4242, "worker", "uvloop", 512, 3, seen, seen),
                )

    site.server.call(beat())


def test_axe_finds_no_wcag_violation_on_any_page(page: Page) -> None:
    """axe-core: zero WCAG 2.1 A and AA violations on every page, with data on it."""
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    _list_workers(page.site)  # the overview's table of workers, a silent one warned of
    paths = [path for path, _ in _every_page(page.site)] + ["/console/login"]
    page.open(paths[3])
    page.click("Send test")  # a page showing a message
    found = {}
    for path in [None, *paths]:
        if path is not None:
            page.open(path)
        results = axe.run(page.page, options={"runOnly": {"type": "tag", "values": WCAG}})
        if results.violations_count:
            found[path or "after an action"] = results.generate_report()
    assert found == {}
