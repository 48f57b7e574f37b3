"""Text the admin API stores is held to the registrations' rule: NUL or a lone surrogate is a 400."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st
from webhook_helpers import (
    AUTH,
    Receiver,
    Reply,
    deliveries,
    drain,
    milestone,
    onboard,
    publish,
    room_claimed,
    settings,
)

from service.app import create_app
from service.settings import Settings
from service.text import NOT_UNICODE_MESSAGE, NUL_MESSAGE, readable, text_fault, unicode_only
from tests.conftest import Client

URL = "http://127.0.0.1:9/hook"
LINKS = {"event": "room.links.updated", "slug": "s", "roomUrl": "https://launchrooms.example/rooms/s"}


@pytest.mark.parametrize(
    ("value", "fault"),
    [
        ("plain", None),
        ("é 🐸", None),
        ("x\x00", NUL_MESSAGE),
        ("x\ud800", NOT_UNICODE_MESSAGE),
        ("\udfff", NOT_UNICODE_MESSAGE),
    ],
)
def test_text_fault(value: str, fault: str | None) -> None:
    """NUL and lone surrogates are named; everything UTF-8 carries passes."""
    assert text_fault(value) == fault


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        ("/admin/partners", {"name": "x\ud800", "url": URL}, "name", NOT_UNICODE_MESSAGE),
        ("/admin/partners", {"name": "x\x00", "url": URL}, "name", NUL_MESSAGE),
        ("/admin/partners", {"name": "P", "url": URL + "\ud800"}, "url", NOT_UNICODE_MESSAGE),
        ("/admin/partners", {"name": "P", "url": URL + "\x00"}, "url", NUL_MESSAGE),
        ("/admin/events", milestone("x\ud800"), "milestone", NOT_UNICODE_MESSAGE),
        ("/admin/events", milestone("x\x00"), "milestone", NUL_MESSAGE),
        ("/admin/events", milestone(eventId="evt\x00"), "eventId", NUL_MESSAGE),
        ("/admin/events", milestone(eventId="evt\udc00"), "eventId", NOT_UNICODE_MESSAGE),
        ("/admin/events", room_claimed(ticker="\x00"), "ticker", NUL_MESSAGE),
        ("/admin/events", {**LINKS, "changedFields": ["x", "a\x00"]}, "changedFields.1", NUL_MESSAGE),
        ("/admin/deliveries?partner=%00", None, "partner", NUL_MESSAGE),
        ("/admin/deliveries?event=evt%00", None, "event", NUL_MESSAGE),
    ],
)
def test_admin_text_that_cannot_be_stored_is_400(
    database_url: str, clock: Any, path: str, body: dict[str, Any] | None, field: str, message: str
) -> None:
    """The field is named, nothing is stored, and the database never sees the value (no 500)."""
    app = create_app(Settings(database_url=database_url, **settings()), clock=clock)
    with Client(app) as client:
        if body is None:
            response = client.get(path, headers=AUTH)
        else:
            # json.dumps escapes a lone surrogate as "\ud800", which is how a client can send one.
            raw = json.dumps(body).encode()
            response = client.post(path, content=raw, headers={**AUTH, "content-type": "application/json"})
        partners = client.get("/admin/partners", headers=AUTH).json["partners"]
        deliveries = client.get("/admin/deliveries", headers=AUTH).json["deliveries"]
    assert (response.status_code, response.json) == (
        400,
        {
            "ok": False,
            "message": "The request is not valid.",
            "errors": [{"field": field, "code": "invalid_characters", "message": message}],
        },
    )
    assert (partners, deliveries) == ([], [])


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ok", "ok"),
        ("é 🐸", "é 🐸"),
        ("a\x00b", "a\ufffdb"),
        ("\x1b[31mred\n", "\ufffd[31mred\ufffd"),
        ("\x85\x7f\ud800", "\ufffd" * 3),
        ("pay\u202egnp.exe", "pay\ufffdgnp.exe"),
        ("a\u2066b\u2069\u2028c\u200f", "a\ufffdb\ufffd\ufffdc\ufffd"),
        ("a\u061cb", "a\ufffdb"),  # the Arabic letter mark, the third implicit directional mark
        ("x\u200by\ufeffz\u2060\U000e0041\u00ad", "x\ufffdy\ufffdz\ufffd\ufffd\ufffd"),
    ],
)
def test_readable(text: str, shown: str) -> None:
    """Control characters, the marks that reorder text, invisible format characters (zero-width,
    byte order mark, tags) and lone surrogates become U+FFFD; every other character is kept."""
    assert readable(text) == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ok", "ok"),
        ("é 🐸\n", "é 🐸\n"),
        ("a\x00b", "a\ufffdb"),
        ("\x1b[31m\ud800\udfff", "\x1b[31m\ufffd\ufffd"),
    ],
)
def test_unicode_only(text: str, shown: str) -> None:
    """NUL and lone surrogates become U+FFFD; line breaks and other controls are kept."""
    assert unicode_only(text) == shown
    assert text_fault(unicode_only(text)) is None


@given(st.text(alphabet=st.characters(codec=None), max_size=40))
@examples(max_examples=500, deadline=None)
def test_readable_marks_exactly_the_characters_that_hide_or_reorder_text(text: str) -> None:
    """Character by character: a control, a mark that reorders text, a line or paragraph separator,
    a format character or a lone surrogate is U+FFFD; every other character is itself."""
    hidden = {"Cc", "Cf", "Zl", "Zp", "Cs"}
    reorders = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}

    def shown(char: str) -> str:
        marked = unicodedata.category(char) in hidden or ord(char) in reorders or 0x7F <= ord(char) < 0xA0
        return "\ufffd" if marked else char

    assert readable(text) == "".join(map(shown, text))


def test_a_partner_answer_with_control_characters_is_logged_readable(database_url: str, clock: Any) -> None:
    """A reply holding NUL and an escape sequence is recorded as an ordinary failed attempt."""
    app = create_app(Settings(database_url=database_url, **settings()), clock=clock)
    with Receiver() as receiver, Client(app) as client:
        onboard(client, receiver.url())
        receiver.script("/hook", Reply(500, "bad\x00reply\x1b[2J"))
        publish(client, room_claimed())
        assert drain(client) == 1
        [delivery] = deliveries(client)
    [attempt] = delivery["attempts"]
    assert (delivery["status"], attempt["statusCode"], attempt["responseExcerpt"]) == (
        "pending",
        500,
        "bad\ufffdreply\ufffd[2J",
    )
