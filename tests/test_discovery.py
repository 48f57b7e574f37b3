"""Discovery documents, read over HTTP and parsed only with third-party parsers."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.robotparser
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import xmlschema
from jsonschema import Draft202012Validator
from llms_txt import parse_llms_file
from sqlalchemy import insert
from standardwebhooks import WebhookVerificationError

from service.db.engine import create_engine
from service.db.rooms import known_rooms
from service.db.tables import events
from service.discovery.content import ContentError, load_content, parse_content
from service.discovery.documents import RoomSitemap
from service.discovery.llms import llms_index
from service.discovery.sitemaps import sitemap_xml
from service.errors import ServiceUnavailable
from service.events import EVENT_MODELS, payload_fields
from service.webhooks import partners
from service.webhooks.signing import signature_headers
from tests.conftest import DATA

BASE = "https://rooms.example"
TOKEN = "admin-token-for-the-discovery-tests"
SITEMAP_XSD = xmlschema.XMLSchema(str(DATA / "sitemap.xsd"))
KINDS = list(EVENT_MODELS)

PAGES = ["/", "/rooms", "/pricing", "/arcade", "/waitlist"]
# Every machine-readable surface, written out: the agent sitemap must list exactly these.
MACHINE_SURFACES = [
    "/llms.txt",
    "/llms-full.txt",
    "/agent.json",
    "/.well-known/agent.json",
    "/room-schema.json",
    "/api/v1",
    "/api/v1/openapi.json",
    "/api/v1/webhooks/events",
    "/api/v1/webhooks/test-vectors",
    *(f"/api/v1/webhooks/events/{kind}" for kind in KINDS),
    "/docs/webhooks/",
    "/docs/webhooks/index.md",
    "/docs/webhooks/event-catalog",
    "/docs/webhooks/event-catalog.md",
    "/docs/webhooks/verifying-signatures",
    "/docs/webhooks/verifying-signatures.md",
]
# Every read-only document with the media type it must be served as.
DOCUMENTS = {
    "/llms.txt": "text/plain; charset=utf-8",
    "/llms-full.txt": "text/plain; charset=utf-8",
    "/agent.json": "application/json; charset=utf-8",
    "/.well-known/agent.json": "application/json; charset=utf-8",
    "/room-schema.json": "application/json; charset=utf-8",
    "/sitemap.xml": "application/xml; charset=utf-8",
    "/agent-sitemap.xml": "application/xml; charset=utf-8",
    "/robots.txt": "text/plain; charset=utf-8",
    "/api/v1": "application/json; charset=utf-8",
    "/api/v1/openapi.json": "application/json; charset=utf-8",
    "/api/v1/webhooks/events": "application/json; charset=utf-8",
    "/api/v1/webhooks/test-vectors": "application/json; charset=utf-8",
    **{f"/api/v1/webhooks/events/{kind}": "application/json; charset=utf-8" for kind in KINDS},
}
ROOM_TYPES = [
    "owner_room",
    "community_room",
    "member_room",
    "arcade_room",
    "verified_room",
    "pro_room",
    "custom_room",
]
DEFAULT_TOML = (Path(__file__).parents[1] / "service" / "discovery" / "content.toml").read_text()
AUTHORITY = ["unclaimed_stub", "community_claimed", "official_owner", "nft_room", "project_hub"]


def _sitemap_entries(body: bytes) -> list[dict[str, str]]:
    SITEMAP_XSD.validate(body.decode("utf-8"))
    document = SITEMAP_XSD.to_dict(body.decode("utf-8"), namespaces={"": SITEMAP_XSD.target_namespace})
    return document["url"]


# --- llms.txt and llms-full.txt ------------------------------------------------------------------


def test_llms_txt_parses_back_to_what_it_was_written_from(make_client):
    """The llms-txt parser reads back exactly the title, summary, info and link sections rendered."""
    with make_client(base_url=BASE) as client:
        response = client.get("/llms.txt")
    parsed = parse_llms_file(response.text)
    index = llms_index(load_content(), BASE)
    assert parsed.title == index.title == "Launch Rooms"
    assert parsed.summary == index.summary
    assert parsed.info == index.info
    assert {name: [dict(link) for link in links] for name, links in parsed.sections.items()} == {
        name: [{"title": link.title, "url": link.url, "desc": link.notes} for link in links]
        for name, links in index.sections.items()
    }


def test_llms_txt_opens_with_rooms_and_instructions(make_client):
    """llms.txt says what a room is, then carries the instructions for AI agents, before any link."""
    with make_client(base_url=BASE) as client:
        parsed = parse_llms_file(client.get("/llms.txt").text)
    assert parsed.info.startswith("A room is the canonical public page of one crypto launch")
    assert "Instructions for AI agents:" in parsed.info
    for rule in load_content().instructions:
        assert f"- {rule}" in parsed.info
    assert list(parsed.sections) == ["Docs", "Pages", "Partner documentation", "Webhook events", "Optional"]
    assert [link["url"] for link in parsed.sections["Pages"]] == [BASE + page for page in PAGES]
    assert [link["title"] for link in parsed.sections["Webhook events"]] == KINDS


def test_llms_full_txt_covers_rooms_authority_waitlist_events_and_signatures(make_client):
    """llms-full.txt carries every section its readers need (rooms, authority, the waitlist, events,
    signatures), each field derived from the models."""
    with make_client(base_url=BASE) as client:
        text = client.get("/llms-full.txt").text
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert headings == [
        "Instructions for AI agents",
        "What the service is and is not",
        "Authority labels",
        "Room types",
        "Pricing tiers",
        "Attribution and caching",
        "Waitlist API",
        "Webhook events",
        "Verifying signatures",
        "Discovery documents",
        "Partner documentation",
    ]
    assert "It does not certify token safety, investment quality, price direction" in text
    for label in ("Unclaimed stub", "Community-maintained", "Official owner", "NFT room", "Project hub"):
        assert f"### {label} (`" in text
    for room_type in ROOM_TYPES:
        assert f"- `{room_type}` (" in text
    for member in ("email", "intent", "project", "message"):
        assert f"| `{member}` |" in text
    assert f"`POST {BASE}/api/waitlist`" in text
    for kind, model in EVENT_MODELS.items():
        section = text.split(f"### {kind}\n", 1)[1].split("\n### ", 1)[0]
        for field in payload_fields(model):
            assert f"| `{field['name']}` | {field['type']} |" in section
    for header in (
        "x-service-event",
        "x-service-delivery",
        "x-service-timestamp",
        "x-service-signature",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    ):
        assert f"`{header}`" in text
    signatures = text.split("## Verifying signatures\n", 1)[1]
    assert "### Standard Webhooks" in signatures
    assert "- Signed payload: {webhook-id}.{webhook-timestamp}.{raw_body}" in signatures
    assert "- Python: standardwebhooks (PyPI)" in signatures
    assert f"{BASE}/api/v1/webhooks/test-vectors" in signatures


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def _verify_function(text: str):
    snippet = _python_blocks(text)[0]
    namespace: dict[str, object] = {}
    exec(snippet, namespace)  # noqa: S102 - the snippet is our own document, run to prove it works
    return namespace["verify"]


@pytest.mark.parametrize(
    ("signing", "holding", "expected"),
    [
        (["secret-new"], "secret-new", True),
        (["secret-new", "secret-old"], "secret-old", True),  # during a rotation overlap
        (["secret-new"], "secret-other", False),
    ],
)
def test_llms_full_txt_verification_snippet_agrees_with_the_signer(make_client, signing, holding, expected):
    """The Python snippet partners copy from llms-full.txt verifies what the service signs."""
    with make_client(base_url=BASE) as client:
        verify = _verify_function(client.get("/llms-full.txt").text)
    body = b'{"eventId":"evt_1","event":"platform.milestone"}'
    timestamp = int(datetime.now(UTC).timestamp())
    headers = signature_headers(
        event="platform.milestone", delivery_id="dlv_1", body=body, secrets=signing, timestamp=timestamp
    )
    assert verify(holding, headers, body) is expected
    assert verify(holding, headers, body + b" ") is False
    assert verify(holding, {**headers, "x-service-timestamp": f" +{timestamp}"}, body) is False


def test_llms_full_txt_library_snippet_verifies_a_delivery(make_client):
    """The Standard Webhooks snippet in llms-full.txt, run as written, accepts a delivery signed now
    and raises the library's error for another secret."""
    with make_client(base_url=BASE) as client:
        snippet = _python_blocks(client.get("/llms-full.txt").text)[1]
    secret, other = (partners.new_secret() for _ in range(2))
    body = b'{"eventId":"evt_1","event":"platform.milestone"}'
    headers = signature_headers(
        event="platform.milestone",
        delivery_id="dlv_1",
        body=body,
        secrets=[secret],
        timestamp=int(datetime.now(UTC).timestamp()),
    )
    namespace: dict[str, object] = {"secret": secret, "raw_body": body, "headers": headers}
    exec(snippet, namespace)  # noqa: S102 - the snippet is our own document, run to prove it works
    assert namespace["event"] == {"eventId": "evt_1", "event": "platform.milestone"}
    with pytest.raises(WebhookVerificationError):
        exec(snippet, {**namespace, "secret": other})  # noqa: S102


