"""The nine webhook event kinds, each defined once as a pydantic model.

Everything a partner reads about an event (catalog entry, field table, example, JSON Schema) is
derived from these classes by ``service.discovery.catalog``; ``parse_event`` is the one gate a published
event passes through, and ``dump_payload`` is the one way a payload becomes wire JSON.

    EventPayload                      common members: eventId, event, occurredAt
    ├── RoomClaimed                   room.claimed
    ├── RoomUpgraded                  room.upgraded
    ├── RoomLinksUpdated              room.links.updated
    ├── RoomContentPublished          room.content.published
    ├── ProjectDeploymentIndexed      project.deployment.indexed
    ├── RoomArcadeHighScore           room.arcade.high_score
    ├── RoomArtworkVoteMilestone      room.artwork.vote_milestone
    ├── RoomTrending                  room.trending
    └── PlatformMilestone             platform.milestone
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError
from rfc3986_validator import validate_rfc3986

from service.exceptions import FieldError, InvalidInput
from service.ids import new_id
from service.model_schemas import json_schema
from service.text import NOT_UNICODE_MESSAGE, storable
from service.wire import omit_nulls

# --- member types -----------------------------------------------------------------------------

# Every string member is held to the registrations' rule (service.text): no NUL, no lone surrogates.
NonEmptyStr = Annotated[str, StringConstraints(min_length=1), AfterValidator(storable)]

# An event id: what every database stores (64 characters) in characters that need no escaping in a
# URL, a header, a log line or a dedupe key (README "Admin guide", "Publishing").
EVENT_ID_MAX = 64
EVENT_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
_EVENT_ID = re.compile(EVENT_ID_PATTERN)


def _event_id(value: str) -> str:
    if not _EVENT_ID.fullmatch(value):
        raise PydanticCustomError(
            "invalid", "Must be 1 to 64 characters, each a letter, a digit or one of _ . : -."
        )
    return value


EventId = Annotated[
    str,
    StringConstraints(min_length=1),
    AfterValidator(storable),  # NUL and lone surrogates are named as such first
    AfterValidator(_event_id),
    Field(json_schema_extra={"maxLength": EVENT_ID_MAX, "pattern": EVENT_ID_PATTERN}),
]

# RFC 3986 characters only, so a value the model accepts also passes a JSON Schema `format: uri`
# check on the partner's side; the lowercase scheme keeps the schema's pattern and the model equal.
_URL_PATTERN = r"^https?://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+$"
_URL = re.compile(_URL_PATTERN)
# How far ahead of the service's clock a publisher's `occurredAt` may be: its clock's error, not a
# time still to come, which the field (when the event was recorded) cannot be.
OCCURRED_AHEAD = timedelta(minutes=5)
# What `occurredAt` always looks like on the wire, whatever offset the publisher used.
_UTC_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?Z$"


def _absolute_http_url(value: str) -> str:
    try:
        parts = urlsplit(value)
        _ = parts.port  # a malformed port only shows when it is read
    except ValueError:
        parts = None
    # RFC 3986's grammar as JSON Schema validators read `format: uri` (rfc3986-validator, which
    # jsonschema uses): the characters alone let a stray `%`, a bracket outside an IPv6 host, a
    # second `#` or `@` through, and partners validating with the catalog refused those deliveries.
    if (
        parts is None
        or not _URL.fullmatch(value)
        or not parts.hostname
        or not validate_rfc3986(value, rule="URI")
    ):
        raise PydanticCustomError("invalid", "Must be an absolute http or https URL.")
    return value


def is_absolute_http_url(value: str) -> bool:
    """Whether ``value`` passes the events' URL rule (``Url``): for URLs read back from storage,
    which rows an earlier release or a hand in the database wrote without that rule."""
    try:
        _absolute_http_url(value)
    except PydanticCustomError:
        return False
    return True


def format_occurred_at(moment: datetime) -> str:
    """``moment`` as a payload's ``occurredAt``: ISO-8601 UTC ending in ``Z``, microseconds only
    where the publisher gave them (the published pattern); a naive datetime is a bug, not UTC."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("format_occurred_at needs an aware datetime")
    return moment.astimezone(UTC).isoformat().removesuffix("+00:00") + "Z"


