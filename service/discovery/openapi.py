"""``/api/v1/openapi.json``: OpenAPI 3.1 of the public API, generated from the models.

Request and response schemas are pydantic's own JSON Schemas of the models the code validates and
builds with (OpenAPI 3.1 schemas are JSON Schema 2020-12), and the event payloads appear as
OpenAPI ``webhooks``. Admin routes are not part of the public API and never appear here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from service.bodies import MAX_BODY_BYTES
from service.discovery.catalog import INTERFACE_VERSION, PUBLIC_API_VERSION
from service.discovery.catalog import signature as signature_object
from service.discovery.content import Content
from service.discovery.room import PublicRoom
from service.discovery.schemas import (
    AgentManifest,
    ApiIndex,
    CatalogDocument,
    Error,
    EventSchemaDocument,
)
from service.discovery.surfaces import (
    AGENT_JSON,
    AGENT_SITEMAP,
    API_DOCUMENTS,
    API_INDEX,
    CATALOG,
    DOCUMENTS,
    EVENT_SCHEMA_PATH,
    LLMS_FULL_TXT,
    LLMS_TXT,
    OPENAPI,
    ROBOTS,
    ROOM_SCHEMA,
    SITEMAP,
    TEST_VECTORS,
    WAITLIST_PATH,
    WELL_KNOWN_AGENT_JSON,
    Surface,
)
from service.discovery.vectors import WebhookVectors
from service.events import EVENT_MODELS
from service.model_schemas import components
from service.waitlist import WaitlistRequest, WaitlistResponse
from service.webhooks.batching import BATCHABLE, MAX_EVENTS_LIMIT

OPENAPI_VERSION = "3.1.0"
REF = "#/components/schemas/{model}"
FORM = "application/x-www-form-urlencoded"


def _component_schemas() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(model name -> $ref, components.schemas) from pydantic, with shared definitions merged."""
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (WaitlistRequest, "validation"),
        (WaitlistResponse, "serialization"),
        (Error, "serialization"),
        (AgentManifest, "serialization"),
        (ApiIndex, "serialization"),
        (CatalogDocument, "serialization"),
        (EventSchemaDocument, "serialization"),
        (PublicRoom, "serialization"),
        (WebhookVectors, "serialization"),
        *((model, "serialization") for model in EVENT_MODELS.values()),
    ]
    return components(models, REF)


def _json(ref: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": ref}}


_RETRY_AFTER = {"Retry-After": {"$ref": "#/components/headers/Retry-After"}}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": _json({"$ref": REF.format(model="Error")}),
    }
    if headers:
        response["headers"] = headers
    return response


def _waitlist_operation(refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    request = refs["WaitlistRequest"]
    return {
        "operationId": "registerWaitlist",
        "tags": ["waitlist"],
        "summary": "Register interest in claiming a room, following rooms, or adding arcade.",
        "description": (
            "A registration is (email, intent); a repeat gets the same 200 and is stored once. "
            "The body is a JSON object or an URL-encoded form with exactly these members."
        ),
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": request}, FORM: {"schema": request}},
        },
        "responses": {
            "200": {"description": "Stored.", "content": _json(refs["WaitlistResponse"])},
            "303": {
                "description": (
                    "Only where the operator sets a redirect URL, and only for a URL-encoded form whose "
                    "Accept prefers text/html (a browser without scripts): stored, then sent to that "
                    "URL; on a refusal, to the same URL with error (the code) and field in its query."
                ),
                "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
            },
            "400": _error("Invalid email or invalid waitlist payload; errors name the fields."),
            "413": _error(f"The body is over {MAX_BODY_BYTES // 1024} KiB."),
            "415": _error(
                "The body is neither application/json (in UTF-8) nor a URL-encoded form (in UTF-8, "
                "US-ASCII or ISO-8859-1), or it came under a Content-Encoding."
            ),
            "429": _error("Too many requests from this client.", _RETRY_AFTER),
            "503": _error("Storage is briefly unreachable; nothing was stored.", _RETRY_AFTER),
        },
    }


