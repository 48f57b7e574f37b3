"""The console facing hostile requests: bytes that are not text, numbers Python will not read, text
that is not valid Unicode. Each is a client's mistake, answered in the console's own way (a sign-in
redirect, 401, 403, the form again with its error, the HTML not-found page) and never 500."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from markupsafe import escape

from service.text import NOT_UNICODE_MESSAGE
from tests.test_console import ORIGIN, TOKEN, _csrf, _session, _sign_in

BEARER = {"authorization": f"Bearer {TOKEN}"}
BOUNDARY = "console-hostile"
SURROGATE = b"+2AA-"  # '\ud800' in UTF-7: Sanic decodes the part to a lone surrogate


def _multipart(fields: dict[str, bytes], *, utf7: tuple[str, ...] = ()) -> tuple[bytes, dict[str, str]]:
    """A multipart/form-data body whose parts named in ``utf7`` say ``charset=utf-7``."""
    body = b""
    for name, value in fields.items():
        body += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n'.encode()
        if name in utf7:
            body += b"Content-Type: text/plain; charset=utf-7\r\n"
        body += b"\r\n" + value + b"\r\n"
    body += f"--{BOUNDARY}--\r\n".encode()
    return body, {**ORIGIN, "content-type": f"multipart/form-data; boundary={BOUNDARY}"}


def _signed_in(client: Any) -> tuple[dict[str, str], str]:
    """The session cookie and its CSRF token."""
    cookies = _session(_sign_in(client))
    return cookies, _csrf(client.get("/console/partners/new", cookies=cookies).text)


def _partner(client: Any) -> str:
    body = {"name": "Receiver", "url": "http://127.0.0.1:9/hook"}
    made = client.post("/admin/partners", json=body, headers=BEARER)
    assert made.status_code == 201, made.text
    partner_id: str = made.json["id"]
    return partner_id


def _partners(client: Any) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = client.get("/admin/partners", headers=BEARER).json["partners"]
    return listed


def _html(response: Any) -> str:
    assert response.headers["content-type"].startswith("text/html"), response.text
    text: str = response.content.decode("utf-8")
    return text


@pytest.mark.parametrize("path", ["/console", "/console/partners", "/console/waitlist"])
def test_a_session_cookie_that_is_not_text_is_no_session(make_client: Any, path: str) -> None:
    """A cookie byte that is not UTF-8 cannot be a signed session: sign in, as without a cookie."""
    with make_client(admin_token=TOKEN) as client:
        response = client.get(path, headers={"cookie": b"console_session=\x80"})
    assert response.status_code == 303
    assert response.headers["location"].startswith("/console/login?next=")


def test_a_token_that_is_not_unicode_is_a_wrong_token(make_client: Any) -> None:
    """A sign-in token that is not valid Unicode is a wrong token: 401, counted against the throttle."""
    body, headers = _multipart({"token": SURROGATE, "next": b"/console"}, utf7=("token",))
    with make_client(admin_token=TOKEN) as client:
        answers = [client.post("/console/login", content=body, headers=headers) for _ in range(10)]
        refused = _sign_in(client, token="wrong")
    assert [answer.status_code for answer in answers] == [401] * 10
    assert "That is not the admin token." in _html(answers[0])
    assert refused.status_code == 429


def test_a_next_that_is_not_unicode_goes_to_the_overview(make_client: Any) -> None:
    """The right token with a ``next`` no ``Location`` can carry: signed in, and on to the overview."""
    body, headers = _multipart({"token": TOKEN.encode(), "next": b"/console/" + SURROGATE}, utf7=("next",))
    with make_client(admin_token=TOKEN) as client:
        response = client.post("/console/login", content=body, headers=headers)
    assert (response.status_code, response.headers["location"]) == (303, "/console")
    assert "console_session" in response.cookies


@pytest.mark.parametrize("value", ["²", "٣", "1²"])
def test_a_cap_that_is_not_an_ascii_number_is_a_field_error(make_client: Any, value: str) -> None:
    """Digits Python calls digits but ``int`` will not read: the form again, the cap marked, nothing added."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies, token = _signed_in(client)
        form = {"csrf": token, "name": "Made", "url": "http://127.0.0.1:9/hook", "maxInFlight": value}
        response = client.post("/console/partners", data=form, headers=ORIGIN, cookies=cookies)
        listed = _partners(client)
    assert response.status_code == 400
    assert 'id="cap-error"' in _html(response)
    assert listed == []


