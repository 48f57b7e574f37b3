"""The console's guard without a browser: hidden without an admin token, the session and its cookie,
the security headers on every answer (what routing refuses included), the origin and CSRF checks,
the sign-in throttle, the audit actor."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from service.console.pages import HEADERS
from service.console.session import safe_next
from service.logs import JSONFormatter
from tests.webhook_helpers import room_claimed

TOKEN = "s3cret-admin-token-for-the-console-tests"
OTHER_TOKEN = "another-admin-token-for-the-console-tests"
BASE = "http://127.0.0.1:8000"  # the settings' default base URL: the origin forms must come from
ORIGIN = {"origin": BASE}
PATHS = [
    ("GET", "/console"),
    ("GET", "/console/"),
    ("GET", "/console/login"),
    ("POST", "/console/login"),
    ("POST", "/console/logout"),
    ("GET", "/console/partners"),
    ("GET", "/console/partners/ptn_x"),
    ("POST", "/console/partners/ptn_x/pause"),
    ("GET", "/console/deliveries"),
    ("GET", "/console/events/new"),
    ("GET", "/console/waitlist"),
    ("POST", "/console/waitlist/export"),
    ("GET", "/console/static/console.css"),
    ("GET", "/console/nothing/here"),
    # What routing refuses (no route's middleware runs for these): methods a path does not take.
    ("PUT", "/console/partners"),
    ("DELETE", "/console/waitlist"),
    ("HEAD", "/console"),
    ("OPTIONS", "/console/partners"),
    ("PATCH", "/console/static/console.css"),
]


def _sign_in(client: Any, token: str = TOKEN, **headers: str) -> Any:
    return client.post(
        "/console/login", data={"token": token, "next": "/console/partners"}, headers={**ORIGIN, **headers}
    )


def _session(response: Any) -> dict[str, str]:
    return {"console_session": response.cookies["console_session"]}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize(("method", "path"), PATHS)
def test_without_an_admin_token_every_console_path_is_404(make_client: Any, method: str, path: str) -> None:
    """No token configured: the console does not exist, whatever the path or method."""
    with make_client(admin_token=None) as client:
        response = client.request(method, path, headers=ORIGIN)
    assert response.status_code == 404


@pytest.mark.parametrize(("method", "path"), PATHS)
def test_every_console_answer_carries_the_security_headers(make_client: Any, method: str, path: str) -> None:
    """Signed in or not, page, redirect, refusal or stylesheet: the same five headers."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        for jar in ({}, cookies):
            response = client.request(method, path, cookies=jar)
            for name, value in HEADERS.items():
                assert response.headers[name] == value, (path, name, jar)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/console/partners", {"GET", "POST"}),
        ("DELETE", "/console/waitlist", {"GET"}),
        ("HEAD", "/console", {"GET"}),
        ("OPTIONS", "/console/partners/ptn_x", {"GET"}),
        ("PATCH", "/console/login", {"GET", "POST"}),
    ],
)
def test_a_method_a_path_does_not_take_is_the_consoles_405_page(
    make_client: Any, method: str, path: str, allow: set[str]
) -> None:
    """Signed in, a method routing refuses is the console's own HTML page, 405 with its ``Allow``
    (in Sanic's order, which varies) and the five headers (not the API's JSON error, without them)."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        response = client.request(method, path, headers=ORIGIN, cookies=cookies)
    assert (response.status_code, set(response.headers["allow"].split(", "))) == (405, allow)
    assert response.headers["content-type"].startswith("text/html")
    assert method == "HEAD" or "Not allowed" in response.text
    assert {name: response.headers.get(name) for name in HEADERS} == HEADERS


@pytest.mark.parametrize(
    ("method", "status"), [("HEAD", 303), ("PUT", 403), ("DELETE", 403), ("OPTIONS", 403)]
)
def test_without_a_session_a_refused_method_is_the_sign_in_or_403(
    make_client: Any, method: str, status: int
) -> None:
    """Without a session, a method the path does not take answers as the path would (sign in, or
    403 for anything but a read), with the five headers and no ``Allow`` to map the routes by."""
    with make_client(admin_token=TOKEN) as client:
        response = client.request(method, "/console/partners", headers=ORIGIN)
    assert response.status_code == status
    assert "allow" not in response.headers
    assert status != 303 or response.headers["location"] == "/console/login?next=%2Fconsole%2Fpartners"
    assert {name: response.headers.get(name) for name in HEADERS} == HEADERS


def test_sign_in_sets_the_session_cookie_and_goes_where_it_was_asked(make_client: Any) -> None:
    """303 to the same-origin ``next``; the cookie is HttpOnly, SameSite=Strict, Path=/console."""
    with make_client(admin_token=TOKEN) as client:
        response = _sign_in(client)
        overview = client.get("/console/partners", cookies=_session(response))
    assert (response.status_code, response.headers["location"]) == (303, "/console/partners")
    cookie = response.headers["set-cookie"]
    assert {"HttpOnly", "SameSite=Strict", "Path=/console"} <= {part.strip() for part in cookie.split(";")}
    assert "Secure" not in cookie
    assert overview.status_code == 200


def test_the_cookie_is_secure_behind_an_https_base_url(make_client: Any) -> None:
    """With an https base URL the session cookie is Secure (and forms must come from that origin)."""
    with make_client(admin_token=TOKEN, base_url="https://console.example") as client:
        refused = _sign_in(client)
        response = _sign_in(client, origin="https://console.example")
    assert refused.status_code == 403
    assert response.status_code == 303
    assert "Secure" in {part.strip() for part in response.headers["set-cookie"].split(";")}


def test_a_session_from_before_the_token_changed_is_refused(make_client: Any) -> None:
    """The session key derives from the admin token: a new token signs everyone out."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        assert client.get("/console", cookies=cookies).status_code == 200
    with make_client(admin_token=OTHER_TOKEN) as client:
        response = client.get("/console", cookies=cookies)
    assert (response.status_code, response.headers["location"]) == (303, "/console/login?next=%2Fconsole")


