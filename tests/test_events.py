"""Event models: strict parsing, exact error lists, wire dumps, dedupe keys and the schemas they derive."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from functools import cache
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from ulid import ULID

from service.events import (
    EVENT_MODELS,
    EventPayload,
    RoomArcadeHighScore,
    RoomArtworkVoteMilestone,
    RoomClaimed,
    dedupe_key,
    dump_payload,
    format_occurred_at,
    new_event_id,
    parse_event,
    payload_json_schema,
)
from service.exceptions import InvalidInput

# After every catalog example's occurredAt: an event is never recorded ahead of the clock.
NOW = datetime(2026, 6, 30, 12, 0, 0, tzinfo=UTC)
ROOM_URL = "https://launchrooms.example/rooms/moonfrog"
TRENDING = {
    "event": "room.trending",
    "slug": "moonfrog",
    "roomUrl": ROOM_URL,
    "metric": "visits",
    "value": 12500,
    "window": "24h",
}
CLAIMED = {
    "event": "room.claimed",
    "slug": "moonfrog",
    "roomUrl": ROOM_URL,
    "project": "Moonfrog",
    "ticker": "FROG",
    "chain": "solana",
    "roomType": "official_owner",
}


def parse(data: object) -> EventPayload:
    return parse_event(data, now=NOW, new_id=lambda: "evt_fixed")


def errors_of(data: object) -> list[dict[str, str]]:
    with pytest.raises(InvalidInput) as raised:
        parse(data)
    return [error.as_dict() for error in raised.value.field_errors]


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def without(base: dict[str, Any], *names: str) -> dict[str, Any]:
    return {key: value for key, value in base.items() if key not in names}


@cache
def validator(kind: str) -> Draft202012Validator:
    schema = payload_json_schema(EVENT_MODELS[kind])
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def test_registry_lists_the_nine_kinds_in_spec_order() -> None:
    """EVENT_MODELS keys are the published kinds, in the published order, each model's own KIND."""
    assert list(EVENT_MODELS) == [
        "room.claimed",
        "room.upgraded",
        "room.links.updated",
        "room.content.published",
        "project.deployment.indexed",
        "room.arcade.high_score",
        "room.artwork.vote_milestone",
        "room.trending",
        "platform.milestone",
    ]
    assert all(kind == model.KIND for kind, model in EVENT_MODELS.items())


def test_parse_fills_event_id_and_occurred_at() -> None:
    """A payload without eventId or occurredAt gets the injected id and the injected clock."""
    assert dump_payload(parse(TRENDING)) == {
        "eventId": "evt_fixed",
        "event": "room.trending",
        "occurredAt": "2026-06-30T12:00:00Z",
        "slug": "moonfrog",
        "roomUrl": ROOM_URL,
        "metric": "visits",
        "value": 12500,
        "window": "24h",
    }


def test_parse_keeps_given_event_id_and_occurred_at() -> None:
    """Members the publisher sent are kept (after normalisation), never overwritten."""
    payload = parse(with_(TRENDING, eventId="evt_given", occurredAt="2026-01-02T03:04:05Z"))
    assert (payload.eventId, payload.occurredAt) == ("evt_given", "2026-01-02T03:04:05Z")


def test_new_event_id_is_evt_and_a_ulid() -> None:
    """Generated ids are evt_ followed by a parseable, time-sortable ULID."""
    first, second = new_event_id(), new_event_id()
    assert (first[:4], len(first), str(ULID.from_str(first[4:]))) == ("evt_", 30, first[4:])
    assert first != second


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("2026-06-29T12:00:00Z", "2026-06-29T12:00:00Z"),
        ("2026-06-29T14:00:00+02:00", "2026-06-29T12:00:00Z"),
        ("2026-06-29T07:30:00.250000-04:30", "2026-06-29T12:00:00.250000Z"),
        ("2026-06-29T12:00:00+00:00", "2026-06-29T12:00:00Z"),
        ("20260629T120000Z", "2026-06-29T12:00:00Z"),
    ],
)
def test_occurred_at_is_normalised_to_utc_z(given: str, stored: str) -> None:
    """Any explicit offset is accepted and written back as UTC ending in Z."""
    assert parse(with_(TRENDING, occurredAt=given)).occurredAt == stored


