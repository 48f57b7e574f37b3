"""Every read-only document of the service, rendered when the app is built.

Static documents depend only on the content file, ``base_url``, the models and the delivery terms
the catalog promises (``SERVICE_WEBHOOK_TIMEOUT``, ``SERVICE_WEBHOOK_RETRY_SCHEDULE``), so they are
rendered once per process start (a content or settings change takes a restart). ``sitemap.xml``
also lists the rooms named by published events, which change while the server runs;
``RoomSitemap`` keeps it current:

- In this process, the publisher calls ``Discovery.rooms_changed()`` after storing an event, and
  the next request re-renders.
- Events stored by other processes (another server worker, ``python -m service events publish``)
  are picked up within ``SITEMAP_TTL``: once the rendering is that old, the next request reads the
  events stored since the last read (with an overlap, so a late commit is not missed) and
  re-renders only when a room was added or moved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from service.clock import Clock
from service.db.rooms import known_rooms, latest_event_time
from service.discovery.caching import CachedDocument, cached, json_bytes
from service.discovery.catalog import DeliveryTerms, catalog_document, event_document
from service.discovery.content import Content, load_content
from service.discovery.llms import llms_full_txt, llms_txt
from service.discovery.manifest import agent_manifest, api_index, public_room_schema
from service.discovery.openapi import openapi_document
from service.discovery.partner_pages import render_pages as partner_pages
from service.discovery.sitemaps import Room, agent_sitemap_xml, robots_txt, sitemap_xml
from service.discovery.surfaces import (
    AGENT_JSON,
    AGENT_SITEMAP,
    API_INDEX,
    CATALOG,
    JSON,
    LLMS_FULL_TXT,
    LLMS_TXT,
    OPENAPI,
    ROBOTS,
    ROOM_SCHEMA,
    TEST_VECTORS,
    WELL_KNOWN_AGENT_JSON,
    XML,
)
from service.discovery.vectors import vectors_document
from service.errors import ServiceUnavailable
from service.events import EVENT_MODELS
from service.settings import Settings

log = logging.getLogger("service.discovery")

# How stale sitemap.xml may be about rooms published by another process. A minute is far below
# how often crawlers read a sitemap, and bounds the database work to one small read a minute.
SITEMAP_TTL = timedelta(seconds=60)
# Events are re-read from this long before the newest one already seen: an event whose
# transaction committed after a newer one was read is still found. Re-reading is harmless (the
# merge keeps the latest time per room).
LATE_COMMIT_OVERLAP = timedelta(minutes=5)
# After a failed read, the stale rendering is served this long before the next try.
RETRY_AFTER_FAILURE = timedelta(seconds=5)


class RoomSitemap:
    """``sitemap.xml``: the configured pages plus every room published events have named."""

    def __init__(
        self, render: Callable[[Sequence[Room]], bytes], clock: Clock, ttl: timedelta = SITEMAP_TTL
    ) -> None:
        self._render = render
        self._clock = clock
        self._ttl = ttl
        self._rooms: dict[str, datetime] = {}
        self._since: datetime | None = None  # read events stored from here on; None: all
        self._document: CachedDocument | None = None
        self._fresh_until: datetime | None = None
        self._generation = 0  # bumped by rooms_changed(), so a read racing it does not count
        self._lock = asyncio.Lock()

    def rooms_changed(self) -> None:
        """An event was stored: the next request re-reads the rooms."""
        self._generation += 1
        self._fresh_until = None

    async def current(self, engine: AsyncEngine) -> CachedDocument:
        fresh_until = self._fresh_until
        if self._document is not None and fresh_until is not None and self._clock() < fresh_until:
            return self._document
        async with self._lock:  # one read at a time; the requests queued behind it reuse it
            fresh_until = self._fresh_until
            if self._document is not None and fresh_until is not None and self._clock() < fresh_until:
                return self._document
            return await self._refresh(engine)

    async def _refresh(self, engine: AsyncEngine) -> CachedDocument:
        generation = self._generation
        began = self._clock()
        try:
            async with engine.connect() as conn:
                newest = await latest_event_time(conn)
                found = await known_rooms(conn, since=self._since)
        except Exception as error:
            if self._document is None:
                raise ServiceUnavailable() from error
            log.warning("reading rooms for sitemap.xml failed; serving the last rendering", exc_info=True)
            self._fresh_until = self._clock() + RETRY_AFTER_FAILURE
            return self._document
        changed = self._document is None
        for room_url, lastmod in found:
            if room_url not in self._rooms or lastmod > self._rooms[room_url]:
                self._rooms[room_url] = lastmod
                changed = True
        if newest is not None:
            # Never past this process's own clock: an event stamped ahead of it (a publisher on a
            # machine whose clock runs fast) would otherwise hide every room published here until
            # that time came.
            self._since = min(newest, began) - LATE_COMMIT_OVERLAP
        if changed:
            rooms = sorted(self._rooms.items(), key=lambda room: (-room[1].timestamp(), room[0]))
            body = self._render(rooms)
            if self._document is None or body != self._document.body:
                self._document = cached(body, XML)
        if generation == self._generation:
            self._fresh_until = self._clock() + self._ttl
        assert self._document is not None
        return self._document


@dataclass(frozen=True, slots=True)
class Discovery:
    """What the discovery routes serve: rendered documents by path, event documents by kind."""

    content: Content
    documents: dict[str, CachedDocument]
    event_documents: dict[str, CachedDocument]
    sitemap: RoomSitemap
    partner_pages: dict[str, CachedDocument]  # /docs/webhooks/: HTML, Markdown, stylesheet

    def rooms_changed(self) -> None:
        """Call after storing an event: sitemap.xml re-reads the rooms on its next request."""
        self.sitemap.rooms_changed()


def render_documents(content: Content, base_url: str, terms: DeliveryTerms) -> dict[str, CachedDocument]:
    """Every static document by path. Pure: the same input gives the same bytes and ETags.
    ``terms`` has no default: a catalog stating the defaults where the worker is configured
    otherwise misleads every partner who builds to it."""
    manifest = agent_manifest(content, base_url).model_dump(mode="json", exclude_none=True)
    agent_json = cached(json_bytes(manifest), JSON)
    return {
        LLMS_TXT.path: cached(llms_txt(content, base_url), LLMS_TXT.media_type),
        LLMS_FULL_TXT.path: cached(llms_full_txt(content, base_url), LLMS_FULL_TXT.media_type),
        AGENT_JSON.path: agent_json,
        WELL_KNOWN_AGENT_JSON.path: agent_json,
        ROOM_SCHEMA.path: cached(json_bytes(public_room_schema(content, base_url)), JSON),
        AGENT_SITEMAP.path: cached(agent_sitemap_xml(base_url), XML),
        ROBOTS.path: cached(robots_txt(base_url), ROBOTS.media_type),
        API_INDEX.path: cached(json_bytes(api_index(base_url).model_dump(mode="json")), JSON),
        OPENAPI.path: cached(json_bytes(openapi_document(content, base_url)), JSON),
        CATALOG.path: cached(json_bytes(catalog_document(base_url, terms)), JSON),
        TEST_VECTORS.path: cached(json_bytes(vectors_document(base_url)), JSON),
    }


def render_event_documents(base_url: str) -> dict[str, CachedDocument]:
    documents: dict[str, CachedDocument] = {}
    for kind in EVENT_MODELS:
        document = event_document(base_url, kind)
        assert document is not None  # every kind of EVENT_MODELS is in the catalog
        documents[kind] = cached(json_bytes(document), JSON)
    return documents


def build_discovery(settings: Settings, clock: Clock) -> Discovery:
    """Load the content (``ContentError`` stops the start) and render every document."""
    content = load_content(settings.content_file)
    base_url = settings.base_url
    return Discovery(
        content=content,
        documents=render_documents(content, base_url, DeliveryTerms.from_settings(settings)),
        event_documents=render_event_documents(base_url),
        sitemap=RoomSitemap(lambda rooms: sitemap_xml(content, base_url, rooms), clock),
        partner_pages=partner_pages(base_url),
    )
