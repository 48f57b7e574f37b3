"""The console away from loopback: cookies deleted as they were set on a plain-http host, a base URL
naming its default port, and the sign-in form's repeated fields."""

from __future__ import annotations

from typing import Any

import pytest

from service.console.session import origin_of
from tests.test_console import ORIGIN, TOKEN, _csrf, _session

BEARER = {"authorization": f"Bearer {TOKEN}"}
PLAIN = "http://192.0.2.2:8000"  # a plain-http host that is no loopback: a browser keeps no Secure cookie


def _sign_in(client: Any, base: str, token: str = TOKEN) -> Any:
    return client.post(
        "/console/login",
        data={"token": token, "next": "/console/waitlist"},
        headers={"origin": origin_of(base)},
    )


def _set_cookie(response: Any, name: str) -> set[str]:
    """The attributes of the one ``Set-Cookie`` for ``name``, each stripped (``Max-Age=0``, ``Secure``)."""
    [cookie] = [value for value in response.headers.get_list("set-cookie") if value.startswith(f"{name}=")]
    return {part.strip() for part in cookie.split(";")[1:]}


def _expired(attributes: set[str], *, secure: bool) -> bool:
    """Deleted as the cookie was set: same path and flags, no age left, ``Secure`` only over https."""
    expected = {"Path=/console", "Max-Age=0", "SameSite=Strict", "HttpOnly"}
    return attributes == (expected | {"Secure"} if secure else expected)


@pytest.mark.parametrize(("base", "secure"), [(PLAIN, False), ("https://console.example", True)])
def test_signing_out_deletes_the_cookie_as_it_was_set(make_client: Any, base: str, secure: bool) -> None:
    """Over plain http the deleting ``Set-Cookie`` carries no ``Secure`` (a browser would ignore it,
    and the session would outlive the sign-out); behind https it does, as the cookie did."""
    with make_client(admin_token=TOKEN, base_url=base) as client:
        cookies = _session(_sign_in(client, base))
        csrf = _csrf(client.get("/console", cookies=cookies).text)
        response = client.post(
            "/console/logout", data={"csrf": csrf}, headers={"origin": origin_of(base)}, cookies=cookies
        )
    assert (response.status_code, response.headers["location"]) == (303, "/console/login")
    assert _expired(_set_cookie(response, "console_session"), secure=secure)


@pytest.mark.parametrize(("base", "secure"), [(PLAIN, False), ("https://console.example", True)])
def test_the_page_that_shows_a_message_deletes_it_as_it_was_set(
    make_client: Any, base: str, secure: bool
) -> None:
    """The one-time message (after an erasure here) is shown once, and the page that shows it
    deletes its cookie with the attributes it was set with."""
    with make_client(admin_token=TOKEN, base_url=base) as client:
        cookies = _session(_sign_in(client, base))
        csrf = _csrf(client.get("/console/waitlist", cookies=cookies).text)
        erased = client.post(
            "/console/waitlist/erase",
            data={"email": "gone@example.com", "confirm": "yes", "csrf": csrf},
            headers={"origin": origin_of(base)},
            cookies=cookies,
        )
        flash = {"console_flash": erased.cookies["console_flash"]}
        page = client.get("/console/waitlist", cookies={**cookies, **flash})
    assert erased.status_code == 303
    assert "0 registrations of that address erased." in page.text
    assert _expired(_set_cookie(page, "console_flash"), secure=secure)


@pytest.mark.parametrize(
    ("base", "origin"),
    [
        ("https://ops.example:443", "https://ops.example"),
        ("http://ops.example:80", "http://ops.example"),
        ("https://ops.example", "https://ops.example:443"),
        ("https://Ops.Example:443/svc", "https://ops.example"),
    ],
)
def test_a_base_url_naming_its_default_port_takes_the_browsers_origin(
    make_client: Any, base: str, origin: str
) -> None:
    """A browser leaves the default port out of ``Origin``: the base URL's ``:443`` (or ``:80``)
    must not turn every console form into a 403. Another origin is still refused."""
    with make_client(admin_token=TOKEN, base_url=base) as client:
        signed_in = client.post("/console/login", data={"token": TOKEN}, headers={"origin": origin})
        other = client.post(
            "/console/login", data={"token": TOKEN}, headers={"origin": "https://evil.example"}
        )
        other_port = client.post(
            "/console/login", data={"token": TOKEN}, headers={"origin": f"{origin_of(base)}:8443"}
        )
    assert signed_in.status_code == 303
    assert "console_session" in signed_in.cookies
    assert (other.status_code, other_port.status_code) == (403, 403)
    assert "console_session" not in other.cookies


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://ops.example:443/console", "https://ops.example"),
        ("HTTP://OPS.example:80", "http://ops.example"),
        ("http://ops.example:443", "http://ops.example:443"),
        ("https://ops.example:8443", "https://ops.example:8443"),
        ("http://[::1]:80/console", "http://[::1]"),
        ("http://ops.example:port/", None),
        ("null", None),
    ],
)
def test_an_origin_is_compared_as_a_browser_writes_it(url: str, origin: str | None) -> None:
    assert origin_of(url) == origin