def test_format_occurred_at_refuses_naive_datetimes() -> None:
    """A naive clock is a programming error, not silently UTC."""
    with pytest.raises(ValueError, match="aware"):
        format_occurred_at(datetime(2026, 6, 29, 12, 0))
    assert format_occurred_at(datetime(2026, 6, 29, 13, 0, tzinfo=timezone(timedelta(hours=1)))) == (
        "2026-06-29T12:00:00Z"
    )


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("value", 12500),
        ("value", 0),
        ("value", -3),
        ("value", 12.5),
        ("value", 1e300),
    ],
)
def test_numbers_accept_int_and_float_unchanged(member: str, value: float) -> None:
    """An int stays an int and a float a float, so 12 is never delivered as 12.0."""
    dumped = dump_payload(parse(with_(TRENDING, **{member: value})))
    assert (dumped[member], type(dumped[member])) == (value, type(value))


@pytest.mark.parametrize(
    "url",
    [
        "https://launchrooms.example/rooms/moonfrog",
        "http://127.0.0.1:8000/rooms/moonfrog?tab=links#top",
        "https://launchrooms.example/rooms/moon%20frog",
    ],
)
def test_urls_accept_absolute_http_urls_as_plain_strings(url: str) -> None:
    """Absolute http(s) URLs pass and come back exactly as sent."""
    assert dump_payload(parse(with_(TRENDING, roomUrl=url)))["roomUrl"] == url


URL_ERROR = {"field": "roomUrl", "code": "invalid", "message": "Must be an absolute http or https URL."}


@pytest.mark.parametrize(
    "url",
    [
        "",
        "/rooms/moonfrog",
        "launchrooms.example/rooms/moonfrog",
        "ftp://launchrooms.example/rooms/moonfrog",
        "javascript:alert(1)",
        "HTTPS://launchrooms.example/rooms/moonfrog",
        "https://",
        "https:///rooms",
        "https://launchrooms.example/rooms/moon frog",
        "https://launchrooms.example/rooms/moonfrog\n",
        "https://launchrooms.example/rooms/mööndfrog",
        "https://launchrooms.example:99999999/rooms",
        "http://[::1/rooms",
    ],
)
def test_urls_refuse_anything_but_absolute_http_urls(url: str) -> None:
    """Relative, other-scheme, hostless, spaced and non-ASCII URLs are invalid."""
    assert errors_of(with_(TRENDING, roomUrl=url)) == [URL_ERROR]


URI_FORMAT = Draft202012Validator({"type": "string", "format": "uri"}, format_checker=Draft202012Validator.FORMAT_CHECKER)


@pytest.mark.parametrize(
    "url",
    [
        "https://launchrooms.example/rooms/moon%frog",  # a % not followed by two hex digits
        "https://launchrooms.example/rooms/moon%2",
        "https://launchrooms.example/rooms/[moonfrog]",  # brackets belong to an IPv6 host alone
        "https://launchrooms.example/rooms/moonfrog#top#links",  # a second fragment
        "https://owner@host@launchrooms.example/rooms/moonfrog",  # a second @
    ],
)
def test_urls_refuse_what_a_partners_uri_check_refuses(url: str) -> None:
    """Characters the catalog's pattern allows, placed where RFC 3986 does not: refused at
    publishing, as a partner validating deliveries against the catalog (`format: uri`) would
    refuse the delivery; they used to be accepted and delivered."""
    assert list(URI_FORMAT.iter_errors(url))  # what the partner's validator says
    assert errors_of(with_(TRENDING, roomUrl=url)) == [URL_ERROR]


@pytest.mark.parametrize(
    "url",
    [
        "https://launchrooms.example/rooms/moonfrog",
        "http://[::1]:8080/rooms/moonfrog",
        "https://launchrooms.example/rooms/moon%2Bfrog?tab=(links)&x=*#top",
    ],
)
def test_an_accepted_url_passes_a_partners_uri_check(url: str) -> None:
    """What publishing accepts, a partner's `format: uri` check accepts too."""
    assert dump_payload(parse(with_(TRENDING, roomUrl=url)))["roomUrl"] == url
    assert not list(URI_FORMAT.iter_errors(url))


def test_dump_omits_absent_optional_members() -> None:
    """An optional member that was not sent is absent from the wire, not null."""
    dumped = dump_payload(parse(CLAIMED))
    assert "contractAddress" not in dumped
    assert dumped == {"eventId": "evt_fixed", "occurredAt": "2026-06-30T12:00:00Z", **CLAIMED}


