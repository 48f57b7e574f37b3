"""A delivery's payload as the console shows it: controls, format characters (the bidi marks and
overrides among them) and the line and paragraph separators as JSON escapes, so the text on screen
is the text stored, still JSON meaning the same thing; what is stored, and sent, is unchanged."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from typing import Any

import pytest
from markupsafe import escape

from service.clock import ManualClock, format_timestamp
from service.db.summaries import pretty
from service.text import LINE_PATTERN
from tests.test_console import TOKEN, _session, _sign_in

BEARER = {"authorization": f"Bearer {TOKEN}"}
RLO, PDF = "\u202e", "\u202c"  # right-to-left override, pop directional formatting
SPOOFED = f"{RLO}00.001${PDF}"  # reads "$100.00" on screen


# Controls, format characters, the line and paragraph separators, surrogates.
HIDDEN = ("Cc", "Cf", "Zl", "Zp", "Cs")
# What the service's rule for one-line text refuses (``service.text.line_fault``; the pattern lists
# code points of the BMP only).
LABEL_REFUSED = re.compile(LINE_PATTERN)


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN or not LABEL_REFUSED.match(char)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ({"milestone": SPOOFED}, '{\n  "milestone": "\\u202e00.001$\\u202c"\n}'),
        ({"m": "a\u2066b\u2069\u200fc"}, '{\n  "m": "a\\u2066b\\u2069\\u200fc"\n}'),
        ({"m": "zero\u200bwidth\ufeff"}, '{\n  "m": "zero\\u200bwidth\\ufeff"\n}'),
        (  # tab and line feed as JSON's own escapes, as before
            {"m": "del\x7f c1\x85 lines\u2028\u2029 tab\t lf\n"},
            '{\n  "m": "del\\u007f c1\\u0085 lines\\u2028\\u2029 tab\\t lf\\n"\n}',
        ),
        ({"m": "tag\U000e0041"}, '{\n  "m": "tag\\udb40\\udc41"\n}'),  # beyond the BMP: a surrogate pair
        ({"m": "lone\udc00"}, '{\n  "m": "lone\\udc00"\n}'),  # as JSON can spell one
        ({"k\u202e": ["é", "漢", "👍"]}, '{\n  "k\\u202e": [\n    "é",\n    "漢",\n    "👍"\n  ]\n}'),
    ],
    ids=["override", "isolates", "zero-width", "controls", "tag", "surrogate", "key-and-letters"],
)
def test_a_payload_shows_hidden_characters_as_escapes(stored: Any, shown: str) -> None:
    """Each such character is its ``\\uXXXX`` escape; letters, accents and emoji are shown as they
    are; the indented text is JSON that reads back as what was stored."""
    payload = json.dumps(stored, ensure_ascii=False)
    assert pretty(payload) == shown
    assert json.loads(pretty(payload)) == stored


def test_no_hidden_character_is_shown_as_it_is() -> None:
    """Every control, format character and separator Unicode knows, and every character the
    service refuses in a one-line label: none is left in the text shown but the indented JSON's
    own line feeds, and it reads back as stored."""
    # But the surrogates: a lone one is a case above; in a row, JSON would read two as one character.
    every = (char for char in map(chr, range(sys.maxunicode + 1)) if unicodedata.category(char) != "Cs")
    stored = {"every": "".join(char for char in every if _hidden(char))}
    shown = pretty(json.dumps(stored))
    assert [char for char in shown if _hidden(char) and char != "\n"] == []
    assert json.loads(shown) == stored


def test_text_that_is_not_json_shows_them_escaped_too() -> None:
    """A body that is not JSON is shown as stored, its lines and tabs kept, the rest escaped alike."""
    assert pretty(f"not json\t{SPOOFED}\r\n") == "not json\t\\u202e00.001$\\u202c\\u000d\n"


def test_the_delivery_page_shows_the_escapes_and_the_partner_gets_the_text(
    make_client: Any, clock: ManualClock
) -> None:
    """On the delivery's page the override is ``\\u202e``, never the character; the event as stored
    (what the partner is sent) still holds it."""
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        made = client.post(
            "/admin/partners", json={"name": "P", "url": "http://127.0.0.1:9/hook"}, headers=BEARER
        )
        assert made.status_code == 201, made.text
        event = {
            "event": "platform.milestone",
            "eventId": "evt_spoofed",
            "occurredAt": format_timestamp(clock()),
            "milestone": SPOOFED,
            "value": 1,
        }
        published = client.post("/admin/events", json=event, headers=BEARER)
        assert published.status_code in (200, 201, 202), published.text
        (delivery,) = client.get("/admin/deliveries", headers=BEARER).json["deliveries"]
        cookies = _session(_sign_in(client))
        page = client.get(f"/console/deliveries/{delivery['id']}", cookies=cookies)
        stored = client.run(_stored_payload(client.app, "evt_spoofed"))
    assert page.status_code == 200
    assert RLO not in page.text and PDF not in page.text
    assert str(escape('"milestone": "\\u202e00.001$\\u202c"')) in page.text
    assert json.loads(stored)["milestone"] == SPOOFED


async def _stored_payload(app: Any, event_id: str) -> str:
    from sqlalchemy import select

    from service.db.tables import events

    async with app.ctx.engine.connect() as conn:
        payload: str = await conn.scalar(select(events.c.payload).where(events.c.id == event_id))
    return payload


def test_the_waitlist_page_shows_hidden_characters_of_a_registration_as_escapes(make_client: Any) -> None:
    """A project or message may hold format characters the intake accepts (a zero-width space, a
    byte order mark, tags): on the console they show as their escapes, so "Acme" and "Acme\u200b"
    are told apart; line breaks stay line breaks, and what is stored is unchanged."""
    project, message = "Acme\u200b", "first line\r\nsecond \ufeff\U000e0041"
    with make_client(admin_token=TOKEN) as client:
        sent = client.post(
            "/api/waitlist",
            json={"email": "a@example.com", "intent": "claim", "project": project, "message": message},
        )
        assert sent.status_code == 200, sent.text
        page = client.get("/console/waitlist", cookies=_session(_sign_in(client)))
        (row,) = client.get("/admin/waitlist", headers=BEARER).json["entries"]
    assert page.status_code == 200
    assert "\u200b" not in page.text and "\ufeff" not in page.text and "\U000e0041" not in page.text
    assert ">Acme\\u200b<" in page.text
    assert "first line\nsecond \\ufeff\\udb40\\udc41<" in page.text
    assert (row["project"], row["message"]) == (project, message)


def test_a_partner_name_with_hidden_characters_shows_them_as_escapes(make_client: Any) -> None:
    """A partner's name may hold a zero-width space: wherever the console names the partner (the
    list, its page and title, the deliveries' filter) it shows the escape, so "Acme" and
    "Acme\u200b" are told apart; the edit form keeps the name as stored, and so does the API."""
    name = "Acme\u200b"
    with make_client(admin_token=TOKEN, webhook_allow_private_urls=True) as client:
        made = client.post("/admin/partners", json={"name": name, "url": "http://127.0.0.1:9/hook"}, headers=BEARER)
        assert made.status_code == 201, made.text
        partner_id = made.json["id"]
        cookies = _session(_sign_in(client))
        pages = {
            path: client.get(path, cookies=cookies)
            for path in ("/console/partners", f"/console/partners/{partner_id}", "/console/deliveries")
        }
        form = client.get(f"/console/partners/{partner_id}/edit", cookies=cookies)
        listed = client.get(f"/admin/partners/{partner_id}", headers=BEARER).json
    for path, page in pages.items():
        assert page.status_code == 200, path
        assert "\u200b" not in page.text, path
        assert "Acme\\u200b" in page.text, path
    assert "<title>Acme\\u200b · Console</title>" in pages[f"/console/partners/{partner_id}"].text
    assert f'value="{name}"' in form.text
    assert listed["name"] == name