# --- agent.json and room-schema.json --------------------------------------------------------------


def test_agent_manifest_is_served_at_both_paths(make_client):
    """/agent.json and /.well-known/agent.json are the same manifest, naming every document."""
    with make_client(base_url=BASE) as client:
        plain, well_known = client.get("/agent.json"), client.get("/.well-known/agent.json")
    assert plain.body == well_known.body
    manifest = plain.json
    assert {
        key: manifest[key] for key in ("name", "version", "baseUrl", "publicApi", "publicApiVersion")
    } == {
        "name": "Launch Rooms",
        "version": "0.1.0",
        "baseUrl": BASE,
        "publicApi": f"{BASE}/api/v1",
        "publicApiVersion": "2026-06-29",
    }
    assert manifest["documents"] == {
        "llmsTxt": f"{BASE}/llms.txt",
        "llmsFullTxt": f"{BASE}/llms-full.txt",
        "agentManifest": f"{BASE}/agent.json",
        "wellKnownAgentManifest": f"{BASE}/.well-known/agent.json",
        "roomSchema": f"{BASE}/room-schema.json",
        "sitemap": f"{BASE}/sitemap.xml",
        "agentSitemap": f"{BASE}/agent-sitemap.xml",
        "robots": f"{BASE}/robots.txt",
        "partnerDocs": f"{BASE}/docs/webhooks/",
        "partnerEventCatalog": f"{BASE}/docs/webhooks/event-catalog",
        "partnerVerifyingSignatures": f"{BASE}/docs/webhooks/verifying-signatures",
    }
    assert manifest["catalog"] == f"{BASE}/api/v1/webhooks/events"
    assert manifest["openapi"] == f"{BASE}/api/v1/openapi.json"
    assert manifest["eventSchemas"] == {kind: f"{BASE}/api/v1/webhooks/events/{kind}" for kind in KINDS}
    assert manifest["waitlist"] == {
        "url": f"{BASE}/api/waitlist",
        "method": "POST",
        "contentTypes": ["application/json", "application/x-www-form-urlencoded"],
        "intents": ["claim", "member", "arcade"],
    }
    assert [label["id"] for label in manifest["authorityLabels"]] == AUTHORITY
    assert all(label["preserve"] for label in manifest["authorityLabels"])
    assert [room_type["id"] for room_type in manifest["roomTypes"]] == ROOM_TYPES
    assert manifest["pricing"][-1] == {
        "tier": "Custom",
        "price": "Contact sales",
        "best_for": "Platforms, launchpads and large projects that need a managed room.",
    }
    content = load_content()
    assert (manifest["safetyBoundaries"], manifest["attribution"], manifest["caching"]) == (
        content.safety,
        content.attribution,
        content.caching,
    )