@pytest.mark.parametrize(
    ("occurred", "accepted"),
    [
        ("2026-06-30T12:05:00Z", True),  # at the bound: a publisher's clock a little ahead
        ("2026-06-30T12:05:00.000001Z", False),
        ("2026-06-30T14:05:01+02:00", False),  # 5 min 1 s ahead, in another offset
        ("2999-01-01T00:00:00Z", False),
        ("2020-01-01T00:00:00Z", True),  # recorded long ago: a backfill
    ],
)
def test_occurred_at_is_not_ahead_of_the_clock(occurred: str, accepted: bool) -> None:
    """`occurredAt` is when the event was recorded: at most 5 minutes ahead of the service's clock
    (the publisher's clock error), never a time still to come, which would stand as the room's last
    change in the sitemap."""
    data = with_(TRENDING, occurredAt=occurred)
    if accepted:
        assert parse(data).occurredAt
        return
    message = "Must not be more than 5 minutes ahead of the service's clock."
    assert errors_of(data) == [error("occurredAt", "invalid", message)]


def error(field: str, code: str, message: str) -> dict[str, str]:
    return {"field": field, "code": code, "message": message}


BODY_ERROR = [error("body", "invalid_type", "The event must be a JSON object.")]
UNKNOWN_EVENT = [error("event", "unknown_event", "Name one of the event kinds in the catalog.")]
NOT_A_NUMBER = "Must be a number."
NOT_A_STRING = "Must be a string."
NO_NULL = "Must not be null; omit the member instead."
BAD_TIME = "Must be an ISO-8601 timestamp with Z or a UTC offset."


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param([TRENDING], BODY_ERROR, id="array-body"),
        pytest.param("room.trending", BODY_ERROR, id="string-body"),
        pytest.param(None, BODY_ERROR, id="null-body"),
        pytest.param({}, UNKNOWN_EVENT, id="no-kind"),
        pytest.param(with_(TRENDING, event="room.deleted"), UNKNOWN_EVENT, id="unknown-kind"),
        pytest.param(with_(TRENDING, event="ROOM.TRENDING"), UNKNOWN_EVENT, id="kind-wrong-case"),
        pytest.param(with_(TRENDING, event=12), UNKNOWN_EVENT, id="kind-not-string"),
        pytest.param(without(TRENDING, "window"),
                     [error("window", "missing", "This member is required.")], id="missing-member"),
        pytest.param(with_(TRENDING, rank=1),
                     [error("rank", "unknown_field", "This member is not part of the event.")],
                     id="unknown-member"),
        pytest.param(with_(TRENDING, value="12"), [error("value", "invalid_type", NOT_A_NUMBER)],
                     id="string-for-number"),
        pytest.param(with_(TRENDING, value=True), [error("value", "invalid_type", NOT_A_NUMBER)],
                     id="bool-for-number"),
        pytest.param(with_(TRENDING, value=[1]), [error("value", "invalid_type", NOT_A_NUMBER)],
                     id="array-for-number"),
        pytest.param(with_(TRENDING, value=math.nan),
                     [error("value", "invalid", "Must be a finite number.")], id="nan"),
        pytest.param(with_(TRENDING, value=math.inf),
                     [error("value", "invalid", "Must be a finite number.")], id="infinity"),
        pytest.param(with_(TRENDING, slug=12), [error("slug", "invalid_type", NOT_A_STRING)],
                     id="number-for-string"),
        pytest.param(with_(TRENDING, slug=""), [error("slug", "invalid", "Must not be empty.")],
                     id="empty-string"),
        pytest.param(with_(TRENDING, slug=None), [error("slug", "invalid_type", NO_NULL)],
                     id="null-required"),
        pytest.param(with_(CLAIMED, contractAddress=None),
                     [error("contractAddress", "invalid_type", NO_NULL)], id="null-optional"),
        pytest.param(with_(TRENDING, eventId=None), [error("eventId", "invalid_type", NO_NULL)],
                     id="null-event-id"),
        pytest.param(with_(TRENDING, eventId=7), [error("eventId", "invalid_type", NOT_A_STRING)],
                     id="number-event-id"),
        pytest.param(with_(TRENDING, occurredAt="2026-06-29T12:00:00"),
                     [error("occurredAt", "invalid", BAD_TIME)], id="naive-occurred-at"),
        pytest.param(with_(TRENDING, occurredAt="2026-06-29"),
                     [error("occurredAt", "invalid", BAD_TIME)], id="date-only"),
        pytest.param(with_(TRENDING, occurredAt="yesterday"),
                     [error("occurredAt", "invalid", BAD_TIME)], id="prose-time"),
        pytest.param(with_(TRENDING, occurredAt="9999-12-31T23:59:59-01:00"),
                     [error("occurredAt", "invalid", BAD_TIME)], id="past-year-9999"),
        pytest.param(with_(TRENDING, occurredAt=1782734400),
                     [error("occurredAt", "invalid_type", NOT_A_STRING)], id="epoch-occurred-at"),
        pytest.param(with_(CLAIMED, roomType="owner_room"),
                     [error("roomType", "invalid", "Must be one of the values listed in the catalog.")],
                     id="room-type-product-enum"),
        pytest.param(with_(CLAIMED, roomType=1), [error("roomType", "invalid_type", NOT_A_STRING)],
                     id="room-type-number"),
        pytest.param({"event": "room.links.updated", "slug": "m", "roomUrl": ROOM_URL, "changedFields": []},
                     [error("changedFields", "invalid", "Must list at least one item.")],
                     id="empty-list"),
        pytest.param({"event": "room.links.updated", "slug": "m", "roomUrl": ROOM_URL,
                      "changedFields": "website"},
                     [error("changedFields", "invalid_type", "Must be an array.")], id="string-for-list"),
        pytest.param({"event": "room.links.updated", "slug": "m", "roomUrl": ROOM_URL,
                      "changedFields": ["website", 3, ""]},
                     [error("changedFields.1", "invalid_type", NOT_A_STRING),
                      error("changedFields.2", "invalid", "Must not be empty.")], id="bad-list-items"),
        pytest.param({"event": "room.trending", "slug": 1, "extra": "x", "value": "1"},
                     [error("slug", "invalid_type", NOT_A_STRING),
                      error("roomUrl", "missing", "This member is required."),
                      error("metric", "missing", "This member is required."),
                      error("value", "invalid_type", NOT_A_NUMBER),
                      error("window", "missing", "This member is required."),
                      error("extra", "unknown_field", "This member is not part of the event.")],
                     id="many-at-once"),
    ],
)  # fmt: skip
def test_parse_refuses_with_exact_errors(data: object, expected: list[dict[str, str]]) -> None:
    """Each strictness failure is a 400 naming the member, a stable code and a fixed sentence."""
    assert errors_of(data) == expected