def test_a_changed_cap_that_is_not_an_ascii_number_is_a_field_error(make_client: Any) -> None:
    """Editing a partner with ``maxInFlight=²``: the edit form again with the cap marked, nothing changed."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        partner_id = _partner(client)
        cookies, token = _signed_in(client)
        form = {"csrf": token, "name": "Changed", "url": "http://127.0.0.1:9/hook", "maxInFlight": "²"}
        response = client.post(
            f"/console/partners/{partner_id}/edit", data=form, headers=ORIGIN, cookies=cookies
        )
        listed = _partners(client)
    assert response.status_code == 400
    assert 'id="cap-error"' in _html(response)
    assert [partner["name"] for partner in listed] == ["Receiver"]


def test_an_overlap_that_is_not_an_ascii_number_is_refused(make_client: Any) -> None:
    """Rotating with ``overlapSeconds=²`` is refused as any bad number is, the field named; the secret stays."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        partner_id = _partner(client)
        cookies, token = _signed_in(client)
        bad = {"csrf": token, "overlapSeconds": "x"}
        path = f"/console/partners/{partner_id}/rotate"
        expected = client.post(path, data=bad, headers=ORIGIN, cookies=cookies)
        response = client.post(path, data={**bad, "overlapSeconds": "²"}, headers=ORIGIN, cookies=cookies)
        shown = client.get(f"/admin/partners/{partner_id}", headers=BEARER).json
    assert expected.status_code == 400
    assert response.status_code == 400
    assert "<code>overlapSeconds</code>" in _html(response)
    assert shown.get("previousSecretExpiresAt") is None