def test_room_schema_is_valid_json_schema_2020_12(make_client):
    """room-schema.json passes the 2020-12 metaschema and carries its own absolute $id."""
    with make_client(base_url=BASE) as client:
        schema = client.get("/room-schema.json").json
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"{BASE}/room-schema.json"
    properties = schema["properties"]
    assert list(properties) == [
        "slug",
        "canonicalUrl",
        "project",
        "ticker",
        "chain",
        "contractAddress",
        "roomType",
        "authority",
        "tier",
        "pricing",
        "links",
    ]
    assert [branch["const"] for branch in properties["roomType"]["oneOf"]] == ROOM_TYPES
    assert [branch["const"] for branch in properties["authority"]["oneOf"]] == AUTHORITY
    assert sorted(schema["$defs"]["PricingTier"]["properties"]) == [
        "best_for",
        "price",
        "standard_price",
        "tier",
    ]


ROOM = {
    "slug": "moonfrog",
    "canonicalUrl": "https://launchrooms.example/rooms/moonfrog",
    "project": "Moonfrog",
    "ticker": "FROG",
    "chain": "solana",
    "roomType": "verified_room",
    "authority": "official_owner",
    "tier": "verified",
    "pricing": {"tier": "Verified", "price": "$149 per month"},
    "links": [{"label": "website", "url": "https://moonfrog.example"}],
}