_TEXT = {"type": "string"}


def _document_schemas(refs: dict[str, dict[str, Any]]) -> dict[Surface, dict[str, Any]]:
    return {
        LLMS_TXT: _TEXT,
        LLMS_FULL_TXT: _TEXT,
        AGENT_JSON: refs["AgentManifest"],
        WELL_KNOWN_AGENT_JSON: refs["AgentManifest"],
        ROOM_SCHEMA: {
            "type": "object",
            "description": "JSON Schema 2020-12 of a public room (see the PublicRoom component).",
        },
        SITEMAP: _TEXT,
        AGENT_SITEMAP: _TEXT,
        ROBOTS: _TEXT,
        API_INDEX: refs["ApiIndex"],
        OPENAPI: {"type": "object", "description": "This document."},
        CATALOG: refs["CatalogDocument"],
        TEST_VECTORS: refs["WebhookVectors"],
    }


_CACHE_HEADERS = {
    "ETag": {"$ref": "#/components/headers/ETag"},
    "Cache-Control": {"$ref": "#/components/headers/Cache-Control"},
}


def _read_operation(
    operation_id: str, tag: str, summary: str, media_type: str, schema: dict[str, Any]
) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "tags": [tag],
        "summary": summary,
        "parameters": [
            {"$ref": "#/components/parameters/If-None-Match"},
            {"$ref": "#/components/parameters/If-Match"},
        ],
        "responses": {
            "200": {
                "description": summary,
                "headers": _CACHE_HEADERS,
                "content": {media_type: {"schema": schema}},
            },
            "304": {"description": "Not modified: your copy is current.", "headers": _CACHE_HEADERS},
            "412": _error("If-Match named none of the document's current ETag."),
        },
    }


def _operation_id(surface: Surface) -> str:
    return "get" + surface.key[:1].upper() + surface.key[1:]