@pytest.mark.parametrize(
    "payload",
    ['{"value": ' + "9" * 5000 + "}", "[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000],
    ids=["long-number", "deep-array", "deep-object"],
)
def test_a_payload_json_cannot_read_is_a_payload_error(make_client: Any, payload: str) -> None:
    """A number past Python's digit limit or nesting past its recursion limit: the form again, the
    payload marked, the text kept for the operator to fix."""
    with make_client(admin_token=TOKEN) as client:
        cookies, token = _signed_in(client)
        form = {"csrf": token, "event": "platform.milestone", "payload": payload}
        response = client.post("/console/events", data=form, headers=ORIGIN, cookies=cookies)
    page = _html(response)
    assert response.status_code == 400
    assert "<code>payload</code>" in page
    assert str(escape(payload[:50])) in page


def test_a_partner_name_that_is_not_unicode_is_refused_and_shown_safely(make_client: Any) -> None:
    """The form again, the name marked as not valid Unicode and echoed readable; nothing added."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies, token = _signed_in(client)
        fields = {"csrf": token.encode(), "name": b"A" + SURROGATE, "url": b"http://127.0.0.1:9/hook"}
        body, headers = _multipart(fields, utf7=("name",))
        response = client.post("/console/partners", content=body, headers=headers, cookies=cookies)
        listed = _partners(client)
    page = _html(response)
    assert response.status_code == 400
    assert NOT_UNICODE_MESSAGE in page
    assert 'value="A\ufffd"' in page
    assert listed == []


def test_a_replay_since_that_is_not_unicode_is_refused_and_shown_safely(make_client: Any) -> None:
    """The deliveries page again with ``since`` marked; nothing replayed."""
    with make_client(admin_token=TOKEN) as client:
        cookies, token = _signed_in(client)
        body, headers = _multipart({"csrf": token.encode(), "since": SURROGATE}, utf7=("since",))
        response = client.post("/console/deliveries/replay", content=body, headers=headers, cookies=cookies)
    page = _html(response)
    assert response.status_code == 400
    assert 'id="r-since-error"' in page


def test_an_event_member_that_is_not_unicode_is_refused_and_shown_safely(make_client: Any) -> None:
    """The publish form again with the fault named and the payload echoed readable; nothing published."""
    with make_client(admin_token=TOKEN) as client:
        cookies, token = _signed_in(client)
        payload = b'{\n  "milestone": "' + SURROGATE + b'",\n  "value": 1\n}'
        fields = {"csrf": token.encode(), "event": b"platform.milestone", "payload": payload}
        body, headers = _multipart(fields, utf7=("payload",))
        response = client.post("/console/events", content=body, headers=headers, cookies=cookies)
    page = _html(response)
    assert response.status_code == 400
    assert NOT_UNICODE_MESSAGE in page
    # Echoed with the surrogate as U+FFFD and its lines as the operator wrote them.
    assert "{\n  &#34;milestone&#34;: &#34;\ufffd&#34;,\n  &#34;value&#34;: 1\n}" in page


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/console/waitlist/erase", {"email": b"a@example.com", "confirm": b"yes"}),
        ("/console/partners", {"name": b"Made", "url": b"http://127.0.0.1:9/hook"}),
    ],
)
def test_a_csrf_token_that_is_not_unicode_is_a_wrong_one(
    make_client: Any, path: str, fields: dict[str, bytes]
) -> None:
    """A CSRF field that is not valid Unicode cannot match the session's: 403, nothing changed."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies, _ = _signed_in(client)
        body, headers = _multipart({"csrf": SURROGATE, **fields}, utf7=("csrf",))
        response = client.post(path, content=body, headers=headers, cookies=cookies)
        listed = _partners(client)
    assert response.status_code == 403
    assert "nothing was changed" in _html(response)
    assert listed == []


def test_editing_a_partner_that_does_not_exist_is_the_html_not_found_page(make_client: Any) -> None:
    """An invalid change to an unknown partner: the console's own 404 page, not the API's JSON."""
    with make_client(admin_token=TOKEN) as client:
        cookies, token = _signed_in(client)
        form = {"csrf": token, "name": "", "url": "not a url", "maxInFlight": "x"}
        response = client.post("/console/partners/ptn_nope/edit", data=form, headers=ORIGIN, cookies=cookies)
    assert response.status_code == 404
    assert "No partner has this id." in _html(response)


@pytest.mark.parametrize(
    "path",
    [
        "/console/static/console.css%00",
        "/console/static/" + "a" * 300,
        "/console/static/",
        "/console/static/..%2f..%2fpages.py",
        "/console/static/..%2f__init__.py",
        "/console/static/console.css/",
    ],
)
def test_a_static_path_that_names_no_file_is_the_not_found_page(
    make_client: Any, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    """Only the console's own files are served from /console/static/; any other name there (a NUL,
    a name too long for the file system, a directory, a way out) is the HTML not-found page, with
    nothing logged above INFO: never a 500, nor a 503 that reads as the storage failing."""
    with make_client(admin_token=TOKEN) as client:
        response = client.get(path)
        served = client.get("/console/static/console.css")
    assert response.status_code == 404
    assert "Nothing is here" in _html(response) or "not found" in _html(response).lower()
    assert served.status_code == 200 and served.headers["content-type"].startswith("text/css")
    assert [record.getMessage() for record in caplog.records if record.levelno > logging.INFO] == []


def test_a_form_larger_than_the_body_limit_is_the_too_large_page(make_client: Any) -> None:
    """A form over the service's 64 KiB body limit never arrives, CSRF token and all: the page says
    it is too large (413) rather than taking it for a forged form (403), and nothing is published."""
    with make_client(admin_token=TOKEN) as client:
        cookies, csrf = _signed_in(client)
        payload = '{"milestone": "' + "x" * 70_000 + '", "value": 1}'
        response = client.post(
            "/console/events",
            data={"csrf": csrf, "event": "platform.milestone", "payload": payload},
            headers=ORIGIN,
            cookies=cookies,
        )
        listed = client.get("/admin/deliveries", headers=BEARER).json
    assert response.status_code == 413
    assert "larger than the service accepts" in _html(response)
    assert listed["deliveries"] == []


def test_a_test_deliverys_answer_in_emoji_fits_the_flash_cookie() -> None:
    """The result of "Send test" reaches the next page in a sealed cookie: an excerpt of 256
    four-byte characters keeps it under the 4,096 bytes a browser keeps (as JSON's \\u escapes,
    twelve bytes each, it went over and the result vanished), and it reads back the same."""
    from sanic.response import html

    from service.clock import ManualClock
    from service.console.session import FLASH_COOKIE, Sessions

    sessions = Sessions(TOKEN, ManualClock(), secure=True)
    session, _ = sessions.new()
    message = {"message": "Test delivery retry: 500.", "excerpt": "\N{GRINNING FACE}" * 256}
    response = html("")
    sessions.flash(response, session, message)
    cookie = response.cookies.get_cookie(FLASH_COOKIE, path="/console")
    assert cookie is not None
    assert len(f"{FLASH_COOKIE}={cookie.value}") < 4096
    request = type("Request", (), {"cookies": {FLASH_COOKIE: cookie.value}})()
    assert sessions.take_flash(request, session) == message


@pytest.mark.parametrize("path", ["/console/waitlist?q=a%FF", "/console/deliveries?partner=%FF"])
def test_a_filter_that_is_not_utf8_is_refused_on_the_page(make_client: Any, path: str) -> None:
    """Not read with a replacement character (which would match nothing): the listing's own
    refusal page, naming the filter."""
    with make_client(admin_token=TOKEN) as client:
        cookies, _ = _signed_in(client)
        response = client.get(path, cookies=cookies)
    assert response.status_code == 400
    assert "not valid UTF-8" in _html(response)


def test_a_form_field_given_twice_is_refused_and_nothing_is_erased(make_client: Any) -> None:
    """Which of two addresses to erase is never guessed: 400 naming the field, both kept."""
    with make_client(admin_token=TOKEN) as client:
        for email in ("a@example.com", "b@example.com"):
            assert client.post("/api/waitlist", json={"email": email, "intent": "claim"}).status_code == 200
        cookies, csrf = _signed_in(client)
        form = {"email": ["a@example.com", "b@example.com"], "confirm": "yes", "csrf": csrf}
        response = client.post("/console/waitlist/erase", data=form, headers=ORIGIN, cookies=cookies)
        kept = client.get("/admin/waitlist", headers=BEARER).json["entries"]
    assert response.status_code == 400
    assert "This field appears more than once." in _html(response)
    assert sorted(entry["email"] for entry in kept) == ["a@example.com", "b@example.com"]


def test_the_partner_forms_event_checkboxes_may_repeat(make_client: Any) -> None:
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies, csrf = _signed_in(client)
        form = {
            "name": "Two kinds",
            "url": "http://127.0.0.1:9/hook",
            "events": ["room.claimed", "room.trending"],
            "csrf": csrf,
        }
        response = client.post("/console/partners", data=form, headers=ORIGIN, cookies=cookies)
        assert response.status_code == 303, response.text
        [partner] = _partners(client)
    assert partner["events"] == ["room.claimed", "room.trending"]


@pytest.mark.parametrize(
    "name",
    [b"caf%E9", b"caf\xe9", b"%ED%A0%80"],  # Latin-1 escaped, a raw Latin-1 byte, a surrogate's UTF-8
)
def test_a_urlencoded_field_that_is_not_utf8_is_refused_not_replaced(make_client: Any, name: bytes) -> None:
    """Read strictly, as the admin API reads a body: 400 naming the field, no partner stored with
    U+FFFD in its name, and never the forgery page for a form that carried its CSRF token."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies, csrf = _signed_in(client)
        body = b"name=" + name + b"&url=http%3A%2F%2F127.0.0.1%3A9%2Fhook&csrf=" + csrf.encode()
        headers = {**ORIGIN, "content-type": "application/x-www-form-urlencoded"}
        response = client.post("/console/partners", content=body, headers=headers, cookies=cookies)
        listed = _partners(client)
    page = _html(response)
    assert response.status_code == 400
    assert "<code>name</code>" in page
    assert "not valid UTF-8" in page
    assert listed == []


def test_a_form_not_utf8_from_another_origin_is_still_forbidden(make_client: Any) -> None:
    """The origin is judged before the form is read: a forgery learns nothing from its encoding."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        cookies, csrf = _signed_in(client)
        body = b"name=caf%E9&url=x&csrf=" + csrf.encode()
        headers = {"origin": "https://elsewhere.example", "content-type": "application/x-www-form-urlencoded"}
        response = client.post("/console/partners", content=body, headers=headers, cookies=cookies)
    assert response.status_code == 403


@pytest.mark.parametrize(
    "path", ["/console/waitlist?intent=claim&intent=member", "/console/deliveries?status=failed&status=pending"]
)
def test_a_filter_given_twice_is_refused_on_the_page(make_client: Any, path: str) -> None:
    """Which of two filters to apply is never guessed (as on the admin API): 400 naming it."""
    with make_client(admin_token=TOKEN) as client:
        cookies, _ = _signed_in(client)
        response = client.get(path, cookies=cookies)
    assert response.status_code == 400
    assert "This parameter appears more than once." in _html(response)


@pytest.mark.parametrize(
    ("path", "goes_to"),
    [
        ("/%63onsole/partners", "/console/partners"),  # the console's own path, respelled
        ("/console/%70artners?kind=x", "/console/partners?kind=x"),
        ("/console/%2Fx", "/console/%2Fx"),  # %2F is no "/": kept as it came
    ],
)
def test_a_respelled_console_path_comes_back_after_sign_in_as_the_console_spells_it(
    make_client: Any, path: str, goes_to: str
) -> None:
    """RFC 3986 spells ``%63onsole`` and ``console`` alike: the sign-in brings the operator back to
    the page asked for, where it sent them to the overview (the respelling is no console path)."""
    with make_client(admin_token=TOKEN) as client:
        asked = client.get(path)
        location = asked.headers["location"]
        page = client.get(location)
    assert asked.status_code == 303 and location.startswith("/console/login?next=")
    assert f'name="next" value="{escape(goes_to)}"' in _html(page)