@pytest.mark.parametrize(
    ("change", "valid"),
    [
        ({}, True),
        ({"authority": "project_hub", "roomType": "custom_room"}, True),
        ({"authority": "verified"}, False),  # a tier is not an authority label
        ({"roomType": "official_owner"}, False),  # a claim state is not a room type
        ({"canonicalUrl": "moonfrog"}, False),
        ({"pricing": {"tier": "Pro", "discount": "10%"}}, False),
        ({"ticker": None}, False),  # optional members are omitted, never null
    ],
)
def test_room_schema_accepts_rooms_and_refuses_mislabelled_ones(make_client, change, valid):
    """A room validates against room-schema.json; a wrong label or type does not."""
    with make_client(base_url=BASE) as client:
        schema = client.get("/room-schema.json").json
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert validator.is_valid({**ROOM, **change}) is valid


# --- sitemaps and robots.txt ----------------------------------------------------------------------


def test_sitemap_lists_the_configured_pages(make_client):
    """With no events, sitemap.xml is the configured pages, valid against the sitemaps.org XSD."""
    with make_client(base_url=BASE) as client:
        body = client.get("/sitemap.xml").body
    assert _sitemap_entries(body) == [{"loc": BASE + page} for page in PAGES]


def test_agent_sitemap_lists_every_machine_surface(make_client):
    """agent-sitemap.xml is valid and lists every machine-readable surface, each event document too."""
    with make_client(base_url=BASE) as client:
        body = client.get("/agent-sitemap.xml").body
    assert _sitemap_entries(body) == [{"loc": BASE + path} for path in MACHINE_SURFACES]


def test_robots_txt_names_both_sitemaps(make_client):
    """robots.txt names both sitemaps by absolute URL and allows every document."""
    with make_client(base_url=BASE) as client:
        text = client.get("/robots.txt").text
    parser = urllib.robotparser.RobotFileParser()
    parser.parse(text.splitlines())
    assert parser.site_maps() == [f"{BASE}/sitemap.xml", f"{BASE}/agent-sitemap.xml"]
    assert all(parser.can_fetch("AnyBot", BASE + path) for path in DOCUMENTS)


def _event_row(event_id: str, room_url: str | None, occurred: datetime, kind: str = "room.trending") -> dict:
    payload = {"eventId": event_id, "event": kind, "occurredAt": occurred.isoformat()}
    if room_url is not None:
        payload["roomUrl"] = room_url
    return {
        "id": event_id,
        "kind": kind,
        "dedupe_key": f"{kind}:{event_id}",
        "payload": json.dumps(payload),
        "occurred_at": occurred,
        "created_at": occurred,
    }


async def _insert_events(engine, rows: list[dict]) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(events), rows)


def test_sitemap_lists_a_room_once_its_event_is_read(make_client, clock):
    """A room named by a stored event appears in sitemap.xml within the TTL, with its lastmod."""
    with make_client(base_url=BASE) as client:
        before = client.get("/sitemap.xml")
        occurred = datetime(2026, 6, 29, 11, 30, 15, 250000, tzinfo=UTC)
        row = _event_row("evt_a", "https://launchrooms.example/rooms/moonfrog", occurred)
        client.run(_insert_events(client.app.ctx.engine, [row]))
        cached = client.get("/sitemap.xml")
        clock.advance(61)
        after = client.get("/sitemap.xml")
    assert cached.body == before.body  # another process's event waits for the TTL
    assert _sitemap_entries(after.body)[len(PAGES) :] == [
        {"loc": "https://launchrooms.example/rooms/moonfrog", "lastmod": "2026-06-29T11:30:15Z"}
    ]
    assert after.headers["etag"] != before.headers["etag"]


