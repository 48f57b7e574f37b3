"""The public webhook event catalog and single-event schema documents.

Both are derived from the models in ``service.events`` and the signer's own description, so a
new member or kind shows up here without anyone editing this file. Pure functions of ``base_url``
and, for the catalog's retry text, the deployment's ``DeliveryTerms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.events import (
    EVENT_MODELS,
    JSON_SCHEMA_DIALECT,
    EventPayload,
    WebhookTest,
    dedupe_composition,
    example_payload,
    payload_fields,
    payload_json_schema,
)
from service.partner_docs import VERIFYING_SIGNATURES, page_url
from service.settings import DEFAULT_RETRY_SCHEDULE, Settings
from service.webhooks.batching import (
    BATCHABLE,
    DEFAULT_MAX_EVENTS,
    DEFAULT_MAX_WAIT,
    MAX_EVENTS_LIMIT,
    MAX_WAIT,
    MIN_WAIT,
)
from service.webhooks.breaker import BreakerPolicy
from service.webhooks.retry import JITTER, MAX_RETRY_AFTER
from service.webhooks.signing import STANDARD_ID_HEADER, signature_description

# docs/architecture.md "Public contract".
INTERFACE_VERSION = "0.1.0"
PUBLIC_API_VERSION = "2026-06-29"
SCHEMA_VERSION = "1.0"

CATALOG_KIND = "service.project.webhook-catalog"
EVENT_SCHEMA_KIND = "service.public.webhook-event-schema"
DELIVERY_STATUS = "schema-ready"  # for every event (docs/architecture.md "Events and the catalog")

RETRY_JITTER = JITTER
DEFAULT_ATTEMPT_TIMEOUT: float = Settings.model_fields["webhook_timeout"].default
DEFAULT_BREAKER = BreakerPolicy()


@dataclass(frozen=True, slots=True)
class DeliveryTerms:
    """The attempt timeout and retry schedule the catalog promises partners.

    Partners build their endpoints to what the catalog says, so it states the deployment's own
    ``SERVICE_WEBHOOK_TIMEOUT`` and ``SERVICE_WEBHOOK_RETRY_SCHEDULE`` (the servers and the delivery
    workers read the same settings), not the defaults: an endpoint written to answer within the
    default 15 seconds fails where the worker waits 5. The defaults are for callers describing the
    document's shape, not a deployment.
    """

    timeout: float = DEFAULT_ATTEMPT_TIMEOUT
    schedule: tuple[float, ...] = DEFAULT_RETRY_SCHEDULE
    breaker: BreakerPolicy = DEFAULT_BREAKER  # when a failing partner's deliveries are held

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryTerms:
        breaker = BreakerPolicy(
            failures=settings.webhook_breaker_failures,
            cooldown=settings.webhook_breaker_cooldown,
            disable_after=settings.webhook_disable_after,
        )
        return cls(
            timeout=settings.webhook_timeout, schedule=tuple(settings.webhook_retry_schedule), breaker=breaker
        )


DEFAULT_TERMS = DeliveryTerms()

DELIVERY_MODEL = (
    "Signed HTTPS POST of the event payload as JSON to partner-owned endpoints, only for partners "
    "who have been onboarded and have webhook delivery enabled. Delivery is at least once: treat "
    "eventId as an idempotency key and process each event id once. A partner may have its "
    "high-volume signals (" + ", ".join(BATCHABLE) + ") batched: one signed POST per kind whose "
    'body is {"event": kind, "batch": true, "events": [payload, ...]} (see batchDelivery). The '
    "catalog itself is public, read-only and unsigned."
)

RATE_LIMITS = {
    "catalogRoutes": (
        "Read-only and unauthenticated; cache responses where appropriate and revalidate with "
        "If-None-Match against the ETag."
    ),
    "webhookEvents": (
        "Process event ids idempotently. The service avoids repeat announcements for the same "
        "event (see each event's dedupeKey, in which event.id means the payload's eventId member) "
        "and batches high-volume signals for partners who opt in (see batchDelivery)."
    ),
    "attribution": "When displaying room facts, link back to the canonical room URL (roomUrl).",
}

SAFETY_BOUNDARIES = [
    "The service describes public room context, authority state, link state, market context and "
    "product surfaces.",
    "It does not certify token safety, investment quality, price direction, liquidity, legal "
    "compliance or team legitimacy.",
    "Consumers preserve the room authority labels.",
    "Consumers distinguish unclaimed stubs, community-maintained rooms, official owner rooms, NFT "
    "rooms and project hubs.",
    "Consumers link back to the canonical room URL when displaying room facts.",
    "Consumers cache catalog and discovery responses where appropriate.",
    "The public catalog routes are read-only and the catalog itself is unsigned.",
    "Signed delivery is available only to partners who have been onboarded.",
]


def _seconds(value: float) -> str:
    """A number of seconds as written in the settings: 15, 2.5, 1209600 (``:g`` would round
    that to 1.2096e+06, and a configured 1234567 to a different number). The default schedule
    holds ints, which Settings does not convert."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def _retry_text(terms: DeliveryTerms) -> str:
    """``subscriptionModel.retry`` in the deployment's terms; an empty schedule (one attempt) is
    said as no retry, not as "retried after  seconds"."""
    answer = (
        f"A 2xx answer within {_seconds(terms.timeout)} seconds is success. Any other status, a "
        "timeout or a refused connection "
    )
    paused = (
        "A 410 answer pauses the partner: nothing more is sent until it is resumed, and then that "
        "delivery goes out again with everything that waited. "
    )
    breaker = terms.breaker
    held = (
        f"After {breaker.failures} failed attempts in a row the partner's deliveries are held, "
        f"their schedules not spent, for {_seconds(breaker.cooldown)} seconds; then one goes out "
        "alone as a probe. A delivered probe releases the rest; a failed one holds them twice as "
        f"long again, up to {_seconds(breaker.max_cooldown)} seconds. A partner failing without a "
        f"break for {_seconds(breaker.disable_after)} seconds is disabled until an admin resumes "
        "it. "
    )
    same_id = (
        f"A retry keeps its x-service-delivery ({STANDARD_ID_HEADER}) id and is signed with a "
        "fresh timestamp."
    )
    if not terms.schedule:
        return (
            answer + "is not retried (redirects are not followed): the delivery is failed until an "
            "admin retries it. " + paused + held + same_id
        )
    delays = ", ".join(_seconds(delay) for delay in terms.schedule)
    return (
        answer + f"is retried after {delays} seconds (each ±{RETRY_JITTER:.0%} jitter; redirects "
        "are not followed). A Retry-After header (seconds or an HTTP date) may lengthen the next "
        f"wait, up to the larger of the scheduled delay and {MAX_RETRY_AFTER:g} seconds, but never "
        "shortens it. " + paused + held + "When the schedule is exhausted the delivery is failed "
        "until an admin retries it. " + same_id
    )


