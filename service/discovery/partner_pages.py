"""Serving the partner pages: the stored renderings with the base URL filled in, cached like every document.

The pages are read once, when the app is built. Each carries a Content-Security-Policy that allows
no script and nothing from another origin: the one stylesheet is same-origin, images are inline.
"""

from __future__ import annotations

from importlib import resources

from service.discovery.caching import CachedDocument, cached
from service.partner_docs import BASE_URL_TOKEN, PAGES, STYLESHEET

HTML = "text/html; charset=utf-8"
MARKDOWN = "text/markdown; charset=utf-8"
CSS = "text/css; charset=utf-8"
# The console's policy minus scripts: nothing runs, nothing loads from another origin, the pages
# cannot be framed, and no form posts anywhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
_PLACEHOLDER_MARK = "@@"  # what BASE_URL_TOKEN and any token of its kind look like


class UnfilledPage(ValueError):
    """A stored page still holds a placeholder after the base URL was filled in."""


def _stored(name: str) -> str:
    return resources.files("service.partner_docs").joinpath("pages", name).read_text(encoding="utf-8")


def fill(text: str, base_url: str) -> str:
    """``text`` with the service's address written in; refuses to leave any placeholder."""
    filled = text.replace(BASE_URL_TOKEN, base_url.rstrip("/"))
    if _PLACEHOLDER_MARK in filled:
        raise UnfilledPage("a partner page holds a placeholder the server does not fill")
    return filled


def _document(text: str, media_type: str) -> CachedDocument:
    return cached(
        text.encode("utf-8"),
        media_type,
        extra_headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY},
    )


def render_pages(base_url: str) -> dict[str, CachedDocument]:
    """Path -> document: each page as HTML and as Markdown, and their stylesheet."""
    documents = {STYLESHEET: _document(_stored("pages.css"), CSS)}
    for page in PAGES:
        documents[page.path] = _document(fill(_stored(f"{page.stem}.html"), base_url), HTML)
        documents[page.markdown_path] = _document(fill(_stored(f"{page.stem}.md"), base_url), MARKDOWN)
    return documents