def test_rooms_changed_refreshes_the_sitemap_at_once(make_client, clock):
    """After the publisher's rooms_changed(), the next sitemap.xml lists the room without waiting."""
    with make_client(base_url=BASE) as client:
        client.get("/sitemap.xml")
        occurred = datetime(2026, 6, 29, 11, 0, tzinfo=UTC)
        rows = [
            _event_row("evt_1", "https://launchrooms.example/rooms/b", occurred),
            _event_row("evt_2", "https://launchrooms.example/rooms/a", occurred),
            _event_row("evt_3", "https://launchrooms.example/rooms/b", occurred.replace(hour=11, minute=45)),
            _event_row("evt_4", None, occurred, kind="platform.milestone"),
        ]
        client.run(_insert_events(client.app.ctx.engine, rows))
        client.app.ctx.discovery.rooms_changed()
        body = client.get("/sitemap.xml").body
    assert _sitemap_entries(body)[len(PAGES) :] == [
        {"loc": "https://launchrooms.example/rooms/b", "lastmod": "2026-06-29T11:45:00Z"},
        {"loc": "https://launchrooms.example/rooms/a", "lastmod": "2026-06-29T11:00:00Z"},
    ]


def test_sitemap_lists_a_room_published_through_the_admin_api(make_client, clock):
    """An event published with POST /admin/events reaches sitemap.xml (within the TTL at most)."""
    event = {
        "event": "room.claimed",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog?ref=a&b=c",
        "project": "Moonfrog",
        "ticker": "FROG",
        "chain": "solana",
        "roomType": "official_owner",
    }
    with make_client(base_url=BASE, admin_token=TOKEN) as client:
        client.get("/sitemap.xml")
        published = client.post("/admin/events", json=event, headers={"authorization": f"Bearer {TOKEN}"})
        clock.advance(61)
        body = client.get("/sitemap.xml").body
    assert published.status_code == 202, published.json
    assert b"?ref=a&amp;b=c</loc>" in body  # escaped, and still valid XML
    assert _sitemap_entries(body)[len(PAGES) :] == [
        {"loc": event["roomUrl"], "lastmod": "2026-06-29T12:00:00Z"}
    ]


def test_an_event_stamped_ahead_of_the_clock_hides_no_room_published_after_it(make_client, clock):
    """An event another machine stored with a clock running an hour fast: the rooms published
    here afterwards, at this clock's time, still reach sitemap.xml."""
    with make_client(base_url=BASE) as client:
        now = clock()
        ahead = _event_row("evt_ahead", "https://launchrooms.example/rooms/ahead", now + timedelta(hours=1))
        client.run(_insert_events(client.app.ctx.engine, [ahead]))
        client.app.ctx.discovery.rooms_changed()
        client.get("/sitemap.xml")
        clock.advance(61)
        here = _event_row("evt_here", "https://launchrooms.example/rooms/here", clock())
        client.run(_insert_events(client.app.ctx.engine, [here]))
        client.app.ctx.discovery.rooms_changed()
        body = client.get("/sitemap.xml").body
    assert [entry["loc"] for entry in _sitemap_entries(body)[len(PAGES) :]] == [
        "https://launchrooms.example/rooms/ahead",
        "https://launchrooms.example/rooms/here",
    ]


def test_stored_room_urls_the_url_rule_refuses_are_left_out(make_client, clock):
    """Payloads stored without the events' URL rule (by hand, or an earlier release): a URL too
    short for the sitemap protocol, control characters that would make the XML unreadable, a
    script URL; they are left out, and the document stays valid. Quotes are escaped as entities."""
    stored = [
        "http://a",
        "https://evil.example/\x0c\x01<x>]]>",
        "javascript:alert(1)",
        "https://launchrooms.example/rooms/it's",
    ]
    with make_client(base_url=BASE) as client:
        rows = [_event_row(f"evt_{n}", room, clock()) for n, room in enumerate(stored)]
        client.run(_insert_events(client.app.ctx.engine, rows))
        client.app.ctx.discovery.rooms_changed()
        body = client.get("/sitemap.xml").body
    assert [entry["loc"] for entry in _sitemap_entries(body)[len(PAGES) :]] == [stored[-1]]
    assert b"rooms/it&apos;s</loc>" in body