def test_bad_request_messages_never_echo_input() -> None:
    """The 400 body is the service's own sentences; only a member's name is repeated, as its field."""
    marker = "<script>alert('x')</script>"
    with pytest.raises(InvalidInput) as raised:
        parse(with_(TRENDING, slug=12, metric=[marker], **{marker: marker}))
    assert raised.value.body() == {
        "ok": False,
        "message": "The request is not valid.",
        "errors": [
            error("slug", "invalid_type", NOT_A_STRING),
            error("metric", "invalid_type", NOT_A_STRING),
            error(marker, "unknown_field", "This member is not part of the event."),
        ],
    }


HIGH_SCORE = RoomArcadeHighScore.EXAMPLE
VOTES = RoomArtworkVoteMilestone.EXAMPLE
VOTES_KEY = "room.artwork.vote_milestone:evt_01JZ8QK5D7E9F1G3H5J7K9M1N3"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        *[
            (model.EXAMPLE, expected)
            for model, expected in zip(
                EVENT_MODELS.values(),
                [
                    "room.claimed:evt_01JZ8Q4M3V6T2K9P0R7S5W1X3Y",
                    "room.upgraded:evt_01JZ8Q7B2C4D6E8F0G1H3J5K7M:verified",
                    "room.links.updated:evt_01JZ8QA1N3P5Q7R9S1T3V5W7X9:website,x",
                    "room.content.published:evt_01JZ8QC6Y8Z0A2B4C6D8E0F2G4:upd_4821",
                    "project.deployment.indexed:evt_01JZ8QF3H5J7K9M1N3P5Q7R9S1:base:"
                    "0x7a3f9c2e5b8d1a4f6c0e3b9d2a5f8c1e4b7d0a36",
                    "room.arcade.high_score:evt_01JZ8QH8T0V2W4X6Y8Z0A2B4C6:hs_90317",
                    "room.artwork.vote_milestone:evt_01JZ8QK5D7E9F1G3H5J7K9M1N3:art_2207:100",
                    "room.trending:evt_01JZ8QN2P4Q6R8S0T2V4W6X8Y0:moonfrog:24h",
                    "platform.milestone:evt_01JZ8QR9Z1A3B5C7D9E1F3G5H7:10%2C000 rooms claimed",
                ],
                strict=True,
            )
        ],
        (without(HIGH_SCORE, "scoreId"), "room.arcade.high_score:evt_01JZ8QH8T0V2W4X6Y8Z0A2B4C6"),
        (with_(VOTES, milestone=100.0), f"{VOTES_KEY}:art_2207:100"),
        (with_(VOTES, milestone=99.5), f"{VOTES_KEY}:art_2207:99.5"),
        (with_(TRENDING, eventId="evt_a:b", slug="c"), "room.trending:evt_a%3Ab:c:24h"),
        (with_(TRENDING, eventId="evt_a", slug="b:c"), "room.trending:evt_a:b%3Ac:24h"),
        (with_(TRENDING, eventId="evt_a", slug="50%"), "room.trending:evt_a:50%25:24h"),
        ({"event": "room.links.updated", "eventId": "evt_a", "slug": "m", "roomUrl": ROOM_URL,
          "changedFields": ["website,x", "telegram"]}, "room.links.updated:evt_a:website%2Cx,telegram"),
        ({"event": "room.content.published", "eventId": "evt_a", "slug": "m", "roomUrl": ROOM_URL},
         "room.content.published:evt_a"),
    ],
)  # fmt: skip
def test_dedupe_key(data: dict[str, Any], key: str) -> None:
    """Kind, then the listed parts joined by ':', separators escaped, absent optional parts left out."""
    assert dedupe_key(parse(data)) == key


