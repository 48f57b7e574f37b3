"""The catalog documents hold to the published contract, and every example fits its own schema and model."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from jsonschema import Draft202012Validator

from service.discovery.catalog import (
    DEFAULT_TERMS,
    INTERFACE_VERSION,
    PUBLIC_API_VERSION,
    SCHEMA_VERSION,
    DeliveryTerms,
    catalog_document,
    event_document,
)
from service.events import dump_payload, parse_event
from service.exceptions import InvalidInput
from service.settings import Settings
from service.webhooks.breaker import BreakerPolicy
from service.webhooks.signing import signature_description

SIGNATURE_LINKS = {
    "test_vectors_url": "https://launchrooms.example/api/v1/webhooks/test-vectors",
    "guide_url": "https://launchrooms.example/docs/webhooks/verifying-signatures",
}

BASE_URL = "https://launchrooms.example"
NOW = datetime(2026, 6, 30, 12, 0, 0, tzinfo=UTC)  # after every example's occurredAt

STRING, URL, NUMBER, TIME = "string", "string (URL)", "number", "string (ISO-8601 UTC)"
COMMON = [("eventId", True, STRING), ("event", True, STRING), ("occurredAt", True, TIME)]

# The published contract of each kind, written out by hand (docs/architecture.md "Events and the catalog"):
# id -> (meaning, trigger, boundary, dedupe key, [(member, required, type)]).
SPEC: dict[str, tuple[str, str, str, str, list[tuple[str, bool, str]]]] = {
    "room.claimed": (
        "A room moved from unclaimed discovery into claimed control by an official owner or community "
        "maintainer.",
        "A claim payment and authority flow completes, or a room is otherwise recorded as claimed.",
        "An authority and control event only; says nothing about token safety, investment quality, price, "
        "liquidity or legal compliance.",
        "event.id",
        [
            ("slug", True, STRING),
            ("roomUrl", True, URL),
            ("project", True, STRING),
            ("ticker", True, STRING),
            ("chain", True, STRING),
            ("contractAddress", False, STRING),
            (
                "roomType",
                True,
                "string (one of: official_owner, community_claimed, nft_room, unclaimed_stub)",
            ),
        ],
    ),
    "room.upgraded": (
        "A room moves to Verified, Pro or Custom.",
        "A paid upgrade activates or a managed room tier changes.",
        "Describes active product features; does not rank or certify the project.",
        "event.id + tier",
        [
            ("slug", True, STRING),
            ("roomUrl", True, URL),
            ("previousTier", False, STRING),
            ("tier", True, STRING),
            ("tierLabel", True, STRING),
        ],
    ),
    "room.links.updated": (
        "Room-published website or social links changed.",
        "A room maintainer saves official links or social surfaces.",
        "Identifies what the room published; consumers present external links with phishing caution.",
        "event.id + changedFields",
        [("slug", True, STRING), ("roomUrl", True, URL), ("changedFields", True, "string[]")],
    ),
    "room.content.published": (
        "A room owner or maintainer publishes an update.",
        "An owner update, room note or other public room content is published.",
        "Carries room-published content; no endorsement of the project's claims.",
        "event.id + updateId",
        [
            ("slug", True, STRING),
            ("roomUrl", True, URL),
            ("updateId", False, STRING),
            ("title", False, STRING),
        ],
    ),
    "project.deployment.indexed": (
        "A chain-specific deployment is indexed into a project graph.",
        "A credible deployment room is indexed for a project, including multichain project hub mapping.",
        "Connects public room data; does not imply that all related deployments share the same authority "
        "state.",
        "event.id + chain + contractAddress",
        [
            ("slug", True, STRING),
            ("project", True, STRING),
            ("chain", True, STRING),
            ("contractAddress", True, STRING),
            ("roomUrl", True, URL),
            ("hubUrl", False, URL),
        ],
    ),
    "room.arcade.high_score": (
        "A room-linked arcade game records a new high score.",
        "The arcade high-score table records a public room-linked score.",
        "A community engagement signal, not a market or investment signal.",
        "event.id + scoreId",
        [
            ("slug", True, STRING),
            ("roomUrl", True, URL),
            ("game", True, STRING),
            ("playerName", True, STRING),
            ("score", True, NUMBER),
            ("scoreId", False, STRING),
        ],
    ),
    "room.artwork.vote_milestone": (
        "A room artwork submission reaches a public vote milestone.",
        "Artwork voting crosses a configured milestone.",
        "A community activity signal; mint eligibility or rights are confirmed in the room context.",
        "event.id + artworkId + milestone",
        [
            ("slug", True, STRING),
            ("roomUrl", True, URL),
            ("artworkId", True, STRING),
            ("artworkTitle", False, STRING),
            ("votes", True, NUMBER),
            ("milestone", True, NUMBER),
        ],
    ),
    "room.trending": (
        "A room crosses a public trend threshold.",
        "Public room activity crosses a configured threshold, with repeat suppression.",
        "An activity signal, not a ranking guarantee, trading recommendation or quality score.",
        "event.id + slug + window",
        [
            ("slug", True, STRING),
            ("roomUrl", True, URL),
            ("metric", True, STRING),
            ("value", True, NUMBER),
            ("window", True, STRING),
        ],
    ),
    "platform.milestone": (
        "The service reaches a public platform milestone.",
        "A public milestone threshold is crossed.",
        "Describes service usage, not token quality or market performance.",
        "event.id + milestone",
        [("milestone", True, STRING), ("value", True, NUMBER)],
    ),
}

CATALOG = catalog_document(BASE_URL)
ENTRIES = {entry["id"]: entry for entry in CATALOG["events"]}


def test_versions_are_the_specs() -> None:
    """The three version strings are those of docs/architecture.md "Public contract"."""
    assert (INTERFACE_VERSION, PUBLIC_API_VERSION, SCHEMA_VERSION) == ("0.1.0", "2026-06-29", "1.0")


def test_catalog_has_exactly_the_spec_members() -> None:
    """The catalog document carries its ten published members and their fixed values, then testEvent
    and batchDelivery."""
    assert list(CATALOG) == [
        "kind",
        "schemaVersion",
        "publicApi",
        "publicApiVersion",
        "deliveryModel",
        "events",
        "rateLimits",
        "safetyBoundaries",
        "signature",
        "subscriptionModel",
        "testEvent",
        "batchDelivery",
    ]
    assert {key: CATALOG[key] for key in ("kind", "schemaVersion", "publicApi", "publicApiVersion")} == {
        "kind": "service.project.webhook-catalog",
        "schemaVersion": "1.0",
        "publicApi": "https://launchrooms.example/api/v1",
        "publicApiVersion": "2026-06-29",
    }
    assert CATALOG["signature"] == signature_description(**SIGNATURE_LINKS)
    assert list(CATALOG["rateLimits"]) == ["catalogRoutes", "webhookEvents", "attribution"]
    assert list(CATALOG["subscriptionModel"]) == ["delivery", "onboarding", "retry", "testDelivery", "batching"]
    strings = [
        CATALOG["deliveryModel"],
        *CATALOG["rateLimits"].values(),
        *CATALOG["subscriptionModel"].values(),
    ]
    assert all(isinstance(text, str) and text for text in strings)


def test_event_ids_are_the_spec_kinds_in_order() -> None:
    """One entry per kind, in the published order."""
    assert [entry["id"] for entry in CATALOG["events"]] == list(SPEC)


@pytest.mark.parametrize("kind", list(SPEC))
def test_entry_matches_the_spec(kind: str) -> None:
    """Meaning, trigger, boundary, dedupe key, status and field table are the published ones."""
    meaning, trigger, boundary, dedupe, fields = SPEC[kind]
    entry = ENTRIES[kind]
    assert list(entry) == [
        "id",
        "summary",
        "trigger",
        "trustBoundary",
        "dedupeKey",
        "deliveryStatus",
        "payloadFields",
        "examplePayload",
        "payloadSchema",
        "schemaUrl",
    ]
    assert (entry["summary"], entry["trigger"], entry["trustBoundary"]) == (meaning, trigger, boundary)
    assert (entry["dedupeKey"], entry["deliveryStatus"]) == (dedupe, "schema-ready")
    assert [(field["name"], field["required"], field["type"]) for field in entry["payloadFields"]] == [
        *COMMON,
        *fields,
    ]
    assert all(isinstance(field["summary"], str) and field["summary"] for field in entry["payloadFields"])
    assert entry["schemaUrl"] == f"https://launchrooms.example/api/v1/webhooks/events/{kind}"


@pytest.mark.parametrize("kind", list(SPEC))
def test_field_table_agrees_with_the_schema(kind: str) -> None:
    """payloadFields and payloadSchema name the same members with the same required flags and summaries."""
    entry = ENTRIES[kind]
    schema = entry["payloadSchema"]
    assert [field["name"] for field in entry["payloadFields"]] == list(schema["properties"])
    assert [field["name"] for field in entry["payloadFields"] if field["required"]] == schema["required"]
    assert [field["summary"] for field in entry["payloadFields"]] == [
        prop["description"] for prop in schema["properties"].values()
    ]


@pytest.mark.parametrize("kind", list(SPEC))
def test_schema_is_valid_draft_2020_12(kind: str) -> None:
    """Every payload schema passes the 2020-12 metaschema."""
    assert Draft202012Validator.check_schema(ENTRIES[kind]["payloadSchema"]) is None


@pytest.mark.parametrize("kind", list(SPEC))
def test_example_fits_its_schema_and_model(kind: str) -> None:
    """Each examplePayload validates against its own schema (formats checked) and round-trips parse_event."""
    entry = ENTRIES[kind]
    example = entry["examplePayload"]
    validator = Draft202012Validator(
        entry["payloadSchema"], format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    assert [error.message for error in validator.iter_errors(example)] == []
    payload = parse_event(example, now=NOW, new_id=lambda: "evt_unused")
    assert dump_payload(payload) == example
    assert (example["event"], example["eventId"][:4], payload.occurredAt) == (
        kind,
        "evt_",
        example["occurredAt"],
    )
    # The example shows every member, optional ones included, so a reader sees the full shape.
    assert list(example) == [field["name"] for field in entry["payloadFields"]]


def test_safety_boundaries_restate_the_spec() -> None:
    """The safety statements restate the first section's, and nothing else: what event.id means in
    a dedupe key is said beside the dedupe keys, and scoreId in its own schema."""
    assert CATALOG["safetyBoundaries"] == [
        "The service describes public room context, authority state, link state, market context and product "
        "surfaces.",
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
    assert "event.id means the payload's eventId member" in CATALOG["rateLimits"]["webhookEvents"]
    high_score = next(entry for entry in CATALOG["events"] if entry["id"] == "room.arcade.high_score")
    assert high_score["dedupeKey"] == "event.id + scoreId"
    assert "without it the key is the eventId alone" in high_score["payloadSchema"]["properties"]["scoreId"]["description"]


def test_subscription_model_states_onboarding_and_retry_policy() -> None:
    """Onboarding is admin-only and the retry text carries the default schedule and outcomes."""
    assert CATALOG["subscriptionModel"]["onboarding"] == (
        "Partners are onboarded through admin controls only; there is no self-serve subscription "
        "management. Onboarding issues the signing secret and may restrict the subscription to chosen event "
        "kinds; pausing, testing, retrying and secret rotation are admin operations too."
    )
    assert CATALOG["subscriptionModel"]["retry"] == (
        "A 2xx answer within 15 seconds is success. Any other status, a timeout or a refused connection is "
        "retried after 5, 300, 1800, 7200, 18000, 36000, 36000 seconds (each ±20% jitter; redirects are not "
        "followed). A Retry-After header (seconds or an HTTP date) may lengthen the next wait, up to the "
        "larger of the scheduled delay and 3600 seconds, but never shortens it. A 410 answer pauses the "
        "partner: nothing more is sent until it is resumed, and then that delivery goes out again with "
        "everything that waited. "
        "After 5 failed attempts in a row the partner's deliveries are held, their schedules not spent, for 30 "
        "seconds; then one goes out alone as a probe. A delivered probe releases the rest; a failed one holds "
        "them twice as long again, up to 3600 seconds. A partner failing without a break for 432000 seconds "
        "is disabled until an admin resumes it. "
        "When the schedule is exhausted the delivery is failed until an admin "
        "retries it. A retry keeps its x-service-delivery (webhook-id) id and is signed with a fresh "
        "timestamp."
    )
    assert CATALOG["subscriptionModel"]["testDelivery"] == (
        "An admin can send a signed webhook.test delivery to check an endpoint and its signature check: "
        "sent once, at once, whatever event kinds the partner subscribes to; signed like every delivery; "
        "never retried, and its answer (410 included) changes nothing. It is not one of the events: its "
        "payload is described by testEvent."
    )
    assert CATALOG["subscriptionModel"]["delivery"] == CATALOG["deliveryModel"]


def _retry(terms: DeliveryTerms) -> str:
    return str(catalog_document(BASE_URL, terms)["subscriptionModel"]["retry"])


def test_the_retry_text_states_the_configured_timeout_and_schedule() -> None:
    """SERVICE_WEBHOOK_TIMEOUT=5 SERVICE_WEBHOOK_RETRY_SCHEDULE=1,2.5 is what the catalog promises, not the defaults."""
    terms = DeliveryTerms.from_settings(
        Settings(database_url="sqlite:///unused.db", webhook_timeout="5", webhook_retry_schedule="1,2.5")
    )
    assert terms == DeliveryTerms(timeout=5.0, schedule=(1.0, 2.5), breaker=BreakerPolicy())
    assert _retry(terms) == (
        "A 2xx answer within 5 seconds is success. Any other status, a timeout or a refused connection is "
        "retried after 1, 2.5 seconds (each ±20% jitter; redirects are not followed). A Retry-After header "
        "(seconds or an HTTP date) may lengthen the next wait, up to the larger of the scheduled delay and "
        "3600 seconds, but never shortens it. A 410 answer pauses the partner: nothing more is sent until it "
        "is resumed, and then that delivery goes out again with everything that waited. "
        "After 5 failed attempts in a row the partner's deliveries are held, their schedules not spent, for 30 "
        "seconds; then one goes out alone as a probe. A delivered probe releases the rest; a failed one holds "
        "them twice as long again, up to 3600 seconds. A partner failing without a break for 432000 seconds "
        "is disabled until an admin resumes it. "
        "When the schedule is "
        "exhausted the delivery is failed until an admin retries it. A retry keeps its x-service-delivery "
        "(webhook-id) id and is signed with a fresh timestamp."
    )
    others = {key: value for key, value in catalog_document(BASE_URL, terms).items() if key != "subscriptionModel"}
    assert others == {key: value for key, value in CATALOG.items() if key != "subscriptionModel"}


def test_the_default_settings_give_the_default_catalog() -> None:
    """The defaults, left unset or written out as environment strings, state 15 s and the default schedule,
    in the very words (and so the ETag) of the catalog before the terms were configurable."""
    written_out = Settings(
        database_url="sqlite:///unused.db",
        webhook_timeout="15",
        webhook_retry_schedule="5,300,1800,7200,18000,36000,36000",
    )
    for settings in (Settings(database_url="sqlite:///unused.db"), written_out):
        terms = DeliveryTerms.from_settings(settings)
        assert catalog_document(BASE_URL, terms) == CATALOG
        assert json.dumps(catalog_document(BASE_URL, terms)) == json.dumps(catalog_document(BASE_URL))
    assert _retry(DEFAULT_TERMS).startswith(
        "A 2xx answer within 15 seconds is success. Any other status, a timeout or a refused connection is "
        "retried after 5, 300, 1800, 7200, 18000, 36000, 36000 seconds "
    )


def test_the_retry_text_states_the_configured_circuit_breaker() -> None:
    """A partner failing attempt after attempt is held, probed and in the end disabled, as the
    deployment's SERVICE_WEBHOOK_BREAKER_* and SERVICE_WEBHOOK_DISABLE_AFTER say: partners building
    to the catalog see why retries stop coming on the schedule while their endpoint is down."""
    settings = Settings(
        database_url="sqlite:///unused.db",
        webhook_breaker_failures="3",
        webhook_breaker_cooldown="12.5",
        webhook_disable_after="86400",
    )
    terms = DeliveryTerms.from_settings(settings)
    assert terms.breaker == BreakerPolicy(failures=3, cooldown=12.5, disable_after=86400.0)
    assert (
        "After 3 failed attempts in a row the partner's deliveries are held, their schedules not spent, "
        "for 12.5 seconds; then one goes out alone as a probe. A delivered probe releases the rest; a "
        "failed one holds them twice as long again, up to 3600 seconds. A partner failing without a break "
        "for 86400 seconds is disabled until an admin resumes it."
    ) in _retry(terms)


def test_an_empty_schedule_is_stated_as_no_retry() -> None:
    """SERVICE_WEBHOOK_RETRY_SCHEDULE= makes one attempt: the text says so instead of "retried after  seconds"."""
    retry = _retry(DeliveryTerms(timeout=0.5, schedule=()))
    assert retry == (
        "A 2xx answer within 0.5 seconds is success. Any other status, a timeout or a refused connection is "
        "not retried (redirects are not followed): the delivery is failed until an admin retries it. A 410 "
        "answer pauses the partner: nothing more is sent until it is resumed, and then that delivery goes "
        "out again with everything that waited. "
        "After 5 failed attempts in a row the partner's deliveries are held, their schedules not spent, for 30 "
        "seconds; then one goes out alone as a probe. A delivered probe releases the rest; a failed one holds "
        "them twice as long again, up to 3600 seconds. A partner failing without a break for 432000 seconds "
        "is disabled until an admin resumes it. "
        "A retry keeps its x-service-delivery (webhook-id) id and is "
        "signed with a fresh timestamp."
    )


def test_configured_seconds_are_written_exactly() -> None:
    """A long delay reads as configured: 1234567, not 1.23457e+06 (which is another number)."""
    retry = _retry(DeliveryTerms(timeout=120, schedule=(0.25, 1_234_567, 1_209_600.0)))
    assert "within 120 seconds" in retry
    assert "retried after 0.25, 1234567, 1209600 seconds" in retry


@pytest.mark.parametrize("kind", list(SPEC))
def test_event_document_wraps_the_catalog_entry(kind: str) -> None:
    """The single-event document has its five published members and the catalog's entry unchanged."""
    assert event_document(BASE_URL, kind) == {
        "kind": "service.public.webhook-event-schema",
        "schemaVersion": "1.0",
        "publicApi": "https://launchrooms.example/api/v1",
        "event": ENTRIES[kind],
        "signature": signature_description(**SIGNATURE_LINKS),
    }