def test_a_form_sent_after_the_session_ended_says_so_and_leads_back_through_sign_in(
    make_client: Any, clock: Any
) -> None:
    """A form filled in over lunch and sent nine hours after signing in: nothing changes, and the
    page says the session ended (not that the form was forged), with a sign-in link that returns
    to the form's page. A form from another origin is still the forged-form 403."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies = _session(_sign_in(client))
        token = _csrf(client.get("/console/partners/new", cookies=cookies).text)
        clock.advance(9 * 3600)
        form = {"name": "Made", "url": "http://127.0.0.1:9/hook", "csrf": token}
        referer = {**ORIGIN, "referer": f"{BASE}/console/partners/new"}
        late = client.post("/console/partners", data=form, headers=referer, cookies=cookies)
        forged = client.post("/console/partners", data=form, headers={"origin": "http://evil.example"}, cookies=cookies)
        listed = client.get("/admin/partners", headers={"authorization": f"Bearer {TOKEN}"}).json["partners"]
    assert late.status_code == 403
    assert "Your console session has ended, so nothing was changed." in late.text
    assert 'href="/console/login?next=%2Fconsole%2Fpartners%2Fnew">Sign in</a>' in late.text
    assert forged.status_code == 403
    assert "did not come from a console page" in forged.text
    assert listed == []


@pytest.mark.parametrize("referer", ["http://[", "http://[::1/console", "http://[fe80::1%zz]/x"])
def test_signing_in_from_a_referer_that_is_no_url_is_403(make_client: Any, referer: str) -> None:
    with make_client(admin_token=TOKEN) as client:
        response = client.post(
            "/console/login", data={"token": TOKEN}, headers={"referer": referer}
        )
    assert response.status_code == 403
    assert "console_session" not in response.cookies


def test_a_session_lasts_eight_hours(make_client: Any, clock: Any) -> None:
    """Eight hours of the clock after signing in, the session sends the browser to sign in again."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        clock.advance(8 * 3600 - 1)
        assert client.get("/console", cookies=cookies).status_code == 200
        clock.advance(2)
        response = client.get("/console", cookies=cookies)
    assert response.status_code == 303