class _DatabaseDown:
    def connect(self):
        raise OSError("the database is down")


def test_sitemap_serves_its_last_rendering_while_the_database_is_down(sqlite_url, clock):
    """A failed read of the rooms serves the last sitemap.xml; with none rendered yet, it is a 503."""
    sitemap = RoomSitemap(lambda rooms: sitemap_xml(load_content(), BASE, rooms), clock)

    async def scenario():
        with pytest.raises(ServiceUnavailable):
            await sitemap.current(_DatabaseDown())
        engine = create_engine(sqlite_url)
        try:
            first = await sitemap.current(engine)
        finally:
            await engine.dispose()
        sitemap.rooms_changed()
        return first, await sitemap.current(_DatabaseDown())

    first, during_outage = asyncio.run(scenario())
    assert during_outage is first
    assert _sitemap_entries(first.body) == [{"loc": BASE + page} for page in PAGES]


def test_known_rooms_keeps_the_latest_time_per_room(database_url):
    """known_rooms: distinct roomUrl, latest occurred_at each, newest first; `since` bounds the scan."""
    early, late = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        _event_row("evt_1", "https://x.example/rooms/one", early),
        _event_row("evt_2", "https://x.example/rooms/one", late),
        _event_row("evt_3", "https://x.example/rooms/two", early),
        _event_row("evt_4", None, late, kind="platform.milestone"),
    ]

    async def read():
        engine = create_engine(database_url)
        try:
            await _insert_events(engine, rows)
            async with engine.connect() as conn:
                return await known_rooms(conn), await known_rooms(conn, since=late)
        finally:
            await engine.dispose()

    everything, recent = asyncio.run(read())
    assert everything == [("https://x.example/rooms/one", late), ("https://x.example/rooms/two", early)]
    assert recent == [("https://x.example/rooms/one", late)]


# --- every document: base_url, caching, HEAD, charset ---------------------------------------------

# URLs the documents may name outside base_url: standards, and the example payloads of the catalog.
EXTERNAL = (
    "https://json-schema.org/draft/2020-12/schema",
    "http://www.sitemaps.org/schemas/sitemap/0.9",
    "https://www.standardwebhooks.com/",
    "https://launchrooms.example/",
)
URL_PATTERN = re.compile(r"https?://[^\s\"'<>)\]`,]+")


@pytest.mark.parametrize("path", list(DOCUMENTS))
def test_every_absolute_url_follows_base_url(make_client, path):
    """Changing base_url changes every absolute URL of every document; the old base never remains."""
    old, new = "https://old-rooms.example", "https://new.example/launch"
    with make_client(base_url=old) as client:
        before = client.get(path).text
    with make_client(base_url=new) as client:
        after = client.get(path).text
    assert old in before
    assert old not in after
    own = [found for found in URL_PATTERN.findall(after) if not found.startswith(EXTERNAL)]
    assert own
    assert all(found.startswith(new + "/") or found == new for found in own), own


@pytest.mark.parametrize(("path", "media_type"), list(DOCUMENTS.items()))
def test_documents_carry_validators_and_charset(make_client, path, media_type):
    """Every document: 200, UTF-8 media type, strong quoted ETag, public Cache-Control."""
    with make_client(base_url=BASE) as client:
        response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert re.fullmatch(r'"[0-9a-f]{32}"', response.headers["etag"])
    assert response.headers["cache-control"] == "public, max-age=300"
    response.content.decode("utf-8")


