"""Each field error of a console form is tied to its control: the error has an id, the control
names it in ``aria-describedby`` (a screen reader reads it with the control) and, where the value
given is at fault, says ``aria-invalid="true"``. The browser tests run axe-core over the pages;
these read the HTML of each error the forms can show."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest

from tests.test_console import ORIGIN, TOKEN, _csrf, _session, _sign_in


class _Elements(HTMLParser):
    """Each element with an id: its attributes, and its text up to the next tag."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str | None]] = {}
        self.text: dict[str, str] = {}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self._open = found.get("id")
        if self._open is not None:
            self.by_id[self._open] = found
            self.text[self._open] = ""

    def handle_endtag(self, tag: str) -> None:
        self._open = None

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.text[self._open] += data


def _elements(page: str) -> _Elements:
    parsed = _Elements()
    parsed.feed(page)
    return parsed


def _tied(page: str, control: str, error: str, *, invalid: bool) -> str:
    """The text of error ``error``, once ``control`` is shown to name it (and to be invalid)."""
    found = _elements(page)
    attributes = found.by_id[control]
    assert error in (attributes.get("aria-describedby") or "").split(), attributes
    assert attributes.get("aria-invalid") == ("true" if invalid else None), attributes
    return found.text[error]


def _replay(client: Any, cookies: dict[str, str], **fields: str) -> Any:
    csrf = _csrf(client.get("/console/deliveries", cookies=cookies).text)
    data = {"since": "2026-01-01T00:00", **fields, "csrf": csrf}
    return client.post("/console/deliveries/replay", data=data, headers=ORIGIN, cookies=cookies)


@pytest.mark.parametrize(
    ("fields", "control", "error", "message"),
    [
        ({"partner": "ptn\x00x"}, "r-partner", "r-partner-error", "Must be a partner id."),
        ({"status": "delivering"}, "r-status", "r-status-error", "Must be one of: failed, delivered."),
    ],
    ids=["partner", "status"],
)
def test_a_replay_field_error_is_tied_to_its_select(
    make_client: Any, fields: dict[str, str], control: str, error: str, message: str
) -> None:
    """Replay's partner and status errors, like its since and until ones, are named by their select."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        response = _replay(client, cookies, **fields)
    assert response.status_code == 400
    assert _tied(response.text, control, error, invalid=True) == message


def test_a_replay_without_since_says_it_is_required_as_the_api_does(make_client: Any) -> None:
    """A blank since (the field's ``required`` bypassed): the message under it is the admin API's
    for a replay without since, not a complaint about the format of a value never given."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        response = _replay(client, cookies, since="", status="failed")
        bearer = {"authorization": f"Bearer {TOKEN}"}
        api = client.post("/admin/deliveries/replay", json={"status": "failed"}, headers=bearer)
    assert api.status_code == response.status_code == 400
    assert api.json["errors"] == [
        {"field": "since", "code": "missing", "message": "This member is required."}
    ]
    assert _tied(response.text, "r-since", "r-since-error", invalid=True) == "This member is required."


def test_the_event_kinds_error_is_tied_to_their_fieldset(make_client: Any) -> None:
    """An event kind the catalog does not know: the error is named by the group of checkboxes."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        csrf = _csrf(client.get("/console/partners/new", cookies=cookies).text)
        data = {"name": "Kinds", "url": "https://example.com/hook", "events": "no.such.kind", "csrf": csrf}
        response = client.post("/console/partners", data=data, headers=ORIGIN, cookies=cookies)
    assert response.status_code == 400
    assert '<fieldset aria-describedby="events-error">' in response.text
    assert _elements(response.text).text["events-error"] == "Name one of the event kinds in the catalog."


def test_a_publish_refused_is_tied_to_the_payload(make_client: Any) -> None:
    """An event the catalog refuses: the list of what is wrong is named by the payload's text box,
    which is invalid."""
    with make_client(admin_token=TOKEN) as client:
        cookies = _session(_sign_in(client))
        csrf = _csrf(client.get("/console/events/new", cookies=cookies).text)
        data = {"event": "platform.milestone", "payload": '{"value": "many"}', "csrf": csrf}
        response = client.post("/console/events", data=data, headers=ORIGIN, cookies=cookies)
    assert response.status_code == 400
    _tied(response.text, "payload", "payload-error", invalid=True)
    assert '<div class="error" role="alert" id="payload-error">\n  <p>Nothing was published:</p>' in response.text


def test_a_wrong_token_is_tied_to_the_token_field(make_client: Any) -> None:
    """A wrong admin token: the alert is named by the token field, which is invalid."""
    with make_client(admin_token=TOKEN) as client:
        response = _sign_in(client, token="wrong")
    assert response.status_code == 401
    assert _tied(response.text, "token", "token-error", invalid=True) == "That is not the admin token."


@pytest.mark.parametrize(
    ("options", "status", "message"),
    [
        ({}, 429, "Too many wrong tokens from this address; try again in "),
        (
            {"rate_limit_storage": "redis://127.0.0.1:9/0"},
            503,
            "Signing in is briefly unavailable; try again shortly.",
        ),
    ],
    ids=["throttled", "unavailable"],
)
def test_a_refused_sign_in_is_tied_to_the_token_field_but_not_invalid(
    make_client: Any, options: dict[str, Any], status: int, message: str
) -> None:
    """Throttled (429) or unable to count (503): the alert is named by the token field, which is
    not marked invalid (the token given may be right; the answer says when to try again)."""
    with make_client(admin_token=TOKEN, **options) as client:
        responses = [_sign_in(client, token="wrong") for _ in range(11 if status == 429 else 1)]
    response = responses[-1]
    assert response.status_code == status
    assert _tied(response.text, "token", "token-error", invalid=False).startswith(message)