def _test_delivery_text() -> str:
    return (
        f"An admin can send a signed {WebhookTest.KIND} delivery to check an endpoint and its "
        "signature check: sent once, at once, whatever event kinds the partner subscribes to; "
        "signed like every delivery; never retried, and its answer (410 included) changes "
        "nothing. It is not one of the events: its payload is described by testEvent."
    )


def webhook_test_entry() -> dict[str, Any]:
    """The catalog's ``testEvent``: the admin test delivery's payload, described like an event."""
    return {
        "id": WebhookTest.KIND,
        "summary": WebhookTest.SUMMARY,
        "trigger": WebhookTest.TRIGGER,
        "trustBoundary": WebhookTest.TRUST_BOUNDARY,
        "subscribable": False,
        "payloadFields": payload_fields(WebhookTest),
        "examplePayload": example_payload(WebhookTest),
        "payloadSchema": payload_json_schema(WebhookTest),
    }


def _batching_text() -> str:
    return (
        "Batching is opt-in per partner and per kind, set by an admin at onboarding: "
        '"batch": {"events": [kinds], "maxEvents": n, "maxWaitSeconds": s} (maxEvents 1 to '
        f"{MAX_EVENTS_LIMIT}, default {DEFAULT_MAX_EVENTS}; maxWaitSeconds {MIN_WAIT:g} to "
        f"{MAX_WAIT:g}, default {DEFAULT_MAX_WAIT:g}). Only " + ", ".join(BATCHABLE) + " may be "
        "batched. Events of a batched kind go out together, one POST per kind, when maxEvents "
        "wait or the oldest has waited maxWaitSeconds. The body is "
        '{"event": kind, "batch": true, "events": [payload, ...]}: each payload exactly the bytes '
        "it would be sent alone (its own eventId and occurredAt), oldest first. x-service-event is "
        f"the kind; x-service-delivery ({STANDARD_ID_HEADER}) is one id per batch; the signature "
        "covers the whole body as for any delivery. A batch is fixed once formed: every retry "
        "sends the same bytes under the same id. Other kinds, and partners who did not opt in, "
        "receive one POST per event as before."
    )