@pytest.mark.parametrize("event_id", ["room.deleted", "", "ROOM.CLAIMED", "room.claimed/", "__init__"])
def test_event_document_is_none_for_unknown_ids(event_id: str) -> None:
    """Only catalog ids have a document; the route answers 404 for the rest."""
    assert event_document(BASE_URL, event_id) is None


@pytest.mark.parametrize(
    ("base_url", "public_api"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/api/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/api/v1"),
        ("https://launchrooms.example/app", "https://launchrooms.example/app/api/v1"),
    ],
)
def test_urls_follow_the_base_url(base_url: str, public_api: str) -> None:
    """publicApi and every schemaUrl hang off {base_url}/api/v1, trailing slash or not."""
    document = catalog_document(base_url)
    assert document["publicApi"] == public_api
    assert [entry["schemaUrl"] for entry in document["events"]] == [
        f"{public_api}/webhooks/events/{kind}" for kind in SPEC
    ]


def test_catalog_is_deterministic_json() -> None:
    """Two renderings serialise to the same bytes, so ETags stay stable across processes."""
    first = json.dumps(catalog_document(BASE_URL), sort_keys=True, allow_nan=False)
    assert first == json.dumps(catalog_document(BASE_URL), sort_keys=True, allow_nan=False)
    assert json.loads(first) == CATALOG


