"""POST /api/waitlist through real HTTP: every rule of docs/architecture.md "Waitlist intake"."""

from __future__ import annotations

import codecs
import json
from encodings.aliases import aliases
from typing import Any

import pytest
from sqlalchemy import select

from service.bodies import UNREADABLE_JSON, charset_named
from service.db.engine import create_engine
from service.db.tables import registrations
from service.waitlist import ACCEPTED

OK = {"ok": True, "message": ACCEPTED}
INVALID = "The waitlist registration is not valid."
FORM = {"content-type": "application/x-www-form-urlencoded"}
JSON_TYPE = {"content-type": "application/json"}


def field(name: str, code: str, message: str) -> dict[str, str]:
    return {"field": name, "code": code, "message": message}


def invalid(*errors: dict[str, str], message: str = INVALID) -> dict[str, Any]:
    return {"ok": False, "message": message, "errors": list(errors)}


async def stored_rows(url: str) -> list[dict[str, Any]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            result = await conn.execute(select(registrations).order_by(registrations.c.id))
            return [dict(row._mapping) for row in result]
    finally:
        await engine.dispose()


def post_json(client: Any, body: Any) -> Any:
    return client.post("/api/waitlist", content=json.dumps(body).encode(), headers=JSON_TYPE)


VALID = [
    ({"email": "ada@example.com", "intent": "claim"}, ("ada@example.com", "claim", None, None)),
    (
        {"email": "  Bob@Example.com ", "intent": "member", "project": "PEPE", "message": "gm"},
        ("Bob@Example.com", "member", "PEPE", "gm"),
    ),
    ({"email": "c@example.com", "intent": "arcade", "project": "é" * 120}, ("c@example.com", "arcade", "é" * 120, None)),
    ({"email": "d@example.com", "intent": "claim", "message": "🚀" * 600}, ("d@example.com", "claim", None, "🚀" * 600)),
    ({"email": "e@example.com", "intent": "claim", "project": "", "message": "  "}, ("e@example.com", "claim", None, None)),
    ({"email": "f@example.com", "intent": "claim", "project": " " * 120}, ("f@example.com", "claim", None, None)),
    # Blank is "not given" whatever its length: lengths are counted once trimmed, and nothing is left.
    (
        {"email": "g@example.com", "intent": "claim", "project": " " * 500, "message": "\t" * 601},
        ("g@example.com", "claim", None, None),
    ),
]


@pytest.mark.parametrize(("body", "row"), VALID)
def test_valid_json_registration_is_stored(make_client, database_url, body, row):
    """A valid JSON registration answers 200 and its row is committed, on SQLite and PostgreSQL."""
    with make_client(database_url=database_url) as client:
        response = post_json(client, body)
        assert (response.status_code, response.json) == (200, OK)
        rows = client.run(stored_rows(database_url))
    assert [(r["email"], r["intent"], r["project"], r["message"]) for r in rows] == [row]
    assert rows[0]["email_key"] == row[0].lower()
    assert rows[0]["created_at"].tzinfo is not None


@pytest.mark.parametrize(("body", "row"), VALID)
def test_valid_form_registration_is_stored(make_client, body, row, sqlite_url):
    """The same registrations sent as a URL-encoded form are stored identically."""
    from urllib.parse import urlencode

    with make_client() as client:
        response = client.post("/api/waitlist", content=urlencode(body).encode(), headers=FORM)
        assert (response.status_code, response.json) == (200, OK)
        rows = client.run(stored_rows(sqlite_url))
    assert [(r["email"], r["intent"], r["project"], r["message"]) for r in rows] == [row]


MISSING = "This field is required."
STRING = "This field must be a string."
CHOICE = "This field must be one of: claim, member, arcade."
UNKNOWN = "This field is not accepted."
BAD_EMAIL = "This is not a valid email address."

INVALID_JSON_BODIES = [
    ({}, invalid(field("email", "missing", MISSING), field("intent", "missing", MISSING))),
    ({"email": "a@example.com"}, invalid(field("intent", "missing", MISSING))),
    ({"email": "not-an-email", "intent": "claim"}, invalid(field("email", "invalid_email", BAD_EMAIL))),
    ({"email": "a@b", "intent": "claim"}, invalid(field("email", "invalid_email", BAD_EMAIL))),
    ({"email": "", "intent": "claim"}, invalid(field("email", "invalid_email", BAD_EMAIL))),
    ({"email": "a@example.com", "intent": "buy"}, invalid(field("intent", "invalid_choice", CHOICE))),
    ({"email": "a@example.com", "intent": "Claim"}, invalid(field("intent", "invalid_choice", CHOICE))),
    (
        {"email": "a@example.com", "intent": "claim", "project": "x" * 121},
        invalid(field("project", "too_long", "This field must be at most 120 characters.")),
    ),
    (
        {"email": "a@example.com", "intent": "claim", "message": "é" * 601},
        invalid(field("message", "too_long", "This field must be at most 600 characters.")),
    ),
    ({"email": "a@example.com", "intent": "claim", "ref": "x"}, invalid(field("ref", "unknown_field", UNKNOWN))),
    ({"email": None, "intent": "claim"}, invalid(field("email", "invalid_type", STRING))),
    ({"email": "a@example.com", "intent": "claim", "project": None}, invalid(field("project", "invalid_type", STRING))),
    ({"email": 42, "intent": "claim"}, invalid(field("email", "invalid_type", STRING))),
    ({"email": ["a@example.com"], "intent": "claim"}, invalid(field("email", "invalid_type", STRING))),
    ({"email": "a@example.com", "intent": True}, invalid(field("intent", "invalid_choice", CHOICE))),
    (
        {"email": "a@example.com", "intent": "claim", "project": "a\x00b"},
        invalid(field("project", "invalid_characters", "This field contains a NUL character.")),
    ),
]


@pytest.mark.parametrize(("body", "expected"), INVALID_JSON_BODIES)
def test_invalid_json_member_is_400_with_field_errors(make_client, sqlite_url, body, expected):
    """Each invalid member answers 400 naming the field, and nothing is stored."""
    with make_client() as client:
        response = post_json(client, body)
        assert (response.status_code, response.json) == (400, expected)
        assert client.run(stored_rows(sqlite_url)) == []


BODY_ERROR = "The request is not valid."
RAW_BODIES = [
    (b"[]", JSON_TYPE, field("body", "invalid_type", "The body must be a JSON object.")),
    (b'"a@example.com"', JSON_TYPE, field("body", "invalid_type", "The body must be a JSON object.")),
    (b"null", JSON_TYPE, field("body", "invalid_type", "The body must be a JSON object.")),
    (b"{", JSON_TYPE, field("body", "invalid_json", "The body is not valid JSON.")),
    (b'{"email": NaN}', JSON_TYPE, field("body", "invalid_json", "The body is not valid JSON.")),
    # Valid JSON that Python will not read: said so, not called invalid.
    (b'{"email": ' + b"9" * 5000 + b', "intent": "claim"}', JSON_TYPE, field("body", "invalid_json", UNREADABLE_JSON)),
    (b'{"email": ' + b"[" * 30000 + b"]" * 30000 + b"}", JSON_TYPE, field("body", "invalid_json", UNREADABLE_JSON)),
    (b'{"email": "\xff@example.com", "intent": "claim"}', JSON_TYPE, field("body", "invalid_encoding", "The body is not valid UTF-8.")),
    (b"", JSON_TYPE, field("body", "empty", "A request body is required.")),
    (b"  ", FORM, field("body", "empty", "A request body is required.")),
    (
        b'{"email": "a@example.com", "email": "b@example.com", "intent": "claim"}',
        JSON_TYPE,
        field("email", "repeated", "This member appears more than once."),
    ),
    (b"email=a%40example.com&email=b%40example.com&intent=claim", FORM, field("email", "repeated", "This field appears more than once.")),
    # Repeated inside a nested value: named by its path, not as a top-level member it is not.
    (
        b'{"email": "a@example.com", "intent": "claim", "project": {"x": 1, "x": 2}}',
        JSON_TYPE,
        field("project.x", "repeated", "This member appears more than once."),
    ),
    (
        b'{"email": "a@example.com", "project": [{"intent": 1, "intent": 2}], "intent": "claim"}',
        JSON_TYPE,
        field("project.0.intent", "repeated", "This member appears more than once."),
    ),
    (b"email=a%FF%40example.com&intent=claim", FORM, field("body", "invalid_encoding", "The form is not valid UTF-8.")),
    (
        b"email=a%E9%40example.com&intent=claim",
        {"content-type": f"{FORM['content-type']}; charset=us-ascii"},
        field("body", "invalid_encoding", "The form is not valid US-ASCII."),
    ),
]


@pytest.mark.parametrize(("raw", "headers", "error"), RAW_BODIES)
def test_malformed_body_is_400(make_client, raw, headers, error):
    """Bodies that are not one JSON object or one clean form answer 400 in the error shape."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=raw, headers=headers)
    assert (response.status_code, response.json) == (400, invalid(error, message=BODY_ERROR))


def test_lone_surrogate_is_refused_not_stored(make_client, database_url):
    """A JSON string escape that is not Unicode (a lone surrogate) is a 400, never a 500."""
    raw = b'{"email": "a@example.com", "intent": "claim", "message": "x\\ud800y"}'
    with make_client(database_url=database_url) as client:
        response = client.post("/api/waitlist", content=raw, headers=JSON_TYPE)
        assert response.status_code == 400
        assert response.json["errors"] == [
            field("message", "invalid_characters", "This field contains characters that are not valid Unicode.")
        ]
        assert client.run(stored_rows(database_url)) == []


def test_form_field_types_are_checked_like_json(make_client):
    """A form carries only strings, so unknown members and bad intents are the only type errors."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=b"email=a%40example.com&intent=vip&x=1", headers=FORM)
    assert (response.status_code, response.json) == (
        400,
        invalid(field("intent", "invalid_choice", CHOICE), field("x", "unknown_field", UNKNOWN)),
    )


UNSUPPORTED = {"ok": False, "message": "Send application/json or application/x-www-form-urlencoded."}
FORM_CHARSETS = {"ok": False, "message": "Send the form in UTF-8, US-ASCII or ISO-8859-1."}


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"content-type": "text/plain"}, UNSUPPORTED),
        ({"content-type": "multipart/form-data; boundary=x"}, UNSUPPORTED),
        ({"content-type": "application/xml"}, UNSUPPORTED),
        ({}, UNSUPPORTED),
        ({"content-type": "application/json; charset=latin-1"}, {"ok": False, "message": "Send JSON in UTF-8."}),
        ({"content-type": "application/json; charset=no-such"}, {"ok": False, "message": "Send JSON in UTF-8."}),
        ({"content-type": f"{FORM['content-type']}; charset=shift_jis"}, FORM_CHARSETS),
        ({"content-type": f"{FORM['content-type']}; charset=utf-16"}, FORM_CHARSETS),
    ],
)
def test_other_content_types_are_415(make_client, headers, body):
    """Anything but JSON (in UTF-8) or a URL-encoded form (in UTF-8, US-ASCII or ISO-8859-1)
    answers 415."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=b'{"email":"a@example.com","intent":"claim"}', headers=headers)
    assert (response.status_code, response.json) == (415, body)


LABELS = [
    *aliases,
    *(label.upper() for label in aliases),
    *(label.replace("_", "-") for label in aliases),
    "UTF-8", "utf 8", "ISO-8859-1", "ISO_8859-1:1987", "Latin-1", "US-ASCII", "ANSI_X3.4-1968",
    "utf-8-sig", "utf-16", "cp1252", "koi8-r", "no-such", "utf", "8859",
]


def _looked_up(label: str) -> str | None:
    """What ``codecs.lookup`` names ``label``, of the three charsets a body may be in."""
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return name if name in ("utf-8", "ascii", "iso8859-1") else None


def test_a_charset_label_names_what_pythons_codecs_name_it():
    """The body's charset is read from a table, never by ``codecs.lookup`` (which raises on a NUL
    and remembers every label it missed), yet names what ``codecs.lookup`` would of the three a body
    may be in, for every spelling Python knows, and nothing for any other."""
    named = {label: charset_named(label.lower()) for label in LABELS}
    assert named == {label: _looked_up(label) for label in LABELS}
    assert sum(name is not None for name in named.values()) > 60


@pytest.mark.parametrize("charset", ["UTF-8", "US-ASCII"])
def test_json_labelled_utf8_or_ascii_is_accepted(make_client, charset):
    """`application/json; charset=UTF-8` is the same as plain JSON, and so is US-ASCII (ASCII is UTF-8)."""
    with make_client() as client:
        response = client.post(
            "/api/waitlist",
            content=b'{"email":"a@example.com","intent":"claim"}',
            headers={"content-type": f"application/json; charset={charset}"},
        )
    assert (response.status_code, response.json) == (200, OK)


@pytest.mark.parametrize(
    ("raw", "charset", "project"),
    [
        (b"email=a%40example.com&intent=claim&project=Caf%E9", "ISO-8859-1", "Caf\u00e9"),
        (b"email=a%40example.com&intent=claim&project=Caf%E9", "latin1", "Caf\u00e9"),
        (b"email=a%40example.com&intent=claim&project=Caf%C3%A9", "utf-8", "Caf\u00e9"),
        ("email=a%40example.com&intent=claim&project=Café".encode(), None, "Caf\u00e9"),
        (b"email=a%40example.com&intent=claim&project=Cafe", "us-ascii", "Cafe"),
    ],
)
def test_a_form_is_read_in_its_labelled_charset(make_client, database_url, raw, charset, project):
    """A form's percent-escapes are decoded in the charset its Content-Type names (Java's form
    helpers send ISO-8859-1), UTF-8 when it names none; the characters' own bytes, as curl sends
    them, are read the same way."""
    content_type = FORM["content-type"] + (f"; charset={charset}" if charset else "")
    with make_client(database_url=database_url) as client:
        response = client.post("/api/waitlist", content=raw, headers={"content-type": content_type})
        assert (response.status_code, response.json) == (200, OK)
        stored = client.run(stored_rows(database_url))
    assert [row["project"] for row in stored] == [project]


@pytest.mark.parametrize(
    "raw",
    [
        b"email=a%40example.com&intent=claim&",
        b"&email=a%40example.com&&intent=claim",
        b"email=a%40example.com&intent=claim&project",
    ],
)
def test_a_form_is_parsed_as_browsers_parse_one(make_client, raw):
    """Empty pieces (a trailing `&`) are skipped and a name without `=` has the empty value, as
    the URL standard's form parser has it: such a registration is stored, not refused."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=raw, headers=FORM)
    assert (response.status_code, response.json) == (200, OK)


