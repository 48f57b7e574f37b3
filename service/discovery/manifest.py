"""``/agent.json`` (also at ``/.well-known/agent.json``), ``/api/v1`` and ``/room-schema.json``."""

from __future__ import annotations

from typing import Any, get_args

from service.bodies import FORM as FORM_BODY
from service.bodies import JSON as JSON_BODY
from service.discovery.catalog import INTERFACE_VERSION, PUBLIC_API_VERSION, public_api
from service.discovery.content import Content
from service.discovery.room import room_schema
from service.discovery.schemas import (
    AgentManifest,
    ApiIndex,
    AuthorityLabelEntry,
    RoomTypeEntry,
    WaitlistEntry,
)
from service.discovery.surfaces import (
    AGENT_JSON,
    API_INDEX,
    CATALOG,
    DOCUMENTS,
    LLMS_TXT,
    OPENAPI,
    TEST_VECTORS,
    WAITLIST_PATH,
    event_schema_urls,
    partner_page_links,
    url,
)
from service.waitlist import WaitlistRequest

# Read from the code that validates the body, so the manifest cannot promise what it refuses.
WAITLIST_CONTENT_TYPES = [JSON_BODY, FORM_BODY]
WAITLIST_INTENTS = list(get_args(WaitlistRequest.model_fields["intent"].annotation))


def _waitlist(base_url: str) -> WaitlistEntry:
    return WaitlistEntry(
        url=url(base_url, WAITLIST_PATH),
        method="POST",
        contentTypes=WAITLIST_CONTENT_TYPES,
        intents=WAITLIST_INTENTS,
    )


def agent_manifest(content: Content, base_url: str) -> AgentManifest:
    return AgentManifest(
        name=content.site_name,
        description=content.summary,
        roomDescription=" ".join(content.paragraphs),
        version=INTERFACE_VERSION,
        baseUrl=base_url,
        publicApi=public_api(base_url),
        publicApiVersion=PUBLIC_API_VERSION,
        documents={
            **{surface.key: url(base_url, surface.path) for surface in DOCUMENTS},
            **partner_page_links(base_url),
        },
        catalog=url(base_url, CATALOG.path),
        openapi=url(base_url, OPENAPI.path),
        eventSchemas=event_schema_urls(base_url),
        waitlist=_waitlist(base_url),
        safetyBoundaries=list(content.safety),
        instructions=list(content.instructions),
        authorityLabels=[
            AuthorityLabelEntry(id=a.id, label=a.label, meaning=a.meaning, preserve=a.preserve)
            for a in content.authority
        ],
        roomTypes=[RoomTypeEntry(id=r.id, label=r.label, meaning=r.meaning) for r in content.room_types],
        pricing=list(content.pricing),
        attribution=content.attribution,
        caching=content.caching,
    )


def api_index(base_url: str) -> ApiIndex:
    return ApiIndex(
        kind="service.public.api-index",
        publicApi=public_api(base_url),
        publicApiVersion=PUBLIC_API_VERSION,
        interfaceVersion=INTERFACE_VERSION,
        links={
            "self": url(base_url, API_INDEX.path),
            "webhookCatalog": url(base_url, CATALOG.path),
            "webhookTestVectors": url(base_url, TEST_VECTORS.path),
            "openapi": url(base_url, OPENAPI.path),
            "waitlist": url(base_url, WAITLIST_PATH),
            "agentManifest": url(base_url, AGENT_JSON.path),
            "llmsTxt": url(base_url, LLMS_TXT.path),
            **partner_page_links(base_url),
        },
    )


def public_room_schema(content: Content, base_url: str) -> dict[str, Any]:
    return room_schema(
        base_url,
        {
            "authority": {a.id: (a.label, a.meaning) for a in content.authority},
            "roomType": {r.id: (r.label, r.meaning) for r in content.room_types},
        },
    )