def batch_body_schema() -> dict[str, Any]:
    """Draft 2020-12 JSON Schema of a batch's body; each member of ``events`` is one payload of
    the named kind (validate it against that kind's payloadSchema)."""
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        "title": "Batch",
        "description": "A batched delivery: events of one kind, oldest first.",
        "type": "object",
        "properties": {
            "event": {"type": "string", "enum": list(BATCHABLE), "description": "The kind of every event."},
            "batch": {"const": True, "description": "Always true: tells a batch from a single event."},
            "events": {
                "type": "array",
                "minItems": 1,
                "maxItems": MAX_EVENTS_LIMIT,
                "description": "Payloads exactly as each would be sent alone, oldest first.",
                "items": {
                    "type": "object",
                    "required": ["eventId", "event", "occurredAt"],
                    "properties": {"event": {"type": "string"}},
                },
            },
        },
        "required": ["event", "batch", "events"],
        "additionalProperties": False,
        # Every payload is of the batch's kind.
        "allOf": [
            {
                "if": {"properties": {"event": {"const": kind}}},
                "then": {"properties": {"events": {"items": {"properties": {"event": {"const": kind}}}}}},
            }
            for kind in BATCHABLE
        ],
    }


def batch_example() -> dict[str, Any]:
    """A batch of two, from the catalog's own example payload."""
    first = example_payload(EVENT_MODELS[BATCHABLE[0]])
    second = {**first, "eventId": "evt_01JZ8QN2P4Q6R8S0T2V4W6X8Y1", "occurredAt": "2026-06-29T21:00:03Z"}
    return {"event": BATCHABLE[0], "batch": True, "events": [first, second]}


def batch_delivery_entry() -> dict[str, Any]:
    """The catalog's ``batchDelivery``: which kinds may be batched, and the body's schema."""
    return {
        "batchable": list(BATCHABLE),
        "summary": _batching_text(),
        "bodySchema": batch_body_schema(),
        "exampleBody": batch_example(),
    }


def _subscription_model(terms: DeliveryTerms) -> dict[str, str]:
    return {
        "delivery": DELIVERY_MODEL,
        "onboarding": (
            "Partners are onboarded through admin controls only; there is no self-serve "
            "subscription management. Onboarding issues the signing secret and may restrict the "
            "subscription to chosen event kinds; pausing, testing, retrying and secret rotation "
            "are admin operations too."
        ),
        "retry": _retry_text(terms),
        "testDelivery": _test_delivery_text(),
        "batching": _batching_text(),
    }


def public_api(base_url: str) -> str:
    """``{base_url}/api/v1``, tolerating a trailing slash on ``base_url``."""
    return base_url.rstrip("/") + "/api/v1"


def signature(base_url: str) -> dict[str, object]:
    """The ``signature`` member: both schemes, linking the test vectors and the verification page."""
    return signature_description(
        test_vectors_url=f"{public_api(base_url)}/webhooks/test-vectors",
        guide_url=page_url(base_url, VERIFYING_SIGNATURES),
    )


def schema_url(base_url: str, event_id: str) -> str:
    return f"{public_api(base_url)}/webhooks/events/{event_id}"


def event_entry(base_url: str, model: type[EventPayload]) -> dict[str, Any]:
    """One member of ``events``: the eight published members, then the schema and where it lives."""
    return {
        "id": model.KIND,
        "summary": model.SUMMARY,
        "trigger": model.TRIGGER,
        "trustBoundary": model.TRUST_BOUNDARY,
        "dedupeKey": dedupe_composition(model),
        "deliveryStatus": DELIVERY_STATUS,
        "payloadFields": payload_fields(model),
        "examplePayload": example_payload(model),
        "payloadSchema": payload_json_schema(model),
        "schemaUrl": schema_url(base_url, model.KIND),
    }


def catalog_document(base_url: str, terms: DeliveryTerms = DEFAULT_TERMS) -> dict[str, Any]:
    """The webhook event catalog served at ``/api/v1/webhooks/events``; ``terms``: the
    deployment's timeout and retry schedule, which ``subscriptionModel.retry`` states."""
    return {
        "kind": CATALOG_KIND,
        "schemaVersion": SCHEMA_VERSION,
        "publicApi": public_api(base_url),
        "publicApiVersion": PUBLIC_API_VERSION,
        "deliveryModel": DELIVERY_MODEL,
        "events": [event_entry(base_url, model) for model in EVENT_MODELS.values()],
        "rateLimits": dict(RATE_LIMITS),
        "safetyBoundaries": list(SAFETY_BOUNDARIES),
        "signature": signature(base_url),
        "subscriptionModel": _subscription_model(terms),
        "testEvent": webhook_test_entry(),
        "batchDelivery": batch_delivery_entry(),
    }


def event_document(base_url: str, event_id: str) -> dict[str, Any] | None:
    """The single-event schema document, or None for an id the catalog does not list."""
    model = EVENT_MODELS.get(event_id)
    if model is None:
        return None
    return {
        "kind": EVENT_SCHEMA_KIND,
        "schemaVersion": SCHEMA_VERSION,
        "publicApi": public_api(base_url),
        "event": event_entry(base_url, model),
        "signature": signature(base_url),
    }