def test_a_form_field_without_a_value_is_named_in_the_error(make_client):
    """`email` alone is an empty email: the answer names the field, as for `email=`."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=b"email&intent=claim", headers=FORM)
        empty = client.post("/api/waitlist", content=b"email=&intent=claim", headers=FORM)
    assert response.status_code == 400
    assert response.json == empty.json
    assert [error["field"] for error in response.json["errors"]] == ["email"]


@pytest.mark.parametrize("size", [64 * 1024 + 1, 200 * 1024])
def test_body_over_64_kib_is_413(make_client, size):
    """A body over 64 KiB answers 413 in the error shape."""
    body = b'{"email":"a@example.com","intent":"claim","message":"' + b"x" * size + b'"}'
    with make_client() as client:
        response = client.post("/api/waitlist", content=body, headers=JSON_TYPE)
    assert (response.status_code, response.json) == (413, {"ok": False, "message": "The request body is too large."})


def test_repeat_is_answered_alike_and_stored_once(make_client, database_url):
    """A repeat of (email, intent) gets the first answer, keeps one row, and updates only what it carries."""
    with make_client(database_url=database_url) as client:
        first = post_json(client, {"email": "Ada@Example.com", "intent": "claim", "project": "ADA", "message": "first"})
        again = post_json(client, {"email": "ada@example.COM", "intent": "claim", "message": "second"})
        other = post_json(client, {"email": "ada@example.com", "intent": "member"})
        assert [r.status_code for r in (first, again, other)] == [200, 200, 200]
        assert first.json == again.json == other.json == OK
        assert first.headers["content-length"] == again.headers["content-length"]
        rows = client.run(stored_rows(database_url))
    assert [(r["email"], r["intent"], r["project"], r["message"]) for r in rows] == [
        ("Ada@Example.com", "claim", "ADA", "second"),
        ("ada@example.com", "member", None, None),
    ]
    assert rows[0]["updated_at"] >= rows[0]["created_at"]


def test_concurrent_repeats_in_one_batch_store_one_row(make_client, database_url):
    """Many simultaneous registrations of one address share a group commit and still make one row."""
    import asyncio

    import httpx

    async def burst(base: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base) as http:
            bodies = [{"email": "same@example.com", "intent": "arcade", "message": f"m{i}"} for i in range(40)]
            answers = await asyncio.gather(*(http.post("/api/waitlist", json=b) for b in bodies))
            return [a.status_code for a in answers]

    with make_client(database_url=database_url) as client:
        port = client._client.port
        statuses = client.run(burst(f"http://127.0.0.1:{port}"))
        rows = client.run(stored_rows(database_url))
    assert statuses == [200] * 40
    assert len(rows) == 1 and rows[0]["message"].startswith("m")