@pytest.mark.parametrize("kind", list(EVENT_MODELS))
def test_schema_is_strict_draft_2020_12(kind: str) -> None:
    """Each payload schema is valid 2020-12, closed, pins the kind and requires just the required fields."""
    model = EVENT_MODELS[kind]
    schema = payload_json_schema(model)
    Draft202012Validator.check_schema(schema)
    required = [name for name, field in model.model_fields.items() if field.is_required()]
    assert (schema["$schema"], schema["type"], schema["additionalProperties"], schema["title"]) == (
        "https://json-schema.org/draft/2020-12/schema",
        "object",
        False,
        kind,
    )
    assert schema["required"] == required
    assert schema["properties"]["event"] == {
        "const": kind,
        "type": "string",
        "description": "The event kind id.",
    }
    assert list(schema["properties"])[:3] == ["eventId", "event", "occurredAt"]


@pytest.mark.parametrize(
    ("payload", "valid"),
    [
        (with_(RoomClaimed.EXAMPLE, contractAddress=None), False),  # null never goes on the wire
        (with_(RoomClaimed.EXAMPLE, occurredAt="2026-06-29T14:05:12+02:00"), False),  # wire is Z only
        (with_(RoomClaimed.EXAMPLE, roomUrl="HTTPS://launchrooms.example/"), False),
        (with_(RoomClaimed.EXAMPLE, extra=1), False),
        (with_(RoomClaimed.EXAMPLE, event="room.upgraded"), False),
        (RoomClaimed.EXAMPLE, True),
    ],
)
def test_schema_describes_the_wire_not_the_input(payload: dict[str, Any], valid: bool) -> None:
    """The schema refuses what dump_payload never produces, so partners can validate strictly."""
    assert validator("room.claimed").is_valid(payload) is valid


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
MEMBER_NAMES = sorted(
    {name for model in EVENT_MODELS.values() for name in model.model_fields} | {"", "extra", "0"}
)


@st.composite
def event_like(draw: st.DrawFn) -> object:
    """Arbitrary JSON, or a real example with members dropped, replaced or added at random."""
    if draw(st.booleans()):
        return draw(
            JSON_VALUES
            | st.dictionaries(st.sampled_from([*MEMBER_NAMES, "event"]) | st.text(max_size=8), JSON_VALUES)
        )
    model = draw(st.sampled_from(list(EVENT_MODELS.values())))
    data = dict(model.EXAMPLE)
    for name in draw(st.lists(st.sampled_from(list(data)), max_size=3)):
        data.pop(name, None)
    for name in draw(st.lists(st.sampled_from(MEMBER_NAMES), max_size=3)):
        data[name] = draw(
            JSON_VALUES | st.sampled_from([model.EXAMPLE.get(name), ROOM_URL, "2026-06-29T12:00Z"])
        )
    return data


@settings(max_examples=400, deadline=None)
@given(event_like())
# A text member holding NUL, which no database stores: its own code, as for a registration.
@example({**EVENT_MODELS["room.content.published"].EXAMPLE, "slug": "moon\x00frog"})
def test_parse_event_only_yields_a_model_or_bad_request(data: object) -> None:
    """Any JSON gives either InvalidInput or a payload whose dump fits its schema and parses back equal."""
    try:
        payload = parse(data)
    except InvalidInput as exc:
        assert exc.field_errors
        assert all(
            error.code
            in {"invalid", "invalid_type", "invalid_characters", "missing", "unknown_field", "unknown_event"}
            for error in exc.field_errors
        )
        return
    wire = dump_payload(payload)
    assert validator(payload.KIND).is_valid(wire)
    assert parse(wire) == payload
