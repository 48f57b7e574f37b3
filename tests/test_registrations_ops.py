"""Registration erasure: DELETE /admin/waitlist?email=E and `python -m service waitlist erase`."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import unicodedata
import urllib.parse
from typing import Any

import pytest
from sqlalchemy import insert

from service.cli import main
from service.clock import ManualClock
from service.db import tables
from service.db.engine import create_engine
from service.db.registrations import email_key
from service.registrations_ops import RegistrationOperations
from service.waitlist import parse_registration

TOKEN = "erasure-admin-token-for-the-erasure-tests"
AUTH = {"authorization": f"Bearer {TOKEN}"}
REGISTERED = [
    {"email": "Ada@Example.com", "intent": "claim", "project": "ADA"},
    {"email": "ada@example.COM", "intent": "member"},
    {"email": "ADA@example.com", "intent": "arcade", "message": "gm"},
    {"email": "bob@example.com", "intent": "claim", "project": "BOB"},
    {"email": "adam@example.com", "intent": "member"},
]


def _register(client: Any) -> None:
    for body in REGISTERED:
        assert client.post("/api/waitlist", json=body).status_code == 200


def _emails(client: Any) -> list[tuple[str, str]]:
    entries = client.get("/admin/waitlist", headers=AUTH).json["entries"]
    return [(entry["email"], entry["intent"]) for entry in entries]


def _erase(client: Any, query: str) -> Any:
    return client.request("delete", f"/admin/waitlist{query}", headers=AUTH)


def test_the_waitlist_and_erasure_use_one_key() -> None:
    """The key a registration is stored under is the key erasure computes: trimmed, case folded."""
    registration = parse_registration({"email": "  Ada@Example.COM ", "intent": "claim"}, ManualClock()())
    assert registration.email_key == email_key(" ADA@example.com") == "ada@example.com"


def test_erasure_removes_every_intent_of_the_address_and_nothing_else(
    make_client: Any, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every registration of the address goes, in any case and any intent; the others and the export stay whole."""
    with make_client(database_url=database_url, admin_token=TOKEN) as client:
        _register(client)
        response = _erase(client, "?email=%20aDa@EXAMPLE.com%20")
        assert (response.status_code, response.json) == (200, {"erased": 3})
        assert _emails(client) == [("bob@example.com", "claim"), ("adam@example.com", "member")]
        again = _erase(client, "?email=ada@example.com")
        assert (again.status_code, again.json) == (200, {"erased": 0})

    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    assert main(["waitlist", "export", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    table = list(csv.DictReader(io.StringIO(captured.out)))
    assert [(row["email"], row["intent"], row["project"]) for row in table] == [
        ("bob@example.com", "claim", "BOB"),
        ("adam@example.com", "member", ""),
    ]
    assert captured.err.strip() == "exported 2 registrations"


def test_an_address_stored_under_older_rules_is_erased_all_the_same(
    make_client: Any, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Right to erasure holds for rows an older release stored with addresses today's rules refuse
    (two dots in a row, a single-label domain): they are erased, by the admin API and by the
    command. The same addresses with nothing stored are still refused as typos."""
    legacy = ["Ada..Lovelace@Example.com", "ada@localhost"]
    asyncio.run(_store_directly(database_url, legacy))
    with make_client(database_url=database_url, admin_token=TOKEN) as client:
        _register(client)
        first = _erase(client, "?email=ada..lovelace@example.com")
        assert (first.status_code, first.json) == (200, {"erased": 1})
        again = _erase(client, "?email=ada..lovelace@example.com")
        assert (again.status_code, again.json["errors"][0]["code"]) == (400, "invalid_email")
    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    assert main(["waitlist", "erase", "--email", "ADA@localhost"]) == 0
    assert json.loads(capsys.readouterr().out) == {"erased": 1}
    assert main(["waitlist", "erase", "--email", "ADA@localhost"]) == 1


async def _store_directly(database_url: str, addresses: list[str]) -> None:
    """Rows as an older release wrote them, past today's address rules."""
    engine = create_engine(database_url)
    moment = ManualClock()()
    try:
        async with engine.begin() as conn:
            await conn.execute(
                insert(tables.registrations),
                [{"email": address, "email_key": email_key(address), "intent": "member",
                  "created_at": moment, "updated_at": moment} for address in addresses],
            )  # fmt: skip
    finally:
        await engine.dispose()


def test_the_erase_command(
    make_client: Any, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`waitlist erase --email E` prints {"erased": n}; the JSONL export then lacks only that address."""
    with make_client(database_url=database_url) as client:
        _register(client)
    monkeypatch.setenv("SERVICE_DATABASE_URL", database_url)
    assert main(["waitlist", "erase", "--email", "BOB@example.com"]) == 0
    assert json.loads(capsys.readouterr().out) == {"erased": 1}
    assert main(["waitlist", "export", "--format", "jsonl"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["email"], line["intent"]) for line in lines] == [
        (body["email"], body["intent"]) for body in REGISTERED if body["email"] != "bob@example.com"
    ]


@pytest.mark.parametrize(
    ("address", "code", "message"),
    [
        ("", "missing", "This parameter is required."),
        ("   ", "missing", "This parameter is required."),
        ("not-an-address", "invalid_email", "This is not a valid email address."),
        ("ada@localhost", "invalid_email", "This is not a valid email address."),
    ],
)
def test_the_erase_command_refuses_a_bad_address(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], address: str, code: str, message: str
) -> None:
    """A blank or invalid address exits 1 with the error shape naming `email` on stderr."""
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    assert main(["waitlist", "erase", "--email", address]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert json.loads(captured.err) == {
        "ok": False,
        "message": "The request is not valid.",
        "errors": [{"field": "email", "code": code, "message": message}],
    }


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        ("", [{"field": "email", "code": "missing", "message": "This parameter is required."}]),
        ("?email=", [{"field": "email", "code": "missing", "message": "This parameter is required."}]),
        ("?email=ada", [{"field": "email", "code": "invalid_email", "message": "This is not a valid email address."}]),
        ("?email=a%00@example.com", [{"field": "email", "code": "invalid_email", "message": "This is not a valid email address."}]),
        ("?email=ada@example.com&email=bob@example.com", [{"field": "email", "code": "repeated", "message": "This parameter appears more than once."}]),
        ("?email=ada@example.com&intent=claim", [{"field": "intent", "code": "unknown_parameter", "message": "This parameter is not accepted."}]),
    ],
)
def test_a_bad_erasure_request_is_400_and_erases_nothing(make_client: Any, query: str, errors: list[dict[str, str]]) -> None:
    """Missing, blank, invalid or repeated email, or an unknown parameter: 400 naming it, every row kept."""
    with make_client(admin_token=TOKEN) as client:
        _register(client)
        response = _erase(client, query)
        assert (response.status_code, response.json) == (
            400,
            {"ok": False, "message": "The request is not valid.", "errors": errors},
        )
        assert len(_emails(client)) == len(REGISTERED)


def test_erasure_needs_the_admin_token(make_client: Any) -> None:
    """Without the bearer token the erasure route answers 401 and erases nothing."""
    with make_client(admin_token=TOKEN) as client:
        _register(client)
        response = client.request("delete", "/admin/waitlist?email=ada@example.com")
        assert response.status_code == 401
        assert len(_emails(client)) == len(REGISTERED)


JOSE_NFC = unicodedata.normalize("NFC", "josé@bücher.example")
JOSE_NFD = unicodedata.normalize("NFD", "José@xn--bcher-kva.example")


def test_spellings_of_one_address_are_one_registration_and_erased_together(
    make_client: Any, database_url: str
) -> None:
    """NFC and NFD, a Unicode and a punycode domain: one registration per intent, stored as first
    submitted, and erased together by any spelling."""
    with make_client(database_url=database_url, admin_token=TOKEN) as client:
        for email in (JOSE_NFC, JOSE_NFD):
            assert client.post("/api/waitlist", json={"email": email, "intent": "claim"}).status_code == 200
        assert client.post("/api/waitlist", json={"email": JOSE_NFD, "intent": "member"}).status_code == 200
        assert _emails(client) == [(JOSE_NFC, "claim"), (JOSE_NFD, "member")]
        response = _erase(client, "?email=" + urllib.parse.quote("JOSÉ@BÜCHER.example"))
        assert (response.status_code, response.json) == (200, {"erased": 2})
        assert _emails(client) == []


@pytest.mark.parametrize(
    ("first", "second", "one"),
    [
        ("\u03c3\u03b1\u03c3@example.com", "\u03a3\u0391\u03a3@example.com", True),  # a Greek word, its capitals
        ("stra\u00dfe@example.com", "STRASSE@example.com", False),  # STRASSE is as much strasse's
    ],
    ids=["final-sigma", "sharp-s"],
)
def test_the_capitals_of_an_address_are_the_same_registration_and_no_other_mailbox_is(
    make_client: Any, database_url: str, first: str, second: str, one: bool
) -> None:
    """Case is folded as the letters fold (a capital sigma at a word's end is any sigma), never
    further: the sharp s stays itself, since its capitals spell another mailbox too."""
    with make_client(database_url=database_url, admin_token=TOKEN) as client:
        for email in (first, second):
            assert client.post("/api/waitlist", json={"email": email, "intent": "claim"}).status_code == 200
        stored = _emails(client)
        response = _erase(client, "?email=" + urllib.parse.quote(second))
        left = _emails(client)
    assert stored == ([(first, "claim")] if one else [(first, "claim"), (second, "claim")])
    assert (response.json, left) == ({"erased": 1}, [] if one else [(first, "claim")])


async def test_an_export_waits_for_a_writer_that_waits(database_url: str) -> None:
    """An awaitable ``write`` (a download sent as it goes) sets the pace: while it waits, no more
    rows are read; when the download stops, the export stops with it and its connection goes back
    to the pool. A writer the export did not wait for held every row in memory until it drained."""
    engine = create_engine(database_url)
    moment = ManualClock()()
    async with engine.begin() as conn:
        await conn.execute(
            insert(tables.registrations),
            [{"email": f"r{n}@example.com", "email_key": f"r{n}@example.com", "intent": "member",
              "created_at": moment, "updated_at": moment} for n in range(50)],
        )  # fmt: skip
    written: list[str] = []
    reached, held = asyncio.Event(), asyncio.Event()

    async def write(entry: dict[str, Any]) -> None:
        written.append(entry["email"])
        if len(written) == 10:
            reached.set()
            await held.wait()  # the client stopped reading

    try:
        export = asyncio.ensure_future(RegistrationOperations(engine).export_registrations(write))
        async with asyncio.timeout(60):  # a bound for a regression, never reached when it works
            await reached.wait()
        for _ in range(50):  # every step the export could take past a writer it did not wait for
            await asyncio.sleep(0)
        assert (len(written), export.done()) == (10, False)
        export.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await export
        assert engine.pool.checkedout() == 0
        held.set()
        assert len(written) == 10
        document = await RegistrationOperations(engine).export_registrations(lambda entry: written.append(entry))
        assert document == {"exported": 50}
    finally:
        await engine.dispose()
