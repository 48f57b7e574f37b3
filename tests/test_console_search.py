"""The waitlist page's search, on SQLite and PostgreSQL: the start of an address as it was registered
or as the page lists it finds the row, whatever its Unicode form, case or internationalised domain,
although the waitlist keys an address normalised (``email_key``: NFC, lower-cased, the domain in IDNA
ASCII)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert

from service.db.engine import create_engine
from service.db.registrations import email_key
from service.db.tables import registrations
from service.summaries_ops import Summaries
from tests.test_console import TOKEN, _session, _sign_in

NOW = datetime(2026, 6, 29, 12, 30, tzinfo=UTC)
ADDRESSES = [
    "José@Bücher.example",  # listed as registered; keyed josé@xn--bcher-kva.example
    "jose@bucher.example",  # the same letters without the accent or the umlaut
    "josef@example.com",
    "JOSÉ@büro.example",  # another internationalised label starting "bü"
    "josé@bar.example",  # an ASCII label starting "b"
    "josé@übel.example",  # keyed xn--bel-goa: its IDNA ASCII form starts "xn--b", its label does not
    "R1@Example.com",
]


def _listed(page: str) -> list[str]:
    return sorted(re.findall(r'<th scope="row">([^<]*)</th>', page))


@pytest.mark.parametrize(
    ("q", "found"),
    [
        ("Josef", ["josef@example.com"]),  # ASCII, any case, as before
        ("jose@b", ["jose@bucher.example"]),
        ("r1@EXAMPLE.COM", ["R1@Example.com"]),
        (
            "Jose\u0301@",  # typed decomposed: e and a combining acute accent
            ["JOSÉ@büro.example", "José@Bücher.example", "josé@bar.example", "josé@übel.example"],
        ),
        ("JOSÉ@BÜC", ["José@Bücher.example"]),  # upper-case, non-ASCII in both parts
        ("José@Bücher.example", ["José@Bücher.example"]),  # the whole address as listed
        ("josé@bücher.", ["José@Bücher.example"]),  # a complete label
        ("josé@xn--bcher-kva.ex", ["José@Bücher.example"]),  # the domain as its IDNA ASCII form
        ("josé@bü", ["JOSÉ@büro.example", "José@Bücher.example"]),  # a partial internationalised label
        ("Jose\u0301@Bu\u0308", ["JOSÉ@büro.example", "José@Bücher.example"]),  # typed decomposed
        ("josé@b", ["JOSÉ@büro.example", "José@Bücher.example", "josé@bar.example"]),
        ("josé@ü", ["josé@übel.example"]),
        ("josé@bü%", []),  # searched as typed, never as a pattern
    ],
)
def test_the_start_of_an_address_finds_it(
    make_client: Any, database_url: str, q: str, found: list[str]
) -> None:
    """Registered through the waitlist, searched on the console's waitlist page."""
    with make_client(admin_token=TOKEN, database_url=database_url) as client:
        for address in ADDRESSES:
            response = client.post("/api/waitlist", json={"email": address, "intent": "member"})
            assert response.status_code in (200, 201), response.text
        cookies = _session(_sign_in(client))
        page = client.get("/console/waitlist", params={"q": q}, cookies=cookies)
    assert page.status_code == 200
    assert _listed(page.text) == sorted(found)


async def test_pages_of_a_partial_internationalised_label_hold_every_row_once(database_url: str) -> None:
    """``josé@b`` finds ASCII labels through the key's range and internationalised ones by their IDNA
    ASCII form, decoded: pages of 2 still hold each match once, newest first, and no other row."""
    domains = ["bücher", "bar", "übel", "büro", "bäcker", "bob", "übersee", "baß", "éb", "bé"]
    rows = [
        {
            "email": f"josé@{domain}.example",
            "email_key": email_key(f"josé@{domain}.example"),
            "intent": "member",
            "project": None,
            "message": None,
            "created_at": NOW - timedelta(hours=number // 2),  # ties, which the pages break by id
            "updated_at": NOW,
        }
        for number, domain in enumerate(domains)
    ]
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(registrations), rows)
        reads = Summaries(engine, lambda: NOW)
        pages = []
        args: dict[str, str] = {"q": "JOSÉ@B"}
        while True:
            page = await reads.registrations(args, limit=2)
            pages.append(page.rows)
            if page.next is None:
                break
            args = {**args, "after": page.next}
    finally:
        await engine.dispose()
    listed = [row for page in pages for row in page]
    newest_first = sorted(range(len(domains)), key=lambda number: (number // 2, -number))
    assert [row["email"] for row in listed] == [
        f"josé@{domains[number]}.example" for number in newest_first if domains[number].startswith("b")
    ]
    assert all(len(page) == 2 for page in pages[:-1])