@pytest.mark.parametrize(
    ("if_none_match", "status"),
    [
        ("{etag}", 304),
        ("W/{etag}", 304),
        ('"stale", {etag}', 304),
        ('"stale",{etag} , "other"', 304),
        ("*", 304),
        ('"stale"', 200),
        ('"stale", W/"other"', 200),
        ("{etag_unquoted}", 200),
        ("", 200),
    ],
)
@pytest.mark.parametrize(
    "path", ["/llms.txt", "/sitemap.xml", "/api/v1/webhooks/events", "/api/v1/webhooks/test-vectors"]
)
def test_if_none_match_answers_304(make_client, path, if_none_match, status):
    """If-None-Match with the ETag (alone, weak, in a list, or *) is 304 repeating the ETag; else 200."""
    with make_client(base_url=BASE) as client:
        first = client.get(path)
        etag = first.headers["etag"]
        header = if_none_match.format(etag=etag, etag_unquoted=etag.strip('"'))
        response = client.get(path, headers={"if-none-match": header})
    assert response.status_code == status
    assert response.headers["etag"] == etag
    assert response.headers["cache-control"] == "public, max-age=300"
    assert response.content == (b"" if status == 304 else first.content)


@pytest.mark.parametrize(
    ("if_match", "if_none_match", "status"),
    [
        ("{etag}", None, 200),
        ('"stale", {etag}', None, 200),
        ("*", None, 200),
        ('"stale"', None, 412),
        ("W/{etag}", None, 412),  # compared strongly: a weak tag matches nothing
        ("{etag_unquoted}", None, 412),
        ('"stale"', "{etag}", 412),  # If-Match is evaluated first
        ("{etag}", "{etag}", 304),
    ],
)
@pytest.mark.parametrize("path", ["/llms.txt", "/sitemap.xml", "/api/v1/webhooks/events"])
def test_if_match_naming_another_version_is_412(make_client, path, if_match, if_none_match, status):
    """If-Match (RFC 9110 13.1.1) without the document's current ETag, compared strongly, is 412 in
    the error shape; with it (or *), the request goes on as it would have."""
    with make_client(base_url=BASE) as client:
        first = client.get(path)
        etag = first.headers["etag"]
        headers = {"if-match": if_match.format(etag=etag, etag_unquoted=etag.strip('"'))}
        if if_none_match is not None:
            headers["if-none-match"] = if_none_match.format(etag=etag)
        response = client.get(path, headers=headers)
    assert response.status_code == status
    if status == 412:
        assert response.json == {"ok": False, "message": "The document's current ETag is none of those in If-Match."}
    else:
        assert response.content == (b"" if status == 304 else first.content)


@pytest.mark.parametrize("path", list(DOCUMENTS))
def test_head_matches_get_without_a_body(make_client, path):
    """HEAD answers GET's status and headers (length included) with no body."""
    with make_client(base_url=BASE) as client:
        get, head = client.get(path), client.head(path)
    assert head.status_code == 200
    assert head.content == b""
    for name in ("content-type", "content-length", "etag", "cache-control"):
        assert head.headers[name] == get.headers[name]
    assert int(head.headers["content-length"]) == len(get.content)


@pytest.mark.parametrize("status", [200, 304])
def test_document_header_lines_are_sanics_own(status):
    """The lines encoded at render time are the ones Sanic's own HTTPResponse writes for those headers."""
    from sanic import HTTPResponse

    from service.discovery.caching import CACHE_CONTROL, DocumentResponse, cached

    document = cached(b"{}\n", "application/json")
    validators = {"ETag": document.etag, "Cache-Control": CACHE_CONTROL}
    if status == 200:
        ours = DocumentResponse(document.body, 200, document.media_type, document.headers)
        sanics = HTTPResponse(
            document.body, 200, headers={**validators, "X-Content-Type-Options": "nosniff"}, content_type=document.media_type
        )
    else:
        ours = DocumentResponse(None, 304, None, document.not_modified_headers)
        sanics = HTTPResponse(None, 304, headers=validators)
    for response in (ours, sanics):
        response.headers["content-length"] = "3"  # as Sanic adds it when it writes the response
    lines = sorted((name.lower(), value) for name, value in sanics.processed_headers)
    assert sorted(ours.processed_headers) == lines


