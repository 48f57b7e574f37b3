"""POST /api/waitlist against what a hostile or careless client sends: forwarded addresses proved by
a shared secret, bodies of thousands of unknown members, control characters, padded values."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest

from service.app import create_app
from service.clock import ManualClock
from service.errors import FIELD_ERRORS_SHOWN, FieldError, shown
from service.settings import Settings
from service.text import LINE_MESSAGE, LINE_PATTERN, LINES_MESSAGE, LINES_PATTERN, line_fault, lines_fault
from service.waitlist import WaitlistRequest
from tests.conftest import Client
from tests.test_waitlist import FORM, OK, field, invalid, post_json, stored_rows

PROXY_VARIABLES = ("SANIC_PROXIES_COUNT", "SANIC_REAL_IP_HEADER", "SANIC_FORWARDED_SECRET")
BODY = {"email": "a@example.com", "intent": "claim"}


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# --- A: a Forwarded element carrying SANIC_FORWARDED_SECRET names the client ----------------------


def _with_secret(monkeypatch, sqlite_url, secret, **options) -> Client:
    monkeypatch.setenv("SANIC_FORWARDED_SECRET", secret)
    settings = Settings(database_url=sqlite_url, waitlist_rate_limit="1/minute", **options)
    return Client(create_app(settings, clock=ManualClock()))  # the limiter's windows stand still


def _statuses(client: Client, headers: list[dict[str, str]]) -> list[int]:
    return [client.post("/api/waitlist", json=BODY, headers=sent).status_code for sent in headers]


@pytest.mark.parametrize(
    ("secret", "element"),
    [
        ("s3cret", 'for="{address}";secret=s3cret'),
        ("s3cret", "for={address};proto=https;by=s3cret"),
        ("S3cret", "for={address};by=S3cret"),  # Sanic lowercases `by`, as an address
        ("_S3cret", "by=_S3cret;for={address}"),  # ...unless it is an obfuscated name
    ],
)
def test_the_forwarded_secret_alone_gives_each_client_its_own_allowance(
    monkeypatch, sqlite_url, rate_limit_storage, secret, element
):
    """With SANIC_FORWARDED_SECRET and no SERVICE_TRUSTED_PROXIES (a start the service allows: the
    secret proves the proxy), the client a Forwarded element with the secret names is the client.
    Three clients behind the proxy each get their allowance; a second registration of one is 429."""
    with _with_secret(monkeypatch, sqlite_url, secret, **rate_limit_storage) as client:
        forwarded = [{"forwarded": element.format(address=f"203.0.113.{n}")} for n in (1, 2, 3, 1)]
        assert _statuses(client, forwarded) == [200, 200, 200, 429]


@pytest.mark.parametrize(
    "element", ['for="{address}"', 'for="{address}";secret=wrong', 'for="{address}";secret=S3CRET']
)
def test_a_forwarded_element_without_the_secret_changes_nothing(monkeypatch, sqlite_url, rate_limit_storage, element):
    """Without the secret, or with another, the element is ignored: the peer is the client, and
    inventing an address on each request shares one allowance."""
    with _with_secret(monkeypatch, sqlite_url, "s3cret", **rate_limit_storage) as client:
        forwarded = [{"forwarded": element.format(address=f"203.0.113.{n}")} for n in (1, 2, 3)]
        assert _statuses(client, forwarded) == [200, 429, 429]


def test_with_the_secret_a_forwarded_for_from_an_untrusted_peer_still_changes_nothing(
    monkeypatch, sqlite_url, rate_limit_storage
):
    """The secret vouches for Forwarded elements only: with SANIC_PROXIES_COUNT too, an
    X-Forwarded-For from a peer that is not a trusted proxy is still not believed."""
    monkeypatch.setenv("SANIC_PROXIES_COUNT", "1")
    with _with_secret(
        monkeypatch, sqlite_url, "s3cret", trusted_proxies=("192.0.2.10",), **rate_limit_storage
    ) as client:
        invented = [{"x-forwarded-for": f"198.51.100.{n}"} for n in (1, 2)]
        proved = [{"forwarded": f"for=203.0.113.{n};secret=s3cret"} for n in (1, 2)]
        assert _statuses(client, invented) == [200, 429]
        assert _statuses(client, proved) == [200, 200]


# --- B: an error answer names at most FIELD_ERRORS_SHOWN fields ------------------------------------


def _many_unknown_members(count: int) -> dict[str, str]:
    return {str(n): "" for n in range(count)}


@pytest.mark.parametrize(("as_form", "count"), [(True, 9000), (False, 5000)])
def test_thousands_of_unknown_members_are_answered_briefly(make_client, as_form, count):
    """A form of 11,000 unknown members (61 KB) was answered with every one of them, 875 KB. Now
    the first 20 field errors, then one entry in the same shape saying how many more; the answer
    stays the documented error shape."""
    members = _many_unknown_members(count)
    with make_client() as client:
        if as_form:
            response = client.post("/api/waitlist", content=urlencode(members).encode(), headers=FORM)
        else:
            response = post_json(client, members)
    assert response.status_code == 400
    errors = response.json["errors"]
    assert len(response.content) < 3000
    assert len(errors) == FIELD_ERRORS_SHOWN + 1
    # In field order, as ever: the unknown members "0", "1", "10", "100", ... come first.
    assert errors[:3] == [field(name, "unknown_field", "This field is not accepted.") for name in ("0", "1", "10")]
    # The unknown members, and email and intent missing, less the 20 shown.
    assert errors[-1] == field("body", "more_errors", f"{count + 2 - 20} more fields are at fault.")
    assert set(response.json) == {"ok", "message", "errors"}
    assert all(set(error) == {"field", "code", "message"} for error in errors)


def test_a_refusal_within_the_bound_is_answered_whole(make_client):
    """Up to 20 field errors, every one is shown and none says "more"."""
    with make_client() as client:
        response = post_json(client, {**BODY, **_many_unknown_members(FIELD_ERRORS_SHOWN)})
    assert response.status_code == 400
    assert [error["field"] for error in response.json["errors"]] == sorted(str(n) for n in range(20))


def test_one_past_the_bound_is_one_more():
    """One field past the bound: the 20 and a sentence in the singular."""
    errors = [FieldError(f"f{n}", "unknown_field", "This field is not accepted.") for n in range(21)]
    assert shown(errors) == [*errors[:20], FieldError("body", "more_errors", "1 more field is at fault.")]
    assert shown(errors[:20]) == errors[:20]


# --- C: project and message refuse what rewrites a terminal or reorders text ----------------------

HOSTILE = "\x1b]0;pwned\x07\x1b[31mRED\u202eevil"


@pytest.mark.parametrize(
    "project",
    [HOSTILE, "a\nb", "a\tb", "a\rb", "a\x85b", "a\x7fb", "\u2066x\u2069", "a\u200fb", "a\u2028b", "x\x1b", "a\u061cb"],
)
def test_a_project_is_one_line_without_controls(make_client, sqlite_url, project):
    """A project is a label (the console, the CSV export, terminals), held to the rule partner names
    follow: no control character, line break or mark that reorders text. 400 naming it; nothing stored."""
    with make_client() as client:
        response = post_json(client, {**BODY, "project": project})
        stored = client.run(stored_rows(sqlite_url))
    assert (response.status_code, response.json) == (
        400,
        invalid(field("project", "invalid_characters", LINE_MESSAGE)),
    )
    assert stored == []


@pytest.mark.parametrize(
    "message",
    ["line1\r\nline2\x1b[2J", HOSTILE, "a\rb", "a\x0bb", "\x9b31m", "a\u202db", "a\u2029b", "a\u061cb"],
)
def test_a_message_refuses_controls_but_line_breaks_and_tabs(make_client, sqlite_url, message):
    """A message may run over lines, but holds no other control character (a carriage return alone
    overwrites what a terminal showed) and no mark that reorders text."""
    with make_client() as client:
        response = post_json(client, {**BODY, "message": message})
        stored = client.run(stored_rows(sqlite_url))
    assert (response.status_code, response.json) == (
        400,
        invalid(field("message", "invalid_characters", LINES_MESSAGE)),
    )
    assert stored == []


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("gm\nfrom the team", "gm\nfrom the team"),
        ("line one\r\nline two\r\n", "line one\r\nline two"),  # a browser's text area sends CRLF
        ("a\tb", "a\tb"),
        ("é 🐸 \u2018quoted\u2019 — right-to-left: שלום", "é 🐸 \u2018quoted\u2019 — right-to-left: שלום"),
    ],
)
def test_a_message_keeps_its_line_breaks_and_tabs(make_client, sqlite_url, message, kept):
    """Line breaks (LF, or CRLF as a form sends them) and tabs are a message's own; text in any
    script, right-to-left included, is text."""
    with make_client() as client:
        response = client.post("/api/waitlist", content=urlencode({**BODY, "message": message}).encode(), headers=FORM)
        stored = client.run(stored_rows(sqlite_url))
    assert (response.status_code, response.json) == (200, OK)
    assert [row["message"] for row in stored] == [kept]


def test_nul_is_still_named_as_nul(make_client):
    """The NUL rule comes first, with its own sentence, as before."""
    with make_client() as client:
        response = post_json(client, {**BODY, "project": "a\x00b", "message": "a\x00b"})
    nul = "This field contains a NUL character."
    assert response.json["errors"] == [
        field("message", "invalid_characters", nul),
        field("project", "invalid_characters", nul),
    ]


@pytest.mark.parametrize(
    ("member", "pattern", "fault"), [("project", LINE_PATTERN, line_fault), ("message", LINES_PATTERN, lines_fault)]
)
def test_the_published_schema_says_the_same(member, pattern, fault):
    """The request schema's pattern refuses exactly the characters the service refuses (every code
    point of the basic plane but surrogates, which UTF-8 JSON cannot hold, and CR with and without LF)."""
    schema = WaitlistRequest.model_json_schema()["properties"][member]
    assert schema["pattern"] == pattern
    samples = [f"a{chr(code)}b" for code in range(0x10000) if not 0xD800 <= code <= 0xDFFF]
    samples += ["a\r\nb", "a\rb", "a\n\rb", "a\r", "\r\n"]
    disagree = [s for s in samples if (re.fullmatch(pattern, s) is None) != (fault(s) is not None)]
    assert disagree == []


# --- F: lengths count what is stored, after trimming --------------------------------------------

ADDRESS = "a" * 64 + "@" + "b" * 63 + "." + "c" * 63 + "." + "d" * 57 + ".com"  # 254 characters


@pytest.mark.parametrize(
    ("body", "row"),
    [
        ({**BODY, "project": "a" * 120 + " "}, ("a@example.com", "a" * 120, None)),
        ({**BODY, "project": "\t" + "é" * 120 + "\n"}, ("a@example.com", "é" * 120, None)),
        ({**BODY, "message": "  " + "🚀" * 600 + "\r\n"}, ("a@example.com", None, "🚀" * 600)),
        ({**BODY, "email": "  " + ADDRESS + " "}, (ADDRESS, None, None)),
        # Blank is "not given" whatever its length: trimmed, nothing is left.
        ({**BODY, "project": " " * 500, "message": "\t" * 601}, ("a@example.com", None, None)),
    ],
)
def test_a_value_at_its_limit_once_trimmed_is_stored(make_client, sqlite_url, body, row):
    """A value padded past its limit with spaces the service trims anyway is within it: 200, stored
    trimmed (it was 400 too_long, counted before trimming)."""
    assert len(ADDRESS) == 254
    with make_client() as client:
        response = post_json(client, body)
        stored = client.run(stored_rows(sqlite_url))
    assert (response.status_code, response.json) == (200, OK)
    assert [(r["email"], r["project"], r["message"]) for r in stored] == [row]


@pytest.mark.parametrize(
    ("body", "name", "limit"),
    [
        ({**BODY, "project": " " + "a" * 121 + " "}, "project", 120),
        ({**BODY, "message": "x" * 601}, "message", 600),
        ({**BODY, "email": " " + "a" + ADDRESS + " "}, "email", 254),
        ({**BODY, "email": "a" * 60_000}, "email", 254),
    ],
)
def test_a_value_past_its_limit_once_trimmed_is_still_too_long(make_client, body, name, limit):
    """What is still too long after trimming is refused as before, with its limit."""
    with make_client() as client:
        response = post_json(client, body)
    assert (response.status_code, response.json) == (
        400,
        invalid(field(name, "too_long", f"This field must be at most {limit} characters.")),
    )


def test_the_schema_still_publishes_the_limits():
    """maxLength stays in the published schema (of what is sent; trimming is the service's leniency)."""
    properties = WaitlistRequest.model_json_schema()["properties"]
    assert [properties[name]["maxLength"] for name in ("email", "project", "message")] == [254, 120, 600]