@pytest.mark.parametrize(
    ("headers", "csrf", "status"),
    [
        ({"origin": BASE}, True, 303),
        ({"referer": BASE + "/console/partners"}, True, 303),
        ({"origin": "http://127.0.0.1:9999"}, True, 403),
        ({"origin": "null"}, True, 403),
        ({"referer": "http://evil.example/console"}, True, 403),
        ({"referer": "http://[::1/console"}, True, 403),  # no URL urlsplit will read
        ({"referer": "http://["}, True, 403),
        ({}, True, 403),
        ({"origin": BASE}, False, 403),
    ],
)
def test_actions_need_our_origin_and_the_csrf_token(
    make_client: Any, headers: dict[str, str], csrf: bool, status: int
) -> None:
    """A POST from another origin, with no origin at all, or without the session's token: 403."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies = _session(_sign_in(client))
        token = _csrf(client.get("/console/partners/new", cookies=cookies).text)
        form = {"name": "Made", "url": "http://127.0.0.1:9/hook", "csrf": token if csrf else "forged"}
        response = client.post("/console/partners", data=form, headers=headers, cookies=cookies)
        listed = client.get("/admin/partners", headers={"authorization": f"Bearer {TOKEN}"}).json["partners"]
    assert response.status_code == status
    assert len(listed) == (1 if status == 303 else 0)


def test_wrong_tokens_count_against_the_admin_throttle(make_client: Any) -> None:
    """Ten wrong tokens (form or bearer alike) and the client's next wrong one is refused; the
    right one still signs in, so wrong ones sent from the operator's address cannot lock it out."""
    with make_client(admin_token=TOKEN) as client:
        for _ in range(5):
            assert _sign_in(client, token="wrong").status_code == 401
        for _ in range(5):
            assert client.get("/admin/waitlist", headers={"authorization": "Bearer wrong"}).status_code == 401
        refused = _sign_in(client, token="wrong")
        signed_in = _sign_in(client)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) > 0
    assert "console_session" not in refused.cookies
    assert signed_in.status_code == 303
    assert "console_session" in signed_in.cookies


def test_the_throttled_sign_in_page_has_its_title(make_client: Any) -> None:
    """Refused by the throttle (429), the sign-in page is titled "Sign in", as after a wrong token
    (401) or with the store down (503): never an empty title before " · Console"."""
    with make_client(admin_token=TOKEN) as client:
        answers = [_sign_in(client, token="wrong") for _ in range(11)]
    assert [answer.status_code for answer in answers] == [401] * 10 + [429]
    assert "<title>Sign in · Console</title>" in answers[-1].text


def test_with_the_throttles_store_down_only_the_right_token_signs_in(make_client: Any) -> None:
    """A wrong token that cannot be counted is 503, never an unlimited guess nor a 500; the right
    one needs no counting."""
    with make_client(admin_token=TOKEN, rate_limit_storage="redis://127.0.0.1:9/0") as client:
        wrong = _sign_in(client, token="wrong")
        right = _sign_in(client)
    assert wrong.status_code == 503
    assert "Signing in is briefly unavailable; try again shortly." in wrong.text
    assert "console_session" not in wrong.cookies
    assert right.status_code == 303


def test_console_actions_are_audited_as_the_console(make_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    """An action taken in the console is one audit line whose actor is ``console:<client address>``."""
    caplog.set_level(logging.INFO, logger="service.audit")
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        token = _csrf(client.get("/console/waitlist", cookies=cookies).text)
        client.post(
            "/console/waitlist/erase",
            data={"email": "gone@example.com", "confirm": "yes", "csrf": token},
            headers=ORIGIN,
            cookies=cookies,
        )
    formatter = JSONFormatter()
    lines = [json.loads(formatter.format(record)) for record in caplog.records if record.name == "service.audit"]
    assert [(line["actor"], line["operation"], line["outcome"]) for line in lines] == [
        ("console:127.0.0.1", "erase_registrations", "ok")
    ]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "/console"),
        ("/console/partners", "/console/partners"),
        ("/console/deliveries?status=failed", "/console/deliveries?status=failed"),
        ("https://evil.example/console", "/console"),
        ("//evil.example/console", "/console"),
        ("/consolex", "/console"),
        ("/console\\..\\admin", "/console"),
        ("/admin/partners", "/console"),
        ("/console/\r\nSet-Cookie: x", "/console"),
    ],
)
def test_sign_in_goes_only_to_console_paths(given: str | None, expected: str) -> None:
    """``next`` is followed only to a path of the console itself; anything else is ignored."""
    assert safe_next(given) == expected


def test_an_export_of_many_pieces_is_whole_and_in_order(make_client: Any) -> None:
    """Export CSV sends a piece of about 64 KiB at a time as it reads: 1,200 registrations with
    long messages (several pieces) arrive every one, once, oldest first."""
    with make_client(admin_token=TOKEN, waitlist_rate_limit="100000/minute") as client:
        for number in range(1200):
            body = {"email": f"many{number}@example.com", "intent": "member", "message": "m" * 200}
            assert client.post("/api/waitlist", json=body).status_code == 200
        cookies = _session(_sign_in(client))
        token = _csrf(client.get("/console/waitlist", cookies=cookies).text)
        response = client.post("/console/waitlist/export", data={"csrf": token}, headers=ORIGIN, cookies=cookies)
    assert response.status_code == 200
    assert len(response.content) > 4 * 64 * 1024
    rows = response.text.splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == [f"many{number}@example.com" for number in range(1200)]