def test_the_test_event_is_documented_beside_the_nine_kinds() -> None:
    """testEvent describes webhook.test like an event (fields, example, schema) and says no one subscribes."""
    entry = CATALOG["testEvent"]
    assert list(entry) == [
        "id", "summary", "trigger", "trustBoundary", "subscribable", "payloadFields", "examplePayload",
        "payloadSchema",
    ]  # fmt: skip
    assert (entry["id"], entry["subscribable"]) == ("webhook.test", False)
    assert "webhook.test" not in ENTRIES
    assert [(field["name"], field["required"], field["type"]) for field in entry["payloadFields"]] == [
        *COMMON,
        ("partnerId", True, STRING),
        ("test", True, "boolean"),
    ]
    Draft202012Validator.check_schema(entry["payloadSchema"])
    validator = Draft202012Validator(entry["payloadSchema"], format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert [error.message for error in validator.iter_errors(entry["examplePayload"])] == []
    assert [error.message for error in validator.iter_errors({**entry["examplePayload"], "test": False})] == [
        "True was expected"
    ]


def test_the_test_event_cannot_be_published() -> None:
    """webhook.test is not a catalog kind: publishing one is refused like any unknown kind."""
    example = CATALOG["testEvent"]["examplePayload"]
    with pytest.raises(InvalidInput) as raised:
        parse_event(example, now=NOW)
    assert [(error.field, error.code) for error in raised.value.field_errors] == [("event", "unknown_event")]