@pytest.mark.parametrize(
    "fields",
    [
        {"token": [TOKEN, "wrong"]},
        {"token": ["wrong", TOKEN]},
        {"token": TOKEN, "next": ["/console/partners", "/console/waitlist"]},
    ],
    ids=["right-first", "wrong-first", "next-twice"],
)
def test_a_sign_in_field_given_twice_is_refused(make_client: Any, fields: dict[str, Any]) -> None:
    """Neither value of a field given twice is taken at sign-in, as on every console form: 400
    naming the field, no session, and no wrong token counted against the throttle."""
    with make_client(admin_token=TOKEN) as client:
        answers = [client.post("/console/login", data=fields, headers=ORIGIN) for _ in range(11)]
        wrong = client.post("/console/login", data={"token": "wrong"}, headers=ORIGIN)
    assert {answer.status_code for answer in answers} == {400}
    assert "This field appears more than once." in answers[0].text
    assert answers[0].headers["content-type"].startswith("text/html")
    assert all("console_session" not in answer.cookies for answer in answers)
    assert wrong.status_code == 401


def test_a_sign_in_form_larger_than_the_limit_is_the_too_large_page(make_client: Any) -> None:
    """A sign-in form over the 64 KiB limit is the console's "too large" page, as every other
    console form is, not the JSON answer of the API routes; nobody is signed in."""
    with make_client(admin_token=TOKEN) as client:
        response = client.post(
            "/console/login", data={"token": TOKEN, "next": "/console/" + "x" * 70_000}, headers=ORIGIN
        )
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("text/html")
    assert "larger than the service accepts" in response.text
    assert "console_session" not in response.cookies


def _sign_out(client: Any, base: str, cookies: dict[str, str]) -> Any:
    csrf = _csrf(client.get("/console", cookies=cookies).text)
    return client.post(
        "/console/logout", data={"csrf": csrf}, headers={"origin": origin_of(base)}, cookies=cookies
    )


def test_a_copy_of_a_signed_out_sessions_cookie_is_refused(
    make_client: Any, rate_limit_storage: dict[str, str]
) -> None:
    """Signing out ends the session on the server, not only in the browser: its cookie, copied
    before, no longer opens a page or passes an action's guard; another session goes on."""
    base = "https://console.example"
    with make_client(admin_token=TOKEN, base_url=base, **rate_limit_storage) as client:
        ended, other = _session(_sign_in(client, base)), _session(_sign_in(client, base))
        assert client.get("/console", cookies=ended).status_code == 200
        assert _sign_out(client, base, ended).status_code == 303
        page = client.get("/console/partners", cookies=ended)
        action = client.post(
            "/console/waitlist/erase",
            data={"email": "a@example.com", "confirm": "yes", "csrf": "any"},
            headers={"origin": origin_of(base)},
            cookies=ended,
        )
        going_on = client.get("/console", cookies=other)
    assert (page.status_code, page.headers["location"]) == (303, "/console/login?next=%2Fconsole%2Fpartners")
    assert action.status_code == 403 and "Your console session has ended" in action.text
    assert going_on.status_code == 200


def test_a_sign_out_on_one_server_is_refused_by_the_others(
    make_client: Any, rate_limit_storage: dict[str, str]
) -> None:
    """With Redis as the rate limiter's store, the servers behind one proxy share what was signed
    out: a cookie signed out through one is refused by the next."""
    if rate_limit_storage["rate_limit_storage"].startswith("memory"):
        pytest.skip("process memory is one server's own")
    base = "https://console.example"
    settings = {"admin_token": TOKEN, "base_url": base, **rate_limit_storage}
    with make_client(**settings) as first, make_client(**settings) as second:
        cookies = _session(_sign_in(first, base))
        assert second.get("/console", cookies=cookies).status_code == 200
        assert _sign_out(first, base, cookies).status_code == 303
        refused = second.get("/console", cookies=cookies)
    assert (refused.status_code, refused.headers["location"]) == (303, "/console/login?next=%2Fconsole")
