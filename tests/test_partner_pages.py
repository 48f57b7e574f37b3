"""The partner pages: served like every document, equal to a fresh render of the notebooks, linked everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from llms_txt import parse_llms_file

from analytics import pages as rendering
from service.discovery.partner_pages import CONTENT_SECURITY_POLICY, UnfilledPage, fill
from service.partner_docs import BASE_URL_TOKEN
from service.settings import Settings

BASE = "https://partners.example/launch"
ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "service" / "partner_docs" / "pages"
HTML, MARKDOWN = "text/html; charset=utf-8", "text/markdown; charset=utf-8"
PAGES = {
    "/docs/webhooks/": HTML,
    "/docs/webhooks/index.md": MARKDOWN,
    "/docs/webhooks/event-catalog": HTML,
    "/docs/webhooks/event-catalog.md": MARKDOWN,
    "/docs/webhooks/verifying-signatures": HTML,
    "/docs/webhooks/verifying-signatures.md": MARKDOWN,
    "/docs/webhooks/pages.css": "text/css; charset=utf-8",
}
URL = re.compile(r"https?://[^\s\"'<>)\]`,]+")
# Origins the pages may name in links (never load from): the Standard Webhooks specification, and
# the example rooms and partner endpoint of the event examples, which are signed payload bytes.
# JSON Schema's dialect URI names the draft inside each schema.
FOREIGN_LINKS = (
    "https://www.standardwebhooks.com/",
    "https://json-schema.org/draft/2020-12/schema",
    "https://launchrooms.example/rooms/",
    "https://launchrooms.example/projects/",
    "https://partner.example/",
)


@pytest.mark.parametrize(("path", "media_type"), list(PAGES.items()))
def test_pages_are_served_with_validators_csp_304_and_head(make_client, path, media_type):
    """Each page: 200 in UTF-8, strong ETag, Cache-Control, the script-free CSP; 304 on its ETag; HEAD alike."""
    with make_client(base_url=BASE) as client:
        response = client.get(path)
        head = client.head(path)
        again = client.get(path, headers={"if-none-match": response.headers["etag"]})
        stale = client.get(path, headers={"if-none-match": '"stale"'})
    assert response.status_code == 200
    assert response.headers["content-type"] == media_type
    assert re.fullmatch(r'"[0-9a-f]{32}"', response.headers["etag"])
    assert response.headers["cache-control"] == "public, max-age=300"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.content.decode("utf-8")
    assert (head.status_code, head.content) == (200, b"")
    for name in ("content-type", "content-length", "etag", "cache-control", "content-security-policy"):
        assert head.headers[name] == response.headers[name]
    assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", response.headers["etag"])
    assert (stale.status_code, stale.content) == (200, response.content)


def test_the_index_without_its_slash_redirects_to_it(make_client):
    """/docs/webhooks answers 308 to /docs/webhooks/ (under the base URL); an unknown page is a JSON 404."""
    with make_client(base_url=BASE) as client:
        moved = client.get("/docs/webhooks", follow_redirects=False)
        missing = client.get("/docs/webhooks/nothing-here")
    assert (moved.status_code, moved.headers["location"]) == (308, BASE + "/docs/webhooks/")
    assert missing.status_code == 404
    assert missing.json["ok"] is False


@pytest.mark.parametrize("path", ["/docs/webhooks//", "/docs/webhooks///"])
def test_the_index_under_any_other_spelling_redirects_to_it(make_client, path):
    """Routing also hands `/docs/webhooks//` to the index, whose relative links would then resolve
    to pages that do not exist: it is sent to the one address instead."""
    with make_client(base_url=BASE) as client:
        moved = client.get(path, follow_redirects=False)
        index = client.get("/docs/webhooks/")
    assert (moved.status_code, moved.headers["location"]) == (308, BASE + "/docs/webhooks/")
    assert index.status_code == 200


@pytest.mark.parametrize(
    "page", ["/docs/webhooks/event-catalog", "/docs/webhooks/verifying-signatures.md", "/docs/webhooks/pages.css"]
)
def test_a_page_with_a_slash_after_it_redirects_to_the_page(make_client, page):
    """A page is not a folder: `/docs/webhooks/event-catalog/` is sent to the page (its relative
    links would resolve a level too deep there), as `/llms.txt/` is served as `/llms.txt`; a slash
    after an unknown page is still a 404."""
    with make_client(base_url=BASE) as client:
        moved = client.get(page + "/", follow_redirects=False)
        head = client.head(page + "/", follow_redirects=False)
        served = client.get(page)
        missing = client.get("/docs/webhooks/nothing-here/")
    assert (moved.status_code, moved.headers["location"]) == (308, BASE + page)
    assert (head.status_code, head.headers["location"]) == (308, BASE + page)
    assert served.status_code == 200
    assert missing.status_code == 404


def test_the_policy_allows_no_script_and_no_other_origin():
    """The CSP denies by default, names no script source and allows only this origin and inline data images."""
    directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'none'"
    assert "script-src" not in directives
    assert directives["style-src"] == "'self'"
    assert directives["img-src"] == "'self' data:"
    assert directives["frame-ancestors"] == "'none'"


def test_stored_pages_equal_a_fresh_render_of_the_notebooks():
    """What the package serves is exactly what rendering the committed notebooks gives (run make notebooks)."""
    fresh = rendering.stored_files()
    stored = {path.name: path.read_text(encoding="utf-8") for path in STORED.iterdir()}
    assert sorted(stored) == sorted(fresh)
    for name, text in fresh.items():
        assert stored[name] == text, f"{name} differs from a fresh render: run make notebooks"


@pytest.mark.parametrize("path", [path for path in PAGES if not path.endswith(".css")])
def test_every_service_url_is_written_from_base_url(make_client, path):
    """No token and no notebook address remain; every link to the service starts with base_url."""
    with make_client(base_url=BASE) as client:
        text = client.get(path).text
    assert BASE_URL_TOKEN not in text
    assert "@@" not in text
    assert rendering.NOTEBOOK_BASE_URL + "/api/" not in text
    assert rendering.NOTEBOOK_BASE_URL + "/docs/" not in text
    own = [found for found in URL.findall(text) if not found.startswith(FOREIGN_LINKS)]
    assert own
    assert [found for found in own if not found.startswith(BASE + "/")] == []


def test_the_html_loads_nothing_from_another_origin(make_client):
    """Every stylesheet, image or frame a page loads is same-origin or inline; no script element exists."""
    with make_client(base_url=BASE) as client:
        for path, media_type in PAGES.items():
            if media_type != HTML:
                continue
            soup = BeautifulSoup(client.get(path).text, "html.parser")
            assert soup.find("script") is None
            assert soup.find("style") is None
            assert not soup.find_all(style=True)
            assert soup.html is not None and soup.html.get("lang") == "en"
            for tag in soup.find_all(["link", "img", "iframe", "source", "video", "audio"]):
                source = tag.get("href") if tag.name == "link" else tag.get("src")
                if tag.name == "link" and "alternate" in tag.get("rel", []):
                    continue
                assert str(source).startswith((BASE + "/", "data:")), (path, str(tag))


def test_a_placeholder_left_in_a_stored_page_stops_it_being_served():
    """fill() writes the base URL and refuses a page with any other token, so none can be served."""
    assert fill(f"<a href=\"{BASE_URL_TOKEN}/docs/\">", "https://x.example/") == '<a href="https://x.example/docs/">'
    with pytest.raises(UnfilledPage):
        fill("see @@SERVICE_OTHER@@", BASE)


def test_setup_cells_are_tagged_and_left_out():
    """Notebook setup (imports of the service or analytics) is tagged, and no page shows it."""
    for name in ("01-event-catalog.ipynb", "02-verifying-signatures.ipynb"):
        cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
        for cell in cells:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            tags = set(cell.get("metadata", {}).get("tags", ()))
            if re.search(r"^\s*(from|import) (service|analytics)\b", source, re.MULTILINE):
                assert tags & {"remove-cell", "remove-input"}, (name, source[:80])
    for path in STORED.glob("*"):
        text = path.read_text()
        assert not re.search(r"(from|import) (service|analytics)\b", text), path.name
        assert "NOTEBOOK_SERVICE" not in text


def test_discovery_documents_link_the_pages(make_client):
    """llms.txt, llms-full.txt, agent.json, agent-sitemap.xml, /api/v1 and the catalog name the pages."""
    pages = {
        "partnerDocs": f"{BASE}/docs/webhooks/",
        "partnerEventCatalog": f"{BASE}/docs/webhooks/event-catalog",
        "partnerVerifyingSignatures": f"{BASE}/docs/webhooks/verifying-signatures",
    }
    markdown = [f"{BASE}/docs/webhooks/index.md", *(url + ".md" for url in list(pages.values())[1:])]
    with make_client(base_url=BASE) as client:
        llms = parse_llms_file(client.get("/llms.txt").text)
        full = client.get("/llms-full.txt").text
        manifest = client.get("/agent.json").json
        sitemap = client.get("/agent-sitemap.xml").text
        index = client.get("/api/v1").json
        catalog = client.get("/api/v1/webhooks/events").json
        linked = {url: client.get(url.removeprefix(BASE)).status_code for url in [*pages.values(), *markdown]}
    assert [link["url"] for link in llms.sections["Partner documentation"]] == markdown
    for url in [*pages.values(), *markdown]:
        assert url in full
        assert f"<loc>{url}</loc>" in sitemap
    assert {key: manifest["documents"][key] for key in pages} == pages
    assert {key: index["links"][key] for key in pages} == pages
    assert catalog["signature"]["guide"] == pages["partnerVerifyingSignatures"]
    assert catalog["signature"]["testVectors"] == f"{BASE}/api/v1/webhooks/test-vectors"
    assert f"{BASE}/api/v1/webhooks/test-vectors" in catalog["signature"]["verification"]
    assert set(linked.values()) == {200}


def test_the_catalog_page_sends_partners_to_the_catalogs_timeout_and_schedule():
    """The page is rendered before any deployment is configured, so it promises no timeout of its own:
    it gives the default only as the default and names subscriptionModel.retry, which states the
    deployment's SERVICE_WEBHOOK_TIMEOUT and SERVICE_WEBHOOK_RETRY_SCHEDULE."""
    default = Settings.model_fields["webhook_timeout"].default
    for name in ("event-catalog.md", "event-catalog.html"):
        text = " ".join((STORED / name).read_text(encoding="utf-8").split())
        assert f"The timeout ({default:g} seconds by default) and the retry schedule" in text, name
        assert "subscriptionModel.retry" in text, name
        assert re.findall(r"within \d+(?:\.\d+)? s(?:econds)?\b", text) == [], name
