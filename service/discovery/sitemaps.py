"""``/sitemap.xml`` (human pages and rooms), ``/agent-sitemap.xml`` and ``/robots.txt``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from xml.sax.saxutils import escape

from service.discovery.content import Content
from service.discovery.surfaces import AGENT_SITEMAP, SITEMAP, machine_surfaces, url
from service.events import is_absolute_http_url

SITEMAP_NAMESPACE = "http://www.sitemaps.org/schemas/sitemap/0.9"
# sitemaps.org protocol: at most 50,000 URLs per sitemap, each <loc> 12 to 2,048 characters (its
# schema's bounds), with quotes escaped as entities too.
MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024  # and at most 50 MB (52,428,800 bytes) uncompressed
MIN_LOC = 12
MAX_LOC = 2048
_ENTITIES = {"'": "&apos;", '"': "&quot;"}

Room = tuple[str, datetime]  # (canonical room URL, when an event about it last occurred)


def w3c_datetime(moment: datetime) -> str:
    """W3C datetime in UTC to the second, as sitemaps want it; a naive datetime is a bug."""
    if moment.tzinfo is None:
        raise ValueError("lastmod needs an aware datetime")
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _urlset(entries: Iterable[tuple[str, datetime | None]], max_bytes: int = MAX_BYTES) -> bytes:
    """The entries as a sitemap, those that would take it past ``max_bytes`` left out."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', f'<urlset xmlns="{SITEMAP_NAMESPACE}">']
    end = "</urlset>"
    size = sum(len(line) + 1 for line in [*lines, end])  # ASCII so far: a character a byte
    for loc, lastmod in entries:
        modified = f"<lastmod>{w3c_datetime(lastmod)}</lastmod>" if lastmod is not None else ""
        line = f"  <url><loc>{escape(loc, _ENTITIES)}</loc>{modified}</url>"
        size += len(line.encode("utf-8")) + 1
        if size > max_bytes:
            break
        lines.append(line)
    lines.append(end)
    return ("\n".join(lines) + "\n").encode("utf-8")


def sitemap_xml(content: Content, base_url: str, rooms: Sequence[Room]) -> bytes:
    """The configured pages, then each room (newest first) up to the protocol's 50,000 URLs and
    50 MB: the newest rooms, where more were heard of.

    ``rooms`` comes from ``service.db.rooms.known_rooms``: rooms the service heard of through
    published events. A room URL the sitemap protocol cannot hold (shorter than 12 characters or
    longer than 2,048) is left out rather than truncated, and so is one that fails the events' URL
    rule: a payload stored without it (by hand, or by an earlier release) could carry control
    characters that would make the whole document unreadable XML, or a ``javascript:`` URL.
    """
    entries: list[tuple[str, datetime | None]] = [(url(base_url, page.path), None) for page in content.pages]
    seen = {loc for loc, _ in entries}
    for loc, lastmod in rooms:
        if len(entries) >= MAX_URLS:
            break
        if loc not in seen and MIN_LOC <= len(loc) <= MAX_LOC and is_absolute_http_url(loc):
            seen.add(loc)
            entries.append((loc, lastmod))
    return _urlset(entries)


def agent_sitemap_xml(base_url: str) -> bytes:
    """Every machine-readable surface: discovery documents, API index, OpenAPI, catalog, events."""
    return _urlset((loc, None) for loc in machine_surfaces(base_url))


def robots_txt(base_url: str) -> bytes:
    lines = [
        "User-agent: *",
        "Allow: /",
        "",
        f"Sitemap: {url(base_url, SITEMAP.path)}",
        f"Sitemap: {url(base_url, AGENT_SITEMAP.path)}",
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")
