"""Models of the JSON documents the public API answers with.

The manifest and the API index are built as these models; the catalog documents (built by
``service.discovery.catalog``) and the error shape (``service.errors``) are described by them. OpenAPI takes
its schemas from here, and the tests hold every served document to them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.discovery.room import PricingTier
from service.wire import omit_nulls


class Document(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=omit_nulls)


# --- errors -------------------------------------------------------------------------------------


class FieldError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    field: str = Field(description="Dotted path of the member at fault, or body.")
    code: str = Field(description="Stable machine token, e.g. invalid_email, missing, too_long.")
    message: str = Field(description="One human sentence.")


class Error(BaseModel):
    """Every JSON error: a fixed sentence, and field errors where fields are at fault."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=omit_nulls)

    ok: Literal[False]
    message: str = Field(description="One human sentence; never text the client sent.")
    errors: list[FieldError] | None = Field(default=None, description="Only where fields are at fault.")


# --- discovery ------------------------------------------------------------------------------------


class AuthorityLabelEntry(BaseModel):
    id: str
    label: str
    meaning: str
    preserve: str = Field(description="How a consumer keeps the label when displaying the room.")


class RoomTypeEntry(BaseModel):
    id: str
    label: str
    meaning: str


class WaitlistEntry(BaseModel):
    url: str
    method: Literal["POST"]
    contentTypes: list[str]
    intents: list[str]


class AgentManifest(Document):
    """The agent manifest (/agent.json and /.well-known/agent.json); more members may be added."""

    name: str
    description: str
    roomDescription: str = Field(description="What a room is.")
    version: str = Field(description="Version of the interface description.")
    baseUrl: str
    publicApi: str
    publicApiVersion: str
    documents: dict[str, str] = Field(description="Every discovery document, by name.")
    catalog: str = Field(description="The webhook event catalog.")
    openapi: str = Field(description="OpenAPI 3.1 document of the public API.")
    eventSchemas: dict[str, str] = Field(description="Single-event schema document per event kind.")
    waitlist: WaitlistEntry
    safetyBoundaries: list[str]
    instructions: list[str] = Field(description="Instructions for AI agents.")
    authorityLabels: list[AuthorityLabelEntry]
    roomTypes: list[RoomTypeEntry]
    pricing: list[PricingTier]
    attribution: str
    caching: str


class ApiIndex(Document):
    """GET /api/v1: where the public API's documents are."""

    kind: Literal["service.public.api-index"]
    publicApi: str
    publicApiVersion: str
    interfaceVersion: str
    links: dict[str, str]


# --- the webhook catalog (built by service.discovery.catalog) ----------------------------------------------


class PayloadField(BaseModel):
    name: str
    required: bool
    summary: str
    type: str


class EventEntry(Document):
    id: str = Field(description="Event kind id.")
    summary: str
    trigger: str
    trustBoundary: str = Field(description="What the event does not claim.")
    dedupeKey: str = Field(description="Parts of the deduplication key, e.g. event.id + tier.")
    deliveryStatus: Literal["schema-ready"]
    payloadFields: list[PayloadField]
    examplePayload: dict[str, Any]
    payloadSchema: dict[str, Any] = Field(description="JSON Schema 2020-12 of the payload.")
    schemaUrl: str = Field(description="The single-event schema document.")


class RateLimits(Document):
    catalogRoutes: str
    webhookEvents: str
    attribution: str


class SubscriptionModel(Document):
    delivery: str
    onboarding: str
    retry: str
    testDelivery: str = Field(description="The admin's test delivery; its payload is testEvent.")
    batching: str = Field(description="Batched delivery of high-volume signals; see batchDelivery.")


class WebhookTestEntry(Document):
    """The admin test delivery's payload: described like an event, but no one subscribes to it."""

    id: Literal["webhook.test"]
    summary: str
    trigger: str
    trustBoundary: str
    subscribable: Literal[False]
    payloadFields: list[PayloadField]
    examplePayload: dict[str, Any]
    payloadSchema: dict[str, Any] = Field(description="JSON Schema 2020-12 of the payload.")


class BatchDeliveryEntry(Document):
    """How a batched delivery looks: the kinds that may be batched and the body's schema."""

    batchable: list[str]
    summary: str
    bodySchema: dict[str, Any] = Field(description="JSON Schema 2020-12 of a batch's body.")
    exampleBody: dict[str, Any]


class CatalogDocument(Document):
    """GET /api/v1/webhooks/events: the public, unsigned webhook event catalog."""

    kind: Literal["service.project.webhook-catalog"]
    schemaVersion: Literal["1.0"]
    publicApi: str
    publicApiVersion: str
    deliveryModel: str
    events: list[EventEntry]
    rateLimits: RateLimits
    safetyBoundaries: list[str]
    signature: dict[str, Any]
    subscriptionModel: SubscriptionModel
    testEvent: WebhookTestEntry = Field(description="The admin test delivery (webhook.test), not an event.")
    batchDelivery: BatchDeliveryEntry = Field(description="Batched delivery: kinds and the body's schema.")


class EventSchemaDocument(Document):
    """GET /api/v1/webhooks/events/{eventId}: one event kind."""

    kind: Literal["service.public.webhook-event-schema"]
    schemaVersion: Literal["1.0"]
    publicApi: str
    event: EventEntry
    signature: dict[str, Any]
