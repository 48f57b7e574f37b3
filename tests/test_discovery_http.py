"""HTTP semantics of the read-only documents (RFC 9110): conditional requests, methods, paths, hosts.

Read over real HTTP with the shared client; what ``test_discovery.py`` and ``test_catalog_routes.py``
already hold (one If-None-Match line, HEAD, media types, unknown ids) is not repeated here.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest

BASE = "https://rooms.example"
EVENT = "/api/v1/webhooks/events/room.claimed"
# One document of each kind and route: text, JSON, the database-backed sitemap, the XML written at
# start, an event document (the parameter route), a partner page.
SAMPLE = ["/llms.txt", "/agent.json", "/sitemap.xml", "/agent-sitemap.xml", EVENT, "/docs/webhooks/"]
# Every read-only route of the brief, the catalog and a partner page included.
ROUTES = [
    "/llms.txt",
    "/llms-full.txt",
    "/agent.json",
    "/.well-known/agent.json",
    "/room-schema.json",
    "/sitemap.xml",
    "/agent-sitemap.xml",
    "/robots.txt",
    "/api/v1",
    "/api/v1/openapi.json",
    "/api/v1/webhooks/events",
    "/api/v1/webhooks/test-vectors",
    EVENT,
    "/docs/webhooks/",
    "/docs/webhooks/index.md",
]
NOT_ALLOWED = {"ok": False, "message": "This method is not allowed here."}
UNKNOWN = {"ok": False, "message": "No event kind with this id is in the catalog."}
SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


# --- If-None-Match over several field lines ------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        (['"stale"', "{etag}"], 304),
        (["{etag}", '"stale"'], 304),
        (['"stale", "older"', "W/{etag}"], 304),
        (['"stale"', "*"], 304),
        (['"stale"', '"older", W/"other"'], 200),
    ],
)
@pytest.mark.parametrize("path", SAMPLE)
def test_if_none_match_over_several_lines_is_one_list(make_client, path, lines, status):
    """RFC 9110 5.3: If-None-Match is a list, so two lines mean their comma-joined values; any tag
    on any line that matches (weakly) answers 304 with the validators, for GET and HEAD alike."""
    with make_client(base_url=BASE) as client:
        first = client.get(path)
        etag = first.headers["etag"]
        headers = [("if-none-match", line.format(etag=etag)) for line in lines]
        get = client.get(path, headers=headers)
        head = client.head(path, headers=headers)
    for response in (get, head):
        assert response.status_code == status
        assert response.headers["etag"] == etag
        assert response.headers["cache-control"] == "public, max-age=300"
    assert get.content == (b"" if status == 304 else first.content)
    assert head.content == b""


# --- event ids: percent-encoded unreserved characters, hostile values -------------------------------


@pytest.mark.parametrize(
    "event_id", ["room%2Eclaimed", "room%2eclaimed", "%72oom.claimed", "%72%6F%6F%6D%2E%63%6C%61%69%6D%65%64"]
)
def test_an_event_id_with_percent_encoded_unreserved_characters_is_the_same_document(make_client, event_id):
    """RFC 9110 4.2.3: an unreserved character and its percent-encoding are equivalent, so
    ``room%2Eclaimed`` names ``room.claimed``: the same bytes, ETag and 304."""
    with make_client(base_url=BASE) as client:
        plain = client.get(EVENT)
        encoded = client.get(f"/api/v1/webhooks/events/{event_id}")
        head = client.head(f"/api/v1/webhooks/events/{event_id}")
        again = client.get(
            f"/api/v1/webhooks/events/{event_id}", headers={"if-none-match": plain.headers["etag"]}
        )
    assert (encoded.status_code, encoded.content) == (200, plain.content)
    for name in ("etag", "cache-control", "content-type", "content-length"):
        assert encoded.headers[name] == head.headers[name] == plain.headers[name]
    assert (head.status_code, head.content) == (200, b"")
    assert (again.status_code, again.content) == (304, b"")


@pytest.mark.parametrize(
    "event_id",
    [
        "%2e%2e",
        "%2E%2E%2Fopenapi.json",
        "%2F",
        "a%2Fb",
        "room.claimed%2F",
        "room%2Fclaimed",
        "%00",
        "room.claimed%00",
        "room.claimed%20",
        "%ff",
        "room.claimed%ff",
        "%c3%28",
        "%ED%A0%80",
        "%",
        "%zz",
        "room%252Eclaimed",
        "ROOM%2ECLAIMED",
        "a" * 4000,
    ],
)
def test_a_hostile_event_id_is_404_in_the_error_shape(make_client, event_id):
    """Traversal, encoded slashes, NUL, bytes that are not UTF-8, double encoding, a long id: 404,
    the fixed sentence, nothing echoed; HEAD alike without a body."""
    with make_client(base_url=BASE) as client:
        response = client.get(f"/api/v1/webhooks/events/{event_id}")
        head = client.head(f"/api/v1/webhooks/events/{event_id}")
    assert (response.status_code, response.json) == (404, UNKNOWN)
    assert (head.status_code, head.content) == (404, b"")


@pytest.mark.parametrize(
    ("spelled", "path"),
    [
        ("/llms%2Etxt", "/llms.txt"),
        ("/llms%2etxt", "/llms.txt"),
        ("/%6C%6C%6D%73-full.txt", "/llms-full.txt"),
        ("/%2Ewell-known/agent.json", "/.well-known/agent.json"),
        ("/api/v1/webhooks/event%73", "/api/v1/webhooks/events"),
        ("/docs/webhooks/verifying-signatures%2Emd", "/docs/webhooks/verifying-signatures.md"),
        ("/sitemap%2Exml?a=%2E", "/sitemap.xml?a=%2E"),
    ],
)
def test_a_document_path_escaping_unreserved_characters_is_sent_to_its_spelling(make_client, spelled, path):
    """RFC 3986 6.2.2.2: ``/llms%2Etxt`` is ``/llms.txt``. A read that routing missed only for such
    escapes is a 308 to the plain spelling under the base URL, its query kept, which serves the
    document."""
    with make_client(base_url=BASE) as client:
        first = client.get(spelled, follow_redirects=False)
        head = client.head(spelled, follow_redirects=False)
        served = client.get(path)
    assert (first.status_code, first.headers["location"]) == (308, BASE + path)
    assert (head.status_code, head.headers["location"]) == (308, BASE + path)
    assert served.status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/llms.txt%2F", 404),
        ("GET", "/llms%2Ftxt", 404),
        ("GET", "/llms%00.txt", 404),
        ("GET", "/llms%252Etxt", 404),
        ("GET", "/nothing%2Ehere", 404),
        ("GET", "/%2E%2E/llms.txt", 404),
        ("GET", "/docs/%2E%2E/llms.txt", 404),
        ("GET", "/api/v1/webhooks/event%73/%2E%2E", 404),
        ("GET", "/docs/webhooks/%2E/index.md", 404),
        ("GET", "/sitemap.xml?a=%2E", 200),
        ("POST", "/api/waitlis%74", 404),
        ("DELETE", "/llms%2Etxt", 404),
    ],
)
def test_only_unreserved_escapes_of_a_read_are_respelled(make_client, method, path, status):
    """A reserved character's escape (``%2F``), NUL, a double escape: still 404 in the error shape,
    since they name other paths. Only reads are respelled, and only their path: a query's escapes
    are the query's. Only to a path a route takes: never to one that does not exist, nor to one
    with a dot segment (``/%2E%2E/x``), which a client would resolve somewhere else on the host."""
    with make_client(base_url=BASE) as client:
        response = client.request(method, path, follow_redirects=False)
    assert response.status_code == status
    if status == 404:
        assert response.json == {"ok": False, "message": "Nothing is here."}


def test_an_escaped_admin_path_is_respelled_only_after_the_token(make_client):
    """Under ``/admin`` the token is checked before anything else is said, escapes or not."""
    with make_client(base_url=BASE, admin_token="t" * 32) as client:
        refused = client.get("/admin/partner%73", follow_redirects=False)
        moved = client.get(
            "/admin/partner%73", headers={"authorization": "Bearer " + "t" * 32}, follow_redirects=False
        )
    assert refused.status_code == 401
    assert (moved.status_code, moved.headers["location"]) == (308, BASE + "/admin/partners")


# --- what was already right, held --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch", "options"])
def test_other_methods_are_405_with_allow_on_every_route(make_client, method):
    """Every read-only route refuses other methods (OPTIONS too) with 405, ``Allow`` and the error shape."""
    with make_client(base_url=BASE) as client:
        responses = {path: client.request(method, path) for path in [*ROUTES, "/docs/webhooks"]}
    for path, response in responses.items():
        assert (response.status_code, response.json) == (405, NOT_ALLOWED), path
        assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD"}, path


@pytest.mark.parametrize(
    "headers",
    [
        {"range": "bytes=0-10"},
        {"range": "bytes=999999-"},
        {"range": "lines=1-2"},
        {"if-range": "{etag}", "range": "bytes=0-10"},
        {"if-modified-since": "Wed, 21 Oct 2015 07:28:00 GMT"},
        {"if-modified-since": "Thu, 01 Jan 2099 00:00:00 GMT"},
        {"if-modified-since": "yesterday"},
        {"if-none-match": '"stale"', "if-modified-since": "Thu, 01 Jan 2099 00:00:00 GMT"},
        {"accept": "application/json;q=0, text/plain;q=0"},
        {"accept": ";;; not a media range"},
        {"accept": "*/*"},
    ],
)
def test_range_dates_and_accept_leave_the_full_document(make_client, headers):
    """No Range support and no Last-Modified: Range, If-Range and If-Modified-Since are ignored
    (the whole document, 200, never a 206 or 416), and one representation is sent whatever Accept says."""
    with make_client(base_url=BASE) as client:
        for path in SAMPLE:
            plain = client.get(path)
            sent = {name: value.format(etag=plain.headers["etag"]) for name, value in headers.items()}
            response = client.get(path, headers=sent)
            assert (response.status_code, response.content) == (200, plain.content), path
            assert "content-range" not in response.headers
            assert "vary" not in response.headers  # nothing is negotiated, so nothing to vary on


def test_no_document_reflects_a_clients_host_or_forwarded_headers(make_client):
    """Absolute URLs come from ``base_url``; a hostile Host or forwarded header changes no byte."""
    hostile = {
        "host": "evil.example",
        "x-forwarded-host": "evil.example",
        "x-forwarded-proto": "gopher",
        "x-forwarded-prefix": "/evil",
        "forwarded": "host=evil.example;proto=gopher",
    }
    with make_client(base_url=BASE) as client:
        for path in ROUTES:
            plain, forged = client.get(path), client.get(path, headers=hostile)
            assert forged.status_code == 200, path
            assert forged.content == plain.content, path
            assert forged.headers["etag"] == plain.headers["etag"], path
            assert b"evil" not in forged.content and b"gopher" not in forged.content, path


@pytest.mark.parametrize("path", ["/sitemap.xml", "/agent-sitemap.xml"])
def test_sitemaps_are_well_formed_xml_of_absolute_urls_under_base_url(make_client, path):
    """Each sitemap parses as XML, is a sitemaps.org urlset, and every <loc> is absolute under base_url."""
    base = "https://partners.example/launch"
    with make_client(base_url=base) as client:
        response = client.get(path, headers={"host": "evil.example"})
    root = ElementTree.fromstring(response.content)  # noqa: S314 - our own server's bytes
    assert root.tag == f"{SITEMAP}urlset"
    locations = [element.text or "" for element in root.iter(f"{SITEMAP}loc")]
    assert locations
    assert all(location.startswith(base + "/") for location in locations), locations