def _paths(refs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    schemas = _document_schemas(refs)
    paths: dict[str, Any] = {WAITLIST_PATH: {"post": _waitlist_operation(refs)}}
    for surface in (*DOCUMENTS, *API_DOCUMENTS):
        tag = "webhooks" if surface in (CATALOG, TEST_VECTORS) else "discovery"
        media_type = surface.media_type.split(";")[0]
        operation = _read_operation(_operation_id(surface), tag, surface.notes, media_type, schemas[surface])
        if surface is SITEMAP:  # the one document read from storage (its rooms)
            operation["responses"]["503"] = _error(
                "Storage is briefly unreachable and no rendering is held yet; try again shortly.",
                _RETRY_AFTER,
            )
        paths[surface.path] = {"get": operation}
    event_schema = _read_operation(
        "getWebhookEventSchema",
        "webhooks",
        "One event kind: its catalog entry and payload JSON Schema.",
        "application/json",
        refs["EventSchemaDocument"],
    )
    event_schema["parameters"] = [
        {
            "name": "eventId",
            "in": "path",
            "required": True,
            "description": "An event kind id from the catalog.",
            "schema": {"type": "string", "examples": list(EVENT_MODELS)},
        },
        *event_schema["parameters"],
    ]
    event_schema["responses"]["404"] = _error("No event kind with this id is in the catalog.")
    paths[EVENT_SCHEMA_PATH] = {"get": event_schema}
    paths["/healthz"] = {"get": _probe("getHealth", "The process is alive.")}
    paths["/readyz"] = {"get": _probe("getReadiness", "The database and the rate-limit store are reachable.")}
    return paths


def _probe(operation_id: str, summary: str) -> dict[str, Any]:
    status = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    return {
        "operationId": operation_id,
        "tags": ["health"],
        "summary": summary,
        "responses": {
            "200": {"description": summary, "content": _json(status)},
            "503": {"description": "Not ready.", "content": _json(status)},
        },
    }


def _delivery_body(kind: str, event: dict[str, Any]) -> dict[str, Any]:
    """What a delivery of ``kind`` carries: the event, or for a kind partners may batch, either
    the event or a batch of them (the catalog's batchDelivery), each member the event's schema."""
    if kind not in BATCHABLE:
        return event
    batch = {
        "type": "object",
        "description": f"A batch of {kind} events, oldest first, each as it would be sent alone.",
        "properties": {
            "event": {"const": kind},
            "batch": {"const": True},
            "events": {"type": "array", "minItems": 1, "maxItems": MAX_EVENTS_LIMIT, "items": event},
        },
        "required": ["event", "batch", "events"],
        "additionalProperties": False,
    }
    return {"oneOf": [event, batch]}


def _webhooks(refs: dict[str, dict[str, Any]], base_url: str) -> dict[str, Any]:
    signature = signature_object(base_url)
    headers = signature.get("headers")
    header_docs = headers if isinstance(headers, dict) else {}
    parameters = [
        {"name": name, "in": "header", "required": True, "description": meaning, "schema": _TEXT}
        for name, meaning in header_docs.items()
    ]
    return {
        kind: {
            "post": {
                "operationId": "deliver_" + kind.replace(".", "_"),
                "tags": ["webhooks"],
                "summary": model.SUMMARY,
                "description": f"Trigger: {model.TRIGGER} Trust boundary: {model.TRUST_BOUNDARY}",
                "parameters": parameters,
                "requestBody": {
                    "required": True,
                    "content": _json(_delivery_body(kind, refs[model.__name__])),
                },
                "responses": {
                    "2XX": {"description": "Delivered; process the eventId once."},
                    "410": {"description": "The partner endpoint is gone: delivery pauses."},
                    "default": {
                        "description": (
                            "Any other answer, a timeout or a refused connection: retried on the "
                            "catalog's schedule (subscriptionModel.retry) with the same delivery id; "
                            "a redirect is not followed, and Retry-After may lengthen the wait."
                        )
                    },
                },
            }
        }
        for kind, model in EVENT_MODELS.items()
    }


def openapi_document(content: Content, base_url: str) -> dict[str, Any]:
    refs, schemas = _component_schemas()
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": f"{content.site_name} public API",
            "version": INTERFACE_VERSION,
            "summary": content.summary,
            "description": (
                f"Public API version {PUBLIC_API_VERSION}. Read-only documents answer HEAD as well "
                "as GET, carry a strong ETag and Cache-Control, and answer 304 to If-None-Match. "
                "Webhook deliveries go only to onboarded partners; the catalog is unsigned."
            ),
        },
        "servers": [{"url": base_url}],
        "tags": [
            {"name": "waitlist", "description": "The one write operation."},
            {"name": "discovery", "description": "Documents for AI agents, crawlers and tooling."},
            {
                "name": "webhooks",
                "description": "The public, unsigned webhook event catalog and signature test vectors.",
            },
            {"name": "health", "description": "Liveness and readiness probes."},
        ],
        "paths": _paths(refs),
        "webhooks": _webhooks(refs, base_url),
        "components": {
            "schemas": schemas,
            "headers": {
                "ETag": {
                    "description": "Strong validator of the document.",
                    "required": True,
                    "schema": _TEXT,
                },
                "Cache-Control": {
                    "description": "How long the document may be cached.",
                    "required": True,
                    "schema": _TEXT,
                },
                "Retry-After": {
                    "description": "Seconds to wait before trying again.",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                },
            },
            "parameters": {
                "If-None-Match": {
                    "name": "If-None-Match",
                    "in": "header",
                    "required": False,
                    "description": "ETags you hold; a match answers 304.",
                    "schema": _TEXT,
                },
                "If-Match": {
                    "name": "If-Match",
                    "in": "header",
                    "required": False,
                    "description": "ETags (or *) the document must still have, compared strongly; else 412.",
                    "schema": _TEXT,
                },
            },
        },
    }