def test_export_is_a_csv_download_with_the_console_headers(make_client: Any) -> None:
    """Export CSV streams every registration as an attachment, formula cells quoted, headers on,
    and tells a reverse proxy not to read it all ahead of the client."""
    with make_client(admin_token=TOKEN) as client:
        for number, project in enumerate(["=SUM(A1)", "Moonfrog"]):
            body = {"email": f"csv{number}@example.com", "intent": "claim", "project": project}
            assert client.post("/api/waitlist", json=body).status_code == 200
        cookies = _session(_sign_in(client))
        token = _csrf(client.get("/console/waitlist", cookies=cookies).text)
        response = client.post("/console/waitlist/export", data={"csrf": token}, headers=ORIGIN, cookies=cookies)
    assert response.status_code == 200
    assert response.headers["content-disposition"] == 'attachment; filename="waitlist.csv"'
    assert response.headers["x-accel-buffering"] == "no"  # nginx passes it on as it is read
    assert response.headers["content-security-policy"] == HEADERS["Content-Security-Policy"]
    lines = response.text.splitlines()
    assert lines[0] == "email,intent,project,message,createdAt,updatedAt"
    assert [line.split(",")[:3] for line in lines[1:]] == [
        ["csv0@example.com", "claim", "'=SUM(A1)"],
        ["csv1@example.com", "claim", "Moonfrog"],
    ]


def test_a_removed_partner_is_no_choice_in_the_delivery_forms_though_its_deliveries_still_name_it(
    make_client: Any,
) -> None:
    """The deliveries page's partner filter and replay form offer the partners there are: a removed
    one answers 404 on every per-partner route, so choosing it could only fail."""
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        ids = {}
        for name in ("Kept", "Gone"):
            body = {"name": name, "url": "http://127.0.0.1:9/hook"}
            ids[name] = client.post("/admin/partners", json=body, headers=bearer).json["id"]
        assert client.post("/admin/events", json=room_claimed(), headers=bearer).status == 202
        assert client.delete(f"/admin/partners/{ids['Gone']}", headers=bearer).status == 204
        page = client.get("/console/deliveries", cookies=_session(_sign_in(client))).text
    offered = re.findall(r'<option value="(ptn_[^"]+)"', page)
    assert offered == [ids["Kept"]] * 2  # the filter's and the replay form's
    assert ">Gone<" in page  # its cancelled delivery, in the table


def test_the_consoles_own_error_pages_are_counted_by_status_once_each(make_client: Any) -> None:
    """``service_http_client_errors_total`` counts every 4xx answer, the console's too: a refused
    sign-in (401), a form from elsewhere (403), a page that does not exist (404), and an error a
    route raised (its page made from the API's judgement, counted there) once, not twice."""
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        assert _sign_in(client, token="x" * 40).status_code == 401
        forged = client.post("/console/partners", data={"name": "x"}, headers={"origin": "http://evil.example"}, cookies=cookies)
        assert forged.status_code == 403
        assert client.get("/console/partners/ptn_nothing", cookies=cookies).status_code == 404
        assert client.get("/console/no-such-page", cookies=cookies).status_code == 404
        assert client.get("/console/deliveries?status=lost", cookies=cookies).status_code == 400
        text = client.get("/admin/metrics", headers=bearer).text
    counted = dict(re.findall(r'^service_http_client_errors_total\{status="(\d+)"\} (\S+)$', text, re.MULTILINE))
    assert counted == {"400": "1.0", "401": "1.0", "403": "1.0", "404": "2.0"}


def test_the_sign_in_carries_on_to_a_long_address_by_its_path_alone(make_client: Any) -> None:
    """Signed out, a page asked for with a query so long that no console page has one is carried on
    to by its path: a Location three times the target's length would fail at a reverse proxy."""
    with make_client(admin_token=TOKEN) as client:
        response = client.get("/console/deliveries?partner=" + "/" * 3000, follow_redirects=False)
        short = client.get("/console/deliveries?partner=ptn_1", follow_redirects=False)
    assert (response.status_code, response.headers["location"]) == (303, "/console/login?next=%2Fconsole%2Fdeliveries")
    assert short.headers["location"] == "/console/login?next=%2Fconsole%2Fdeliveries%3Fpartner%3Dptn_1"