def _utc_timestamp(value: str) -> str:
    message = "Must be an ISO-8601 timestamp with Z or a UTC offset."
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None or moment.utcoffset() is None:
            # Reading a naive time as UTC would silently shift events by the sender's offset.
            raise PydanticCustomError("invalid", message)
        return format_occurred_at(moment)
    except (ValueError, OverflowError):  # unparsable, or an offset pushing it past year 1..9999
        raise PydanticCustomError("invalid", message) from None


def _number(value: object) -> int | float:
    # bool is an int subclass in Python; JSON `true` is not a count or a score.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("invalid_type", "Must be a number.")
    if isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("invalid", "Must be a finite number.")
    return value


Url = Annotated[
    str,
    AfterValidator(_absolute_http_url),
    WithJsonSchema({"type": "string", "format": "uri", "pattern": _URL_PATTERN}),
]
UtcTimestamp = Annotated[
    str,
    AfterValidator(_utc_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": _UTC_PATTERN}),
]
# int stays int on the wire (a vote count of 12 must not become 12.0); floats stay floats.
Number = Annotated[int | float, PlainValidator(_number), WithJsonSchema({"type": "number"})]


def _describe_wire(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Make the JSON Schema describe what is delivered, not pydantic's Python view of it.

    Absent optional members are omitted from the wire (``dump_payload``) and explicit nulls are
    refused, so the nullable branch and the ``default: null`` pydantic writes would be false.
    """
    omit_nulls(schema)
    kind = getattr(model, "KIND", None)
    if kind is not None:
        schema["title"] = kind
        schema["description"] = getattr(model, "SUMMARY", "")


# --- the models -------------------------------------------------------------------------------

EVENT_DESCRIPTION = "The event kind id."


class EventPayload(BaseModel):
    """Members every event carries; subclasses pin ``event`` to their kind."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_describe_wire)

    KIND: ClassVar[str]  # derived from the subclass's `event` literal, so it is written once
    SUMMARY: ClassVar[str]
    TRIGGER: ClassVar[str]
    TRUST_BOUNDARY: ClassVar[str]
    DEDUPE_PARTS: ClassVar[tuple[str, ...]]
    EXAMPLE: ClassVar[Mapping[str, object]]

    eventId: EventId = Field(description="Stable idempotency key; process each eventId once.")
    event: str = Field(description=EVENT_DESCRIPTION)
    occurredAt: UtcTimestamp = Field(
        description="When the service recorded the event (ISO-8601 UTC, ending in Z)."
    )

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_null(cls, value: object) -> object:
        # An optional member is omitted, never null: one spelling of "absent" on both sides.
        if value is None:
            raise PydanticCustomError("invalid_type", "Must not be null; omit the member instead.")
        return value

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        (cls.KIND,) = get_args(cls.model_fields["event"].annotation)


class RoomClaimed(EventPayload):
    SUMMARY = (
        "A room moved from unclaimed discovery into claimed control by an official owner or "
        "community maintainer."
    )
    TRIGGER = "A claim payment and authority flow completes, or a room is otherwise recorded as claimed."
    TRUST_BOUNDARY = (
        "An authority and control event only; says nothing about token safety, investment "
        "quality, price, liquidity or legal compliance."
    )
    DEDUPE_PARTS = ("eventId",)
    EXAMPLE = {
        "eventId": "evt_01JZ8Q4M3V6T2K9P0R7S5W1X3Y",
        "event": "room.claimed",
        "occurredAt": "2026-06-29T14:05:12Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "project": "Moonfrog",
        "ticker": "FROG",
        "chain": "solana",
        "contractAddress": "FRoGm7x3kq2JdQ9vY4tL8sWcN6bE1aHzP5uR2fK9pump",
        "roomType": "official_owner",
    }

    event: Literal["room.claimed"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    project: NonEmptyStr = Field(description="Project name.")
    ticker: NonEmptyStr = Field(description="Token ticker.")
    chain: NonEmptyStr = Field(description="Chain the token is deployed on.")
    contractAddress: NonEmptyStr | None = Field(
        default=None, description="Token contract or mint address, when known."
    )
    roomType: Literal["official_owner", "community_claimed", "nft_room", "unclaimed_stub"] = Field(
        description=(
            "Claim state of the room: official owner, community claimed, NFT room or unclaimed "
            "stub. Not the RoomType product enumeration."
        )
    )


class RoomUpgraded(EventPayload):
    SUMMARY = "A room moves to Verified, Pro or Custom."
    TRIGGER = "A paid upgrade activates or a managed room tier changes."
    TRUST_BOUNDARY = "Describes active product features; does not rank or certify the project."
    DEDUPE_PARTS = ("eventId", "tier")
    EXAMPLE = {
        "eventId": "evt_01JZ8Q7B2C4D6E8F0G1H3J5K7M",
        "event": "room.upgraded",
        "occurredAt": "2026-06-29T15:30:00Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "previousTier": "claimed",
        "tier": "verified",
        "tierLabel": "Verified Room",
    }

    event: Literal["room.upgraded"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    previousTier: NonEmptyStr | None = Field(
        default=None, description="Tier id before the change, when there was one."
    )
    tier: NonEmptyStr = Field(description="New tier id.")
    tierLabel: NonEmptyStr = Field(description="New tier label.")


class RoomLinksUpdated(EventPayload):
    SUMMARY = "Room-published website or social links changed."
    TRIGGER = "A room maintainer saves official links or social surfaces."
    TRUST_BOUNDARY = (
        "Identifies what the room published; consumers present external links with phishing caution."
    )
    DEDUPE_PARTS = ("eventId", "changedFields")
    EXAMPLE = {
        "eventId": "evt_01JZ8QA1N3P5Q7R9S1T3V5W7X9",
        "event": "room.links.updated",
        "occurredAt": "2026-06-29T16:02:45Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "changedFields": ["website", "x"],
    }

    event: Literal["room.links.updated"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    changedFields: list[NonEmptyStr] = Field(min_length=1, description="Room link fields that changed.")


class RoomContentPublished(EventPayload):
    SUMMARY = "A room owner or maintainer publishes an update."
    TRIGGER = "An owner update, room note or other public room content is published."
    TRUST_BOUNDARY = "Carries room-published content; no endorsement of the project's claims."
    DEDUPE_PARTS = ("eventId", "updateId")
    EXAMPLE = {
        "eventId": "evt_01JZ8QC6Y8Z0A2B4C6D8E0F2G4",
        "event": "room.content.published",
        "occurredAt": "2026-06-29T17:11:03Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "updateId": "upd_4821",
        "title": "Liquidity migration schedule",
    }

    event: Literal["room.content.published"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    updateId: NonEmptyStr | None = Field(
        default=None, description="Id of the published update, when it has one."
    )
    title: NonEmptyStr | None = Field(default=None, description="Title of the update, when it has one.")


class ProjectDeploymentIndexed(EventPayload):
    SUMMARY = "A chain-specific deployment is indexed into a project graph."
    TRIGGER = "A credible deployment room is indexed for a project, including multichain project hub mapping."
    TRUST_BOUNDARY = (
        "Connects public room data; does not imply that all related deployments share the same "
        "authority state."
    )
    DEDUPE_PARTS = ("eventId", "chain", "contractAddress")
    EXAMPLE = {
        "eventId": "evt_01JZ8QF3H5J7K9M1N3P5Q7R9S1",
        "event": "project.deployment.indexed",
        "occurredAt": "2026-06-29T18:20:30Z",
        "slug": "moonfrog",
        "project": "Moonfrog",
        "chain": "base",
        "contractAddress": "0x7a3f9c2e5b8d1a4f6c0e3b9d2a5f8c1e4b7d0a36",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog-base",
        "hubUrl": "https://launchrooms.example/projects/moonfrog",
    }

    event: Literal["project.deployment.indexed"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Project hub slug.")
    project: NonEmptyStr = Field(description="Project name.")
    chain: NonEmptyStr = Field(description="Chain of the indexed deployment.")
    contractAddress: NonEmptyStr = Field(description="Contract or mint address of the deployment.")
    roomUrl: Url = Field(description="Canonical deployment-room URL.")
    hubUrl: Url | None = Field(default=None, description="Project hub URL, when a hub exists.")


class RoomArcadeHighScore(EventPayload):
    SUMMARY = "A room-linked arcade game records a new high score."
    TRIGGER = "The arcade high-score table records a public room-linked score."
    TRUST_BOUNDARY = "A community engagement signal, not a market or investment signal."
    DEDUPE_PARTS = ("eventId", "scoreId")
    EXAMPLE = {
        "eventId": "evt_01JZ8QH8T0V2W4X6Y8Z0A2B4C6",
        "event": "room.arcade.high_score",
        "occurredAt": "2026-06-29T19:45:17Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "game": "frog-hop",
        "playerName": "lilypad_larry",
        "score": 48210,
        "scoreId": "hs_90317",
    }

    event: Literal["room.arcade.high_score"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    game: NonEmptyStr = Field(description="Arcade game id.")
    playerName: NonEmptyStr = Field(description="Public display name of the player.")
    score: Number = Field(description="The score recorded.")
    # The published dedupe key names scoreId, which the field list lacks (docs/architecture.md
    # "Events and the catalog").
    scoreId: NonEmptyStr | None = Field(
        default=None,
        description=(
            "Id of the high-score entry, part of the dedupe key; without it the key is the eventId alone."
        ),
    )


class RoomArtworkVoteMilestone(EventPayload):
    SUMMARY = "A room artwork submission reaches a public vote milestone."
    TRIGGER = "Artwork voting crosses a configured milestone."
    TRUST_BOUNDARY = (
        "A community activity signal; mint eligibility or rights are confirmed in the room context."
    )
    DEDUPE_PARTS = ("eventId", "artworkId", "milestone")
    EXAMPLE = {
        "eventId": "evt_01JZ8QK5D7E9F1G3H5J7K9M1N3",
        "event": "room.artwork.vote_milestone",
        "occurredAt": "2026-06-29T20:10:00Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "artworkId": "art_2207",
        "artworkTitle": "Frog on the Moon",
        "votes": 103,
        "milestone": 100,
    }

    event: Literal["room.artwork.vote_milestone"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    artworkId: NonEmptyStr = Field(description="Artwork submission id.")
    artworkTitle: NonEmptyStr | None = Field(default=None, description="Artwork title, when it has one.")
    votes: Number = Field(description="Current vote count.")
    milestone: Number = Field(description="Vote threshold reached.")


class RoomTrending(EventPayload):
    SUMMARY = "A room crosses a public trend threshold."
    TRIGGER = "Public room activity crosses a configured threshold, with repeat suppression."
    TRUST_BOUNDARY = "An activity signal, not a ranking guarantee, trading recommendation or quality score."
    DEDUPE_PARTS = ("eventId", "slug", "window")
    EXAMPLE = {
        "eventId": "evt_01JZ8QN2P4Q6R8S0T2V4W6X8Y0",
        "event": "room.trending",
        "occurredAt": "2026-06-29T21:00:00Z",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "metric": "visits",
        "value": 12500,
        "window": "24h",
    }

    event: Literal["room.trending"] = Field(description=EVENT_DESCRIPTION)
    slug: NonEmptyStr = Field(description="Room slug.")
    roomUrl: Url = Field(description="Canonical public room URL.")
    metric: NonEmptyStr = Field(description="Activity metric, for example visits.")
    value: Number = Field(description="Metric value that crossed the threshold.")
    window: NonEmptyStr = Field(description="Measurement window, for example 24h.")


class PlatformMilestone(EventPayload):
    SUMMARY = "The service reaches a public platform milestone."
    TRIGGER = "A public milestone threshold is crossed."
    TRUST_BOUNDARY = "Describes service usage, not token quality or market performance."
    DEDUPE_PARTS = ("eventId", "milestone")
    EXAMPLE = {
        "eventId": "evt_01JZ8QR9Z1A3B5C7D9E1F3G5H7",
        "event": "platform.milestone",
        "occurredAt": "2026-06-30T00:00:00Z",
        "milestone": "10,000 rooms claimed",
        "value": 10000,
    }

    event: Literal["platform.milestone"] = Field(description=EVENT_DESCRIPTION)
    milestone: NonEmptyStr = Field(description="Public milestone label.")
    value: Number = Field(description="Milestone value where numeric.")


# The published order (docs/architecture.md "Events and the catalog"), which is also the catalog's.
EVENT_MODELS: dict[str, type[EventPayload]] = {
    model.KIND: model
    for model in (
        RoomClaimed,
        RoomUpgraded,
        RoomLinksUpdated,
        RoomContentPublished,
        ProjectDeploymentIndexed,
        RoomArcadeHighScore,
        RoomArtworkVoteMilestone,
        RoomTrending,
        PlatformMilestone,
    )
}


class WebhookTest(EventPayload):
    """The admin's test delivery. Not one of the catalog's event kinds: nobody subscribes to it, it
    is never published, and ``parse_event`` refuses it. The catalog documents it as ``testEvent``."""

    SUMMARY = "A test delivery an admin sends to check a partner endpoint and its signature check."
    TRIGGER = "An admin runs the partner test; it is sent once, at once, whatever kinds you subscribe to."
    TRUST_BOUNDARY = "Says nothing about any room or project: verify it, answer 2xx, act on nothing."
    DEDUPE_PARTS = ("eventId",)
    EXAMPLE = {
        "eventId": "evt_01JZ8QT2M4N6P8R0S2T4V6W8X0",
        "event": "webhook.test",
        "occurredAt": "2026-06-29T12:00:00.123456Z",
        "partnerId": "ptn_01JZ8Q0A1B2C3D4E5F6G7H8J9K",
        "test": True,
    }

    event: Literal["webhook.test"] = Field(description=EVENT_DESCRIPTION)
    partnerId: NonEmptyStr = Field(description="Your partner id: the endpoint the test was sent to.")
    test: Literal[True] = Field(description="Always true: a test delivery, never a real event.")


# --- parsing ----------------------------------------------------------------------------------


# What the events.dedupe_key column holds (``dedupe_key``): a longer key is refused on publishing,
# on every database, rather than failing in PostgreSQL's column as a server error.
DEDUPE_KEY_MAX = 1024


def new_event_id() -> str:
    """``evt_`` + a ULID: unique, and sortable by creation time."""
    return new_id("evt")


def parse_event(data: object, *, now: datetime, new_id: Callable[[], str] = new_event_id) -> EventPayload:
    """Validate ``{event: kind, ...members}`` strictly, filling ``eventId`` and ``occurredAt``.

    Raises ``InvalidInput`` naming each member at fault; messages are fixed sentences, so nothing
    the publisher sent is echoed back.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput(errors=[FieldError("body", "invalid_type", "The event must be a JSON object.")])
    kind = data.get("event")
    model = EVENT_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        error = FieldError("event", "unknown_event", "Name one of the event kinds in the catalog.")
        raise InvalidInput(errors=[error])
    members = dict(data)
    if "eventId" not in members:
        members["eventId"] = new_id()
    if "occurredAt" not in members:
        members["occurredAt"] = format_occurred_at(now)
    try:
        payload = model.model_validate(members)
    except ValidationError as exc:
        raise InvalidInput(errors=[_field_error(error) for error in exc.errors()]) from None
    if datetime.fromisoformat(payload.occurredAt) > now + OCCURRED_AHEAD:
        # It would stand as the room's last change in the sitemap until a later one came.
        minutes = OCCURRED_AHEAD.seconds // 60
        message = f"Must not be more than {minutes} minutes ahead of the service's clock."
        raise InvalidInput(errors=[FieldError("occurredAt", "invalid", message)])
    if len(dedupe_key(payload)) > DEDUPE_KEY_MAX:
        # Named by the members that make the key beside eventId, which alone never fills it.
        message = f"Makes the event's dedupe key longer than {DEDUPE_KEY_MAX} characters."
        raise InvalidInput(
            errors=[
                FieldError(name, "too_long", message)
                for name in payload.DEDUPE_PARTS
                if name != "eventId" and getattr(payload, name) is not None
            ]
        )
    return payload


# Our own validators raise these codes with fixed messages; pydantic's built-in ones are mapped.
_OWN_CODES = frozenset({"invalid", "invalid_type", "invalid_characters"})
_TYPE_MESSAGES = {
    "string_type": "Must be a string.",
    "list_type": "Must be an array.",
    "literal_error": "Must be a string.",
}
_VALUE_MESSAGES = {
    "string_too_short": "Must not be empty.",
    "too_short": "Must list at least one item.",
    "literal_error": "Must be one of the values listed in the catalog.",
}


def _field_error(error: ErrorDetails) -> FieldError:
    field = ".".join(str(part) for part in error["loc"]) or "body"
    kind = error["type"]
    if kind == "missing":
        return FieldError(field, "missing", "This member is required.")
    if kind == "extra_forbidden":
        return FieldError(field, "unknown_field", "This member is not part of the event.")
    if kind in _OWN_CODES:
        return FieldError(field, kind, error["msg"])
    if kind == "string_unicode":  # a lone surrogate: pydantic refuses it before our validators run
        return FieldError(field, "invalid_characters", NOT_UNICODE_MESSAGE)
    # A literal compared against a number is a type error, not merely an unlisted value.
    wrong_type = kind.endswith("_type") or (
        kind == "literal_error" and not isinstance(error.get("input"), str)
    )
    if wrong_type:
        return FieldError(field, "invalid_type", _TYPE_MESSAGES.get(kind, "The value has the wrong type."))
    return FieldError(field, "invalid", _VALUE_MESSAGES.get(kind, "The value is not allowed."))


# --- derived views ----------------------------------------------------------------------------


def dump_payload(payload: EventPayload) -> dict[str, Any]:
    """The wire JSON of a payload; absent optional members are omitted, never null."""
    # exclude_none is exact here: nulls are refused on input, so None only means "absent".
    return payload.model_dump(mode="json", exclude_none=True)


def _key_part(value: object) -> str:
    if isinstance(value, list):
        return ",".join(_key_part(item) for item in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # milestone 100 and 100.0 are the same milestone
    # Escaping the separators keeps the key injective: ("a:b", "c") never meets ("a", "b:c").
    return str(value).replace("%", "%25").replace(":", "%3A").replace(",", "%2C")


def dedupe_key(payload: EventPayload) -> str:
    """``kind:part:part``; an absent optional part (scoreId, updateId) is left out."""
    parts = [payload.KIND]
    for name in payload.DEDUPE_PARTS:
        value = getattr(payload, name)
        if value is not None:
            parts.append(_key_part(value))
    return ":".join(parts)


def dedupe_composition(model: type[EventPayload]) -> str:
    """The key as the catalog publishes it, e.g. ``event.id + tier``."""
    return " + ".join("event.id" if part == "eventId" else part for part in model.DEDUPE_PARTS)


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def payload_json_schema(model: type[EventPayload]) -> dict[str, Any]:
    """Draft 2020-12 JSON Schema of the payload as delivered."""
    return {"$schema": JSON_SCHEMA_DIALECT, **json_schema(model, mode="serialization")}


def _type_label(prop: Mapping[str, Any]) -> str:
    if "enum" in prop:
        return "string (one of: " + ", ".join(prop["enum"]) + ")"
    if prop.get("type") == "array":
        return _type_label(prop["items"]) + "[]"
    return {"uri": "string (URL)", "date-time": "string (ISO-8601 UTC)"}.get(
        prop.get("format", ""), str(prop.get("type"))
    )


def payload_fields(model: type[EventPayload]) -> list[dict[str, Any]]:
    """``payloadFields`` of the catalog entry: common members first, then the kind's own."""
    schema = payload_json_schema(model)
    required = set(schema["required"])
    return [
        {
            "name": name,
            "required": name in required,
            "summary": prop["description"],
            "type": _type_label(prop),
        }
        for name, prop in schema["properties"].items()
    ]


def example_payload(model: type[EventPayload]) -> dict[str, Any]:
    """The kind's example, passed through the model so it is exactly what would be delivered."""
    return dump_payload(model.model_validate(model.EXAMPLE))