@pytest.mark.parametrize("media_type", ["text/plain\r\nSet-Cookie: a=b", "text/plain\x00", "text/plain; charset=ütf-8"])
def test_a_header_sanic_would_alter_is_refused_at_render_time(media_type):
    """CR, LF, NUL or non-ASCII in a document's headers stop the rendering, never reach a response."""
    from service.discovery.caching import cached

    with pytest.raises(ValueError, match="must be one line of ASCII"):
        cached(b"x", media_type)


# --- the content file -----------------------------------------------------------------------------


def test_a_content_file_changes_the_wording(make_client, tmp_path: Path):
    """SERVICE_CONTENT_FILE selects the content; the documents follow it."""
    custom = tmp_path / "content.toml"
    custom.write_text(DEFAULT_TOML.replace('site_name = "Launch Rooms"', 'site_name = "Orbit Rooms"'))
    with make_client(base_url=BASE, content_file=custom) as client:
        parsed = parse_llms_file(client.get("/llms.txt").text)
        manifest = client.get("/agent.json").json
    assert (parsed.title, manifest["name"]) == ("Orbit Rooms", "Orbit Rooms")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda text: text + "\n[[[", "is not valid TOML"),
        (lambda text: text.replace('site_name = "Launch Rooms"\n', ""), "site_name: Field required"),
        (lambda text: text.replace('id = "project_hub"', 'id = "hub"'), "authority.4.id"),
        (
            lambda text: text.replace('id = "custom_room"', 'id = "pro_room"'),
            "room_types must list each of owner_room",
        ),
        (lambda text: text.replace('path = "/arcade"', 'path = "arcade"'), "pages.3.path"),
        # A control character would make /sitemap.xml unreadable XML and break the llms.txt link.
        (lambda text: text.replace('path = "/arcade"', 'path = "/arc\\u0001ade"'), "pages.3.path"),
        (lambda text: text.replace('path = "/arcade"', 'path = "/arc\\nade"'), "pages.3.path"),
        (lambda text: text.replace('path = "/arcade"', 'path = "/arc\\u00e9"'), "pages.3.path"),
        (lambda text: text.replace('title = "Pricing"', 'title = "[Pricing]"'), "pages.2.title"),
        (lambda text: text.replace('tier = "Pro"', 'tier = "Pro"\ncolour = "gold"'), "pricing.2.colour"),
        (lambda text: text.replace("safety = [", "safety = 3\nunused = ["), "safety: Input should be"),
    ],
)
def test_a_bad_content_file_fails_fast_naming_the_fault(edit, message):
    """A content file that does not fit the model raises ContentError naming the member at fault."""
    with pytest.raises(ContentError, match=re.escape(message)):
        parse_content(edit(DEFAULT_TOML), "content.toml")


def test_a_missing_content_file_stops_the_app(make_client, tmp_path: Path):
    """A content file that cannot be read stops create_app with a message naming the file."""
    missing = tmp_path / "absent.toml"
    expected = f"discovery content {re.escape(str(missing))} cannot be read"
    with pytest.raises(ContentError, match=expected), make_client(content_file=missing):
        pass


def test_the_sitemap_holds_the_newest_rooms_within_the_protocols_bounds():
    """At most 50,000 URLs and 50 MB, pages first, then rooms newest first: past either bound the
    oldest rooms are left out, never the document made one crawlers refuse."""
    from service.discovery import sitemaps

    moment = datetime(2026, 6, 29, 12, tzinfo=UTC)
    rooms = [(f"https://launchrooms.example/rooms/r{n:05d}", moment - timedelta(minutes=n)) for n in range(50_010)]
    listed = sitemaps.sitemap_xml(load_content(), BASE, rooms)
    locs = re.findall(rb"<loc>([^<]+)</loc>", listed)
    assert len(locs) == sitemaps.MAX_URLS
    assert locs[-1] == rooms[sitemaps.MAX_URLS - len(load_content().pages) - 1][0].encode()  # the newest
    long = [(f"https://launchrooms.example/rooms/{n:05d}-{'x' * 2000}", moment) for n in range(30_000)]
    bounded = sitemaps.sitemap_xml(load_content(), BASE, long)
    assert len(bounded) <= sitemaps.MAX_BYTES < len(long) * 2000
    assert bounded.endswith(b"</urlset>\n")
    assert b"/rooms/00000-" in bounded and b"/rooms/29999-" not in bounded
