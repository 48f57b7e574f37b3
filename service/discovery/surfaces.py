"""Where every read-only document lives: one table, so routes, manifests, sitemaps and OpenAPI agree."""

from __future__ import annotations

from dataclasses import dataclass

from service.discovery.catalog import schema_url
from service.events import EVENT_MODELS
from service.partner_docs import PAGES, page_url

TEXT = "text/plain; charset=utf-8"
JSON = "application/json; charset=utf-8"
XML = "application/xml; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Surface:
    key: str  # the member naming it in agent.json and /api/v1
    path: str  # under base_url
    title: str
    media_type: str
    notes: str


LLMS_TXT = Surface("llmsTxt", "/llms.txt", "llms.txt", TEXT, "Concise context for AI agents.")
LLMS_FULL_TXT = Surface(
    "llmsFullTxt",
    "/llms-full.txt",
    "llms-full.txt",
    TEXT,
    "Full context for AI agents: authority labels, the waitlist API, every event, signatures.",
)
AGENT_JSON = Surface(
    "agentManifest", "/agent.json", "Agent manifest", JSON, "Structured manifest for agents."
)
WELL_KNOWN_AGENT_JSON = Surface(
    "wellKnownAgentManifest",
    "/.well-known/agent.json",
    "Agent manifest (well-known)",
    JSON,
    "The agent manifest at its well-known address.",
)
ROOM_SCHEMA = Surface("roomSchema", "/room-schema.json", "Room schema", JSON, "JSON Schema of a public room.")
SITEMAP = Surface("sitemap", "/sitemap.xml", "Sitemap", XML, "Human pages and every known room.")
AGENT_SITEMAP = Surface(
    "agentSitemap",
    "/agent-sitemap.xml",
    "Agent sitemap",
    XML,
    "Every machine-readable surface of the service.",
)
ROBOTS = Surface("robots", "/robots.txt", "robots.txt", TEXT, "Crawler rules naming both sitemaps.")

API_INDEX = Surface("publicApi", "/api/v1", "Public API index", JSON, "Index of the versioned public API.")
OPENAPI = Surface(
    "openapi",
    "/api/v1/openapi.json",
    "OpenAPI document",
    JSON,
    "OpenAPI 3.1 description of the public API, generated from the models it validates with.",
)
CATALOG = Surface(
    "webhookCatalog",
    "/api/v1/webhooks/events",
    "Webhook event catalog",
    JSON,
    "Every webhook event kind with its payload fields, example and JSON Schema; unsigned.",
)
TEST_VECTORS = Surface(
    "webhookTestVectors",
    "/api/v1/webhooks/test-vectors",
    "Webhook signature test vectors",
    JSON,
    "Signed deliveries, genuine and tampered, with the verdict a correct verifier reaches in "
    "each signature scheme; fixed secrets and times, for any language.",
)
EVENT_SCHEMA_PATH = "/api/v1/webhooks/events/{eventId}"
WAITLIST_PATH = "/api/waitlist"

# The discovery documents at the root of the site, in the order documents list them.
DOCUMENTS = (
    LLMS_TXT,
    LLMS_FULL_TXT,
    AGENT_JSON,
    WELL_KNOWN_AGENT_JSON,
    ROOM_SCHEMA,
    SITEMAP,
    AGENT_SITEMAP,
    ROBOTS,
)
API_DOCUMENTS = (API_INDEX, OPENAPI, CATALOG, TEST_VECTORS)


def url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path


def event_schema_urls(base_url: str) -> dict[str, str]:
    """Event kind -> its single-event schema document, in catalog order."""
    return {kind: schema_url(base_url, kind) for kind in EVENT_MODELS}


def machine_surfaces(base_url: str) -> list[str]:
    """Every machine-readable URL: the agent sitemap's list."""
    root = [
        url(base_url, surface.path)
        for surface in DOCUMENTS
        if surface not in (SITEMAP, AGENT_SITEMAP, ROBOTS)
    ]
    api = [url(base_url, surface.path) for surface in API_DOCUMENTS]
    return root + api + list(event_schema_urls(base_url).values()) + partner_page_urls(base_url)


def partner_page_urls(base_url: str) -> list[str]:
    """Each partner page, as HTML and as Markdown."""
    return [page_url(base_url, page, markdown=markdown) for page in PAGES for markdown in (False, True)]


def partner_page_links(base_url: str) -> dict[str, str]:
    """Member name -> partner page (HTML; its Markdown twin is the same URL plus ``.md``)."""
    return {page.key: page_url(base_url, page) for page in PAGES}
