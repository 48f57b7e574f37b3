"""The partner pages: webhook documentation published under ``/docs/webhooks/``.

Partners never see the repository, so the service serves what they need from it: an index, the
event catalog (notebook 01) and signature verification (notebook 02), each as HTML and as Markdown
(the same path plus ``.md``). ``make notebooks`` renders them from the committed notebooks into
``pages/`` (``analytics.pages``); the server reads them from there (``service.discovery.partner_pages``).

This module is the table both sides read: where each page lives and what it is. It imports nothing
from the service, so the catalog, the discovery documents and the renderer can all name the pages.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "/docs/webhooks/"
# Written in the stored pages wherever the service's own address goes; ``serve`` replaces it with
# the configured base URL, and refuses to serve a page where any is left.
BASE_URL_TOKEN = "@@SERVICE_BASE_URL@@"  # noqa: S105 - a placeholder, not a secret
STYLESHEET = ROOT + "pages.css"


@dataclass(frozen=True, slots=True)
class PartnerPage:
    key: str  # the member naming it in agent.json, /api/v1 and the catalog's signature object
    slug: str  # "" for the index
    notebook: str | None  # the notebook it is rendered from, under notebooks/
    title: str
    notes: str

    @property
    def path(self) -> str:
        return ROOT + self.slug

    @property
    def markdown_path(self) -> str:
        return (self.path + "index" if not self.slug else self.path) + ".md"

    @property
    def stem(self) -> str:
        """The stored files' name: ``<stem>.html`` and ``<stem>.md``."""
        return self.slug or "index"


INDEX = PartnerPage(
    "partnerDocs",
    "",
    None,
    "Webhook documentation for partners",
    "Index of the partner pages: event catalog and signature verification, as HTML and Markdown.",
)
EVENT_CATALOG = PartnerPage(
    "partnerEventCatalog",
    "event-catalog",
    "01-event-catalog.ipynb",
    "Webhook events, one by one",
    "Every event kind: meaning, trigger, trust boundary, dedupe key, members, example and a signed delivery.",
)
VERIFYING_SIGNATURES = PartnerPage(
    "partnerVerifyingSignatures",
    "verifying-signatures",
    "02-verifying-signatures.ipynb",
    "Verifying webhook signatures",
    "How to check a delivery's signatures, with Python and Node.js code to copy; checked against the "
    "test vectors.",
)
PAGES = (INDEX, EVENT_CATALOG, VERIFYING_SIGNATURES)


def page_url(base_url: str, page: PartnerPage, *, markdown: bool = False) -> str:
    return base_url.rstrip("/") + (page.markdown_path if markdown else page.path)
