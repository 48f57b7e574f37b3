"""Admin inputs held to what storage holds: replay windows, event ids and partner ports answer 400,
never 500, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from typing import Any

import pytest
from webhook_helpers import AUTH, room_claimed, settings


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"since": "0001-01-01T00:00:00+14:00"}, "since"),  # before year 1 once in UTC
        ({"since": "2026-01-01T00:00:00Z", "until": "9999-12-31T23:59:59-14:00"}, "until"),  # after 9999
    ],
)
def test_a_replay_window_outside_the_years_1_to_9999_is_400(
    make_client: Any, database_url: str, body: dict[str, Any], field: str
) -> None:
    """A window whose offset carries it outside years 1 to 9999 in UTC is 400 naming the member."""
    with make_client(database_url=database_url, **settings()) as client:
        answer = client.post("/admin/deliveries/replay", json=body, headers=AUTH)
    assert (answer.status, answer.json["errors"]) == (
        400,
        [{"field": field, "code": "invalid", "message": "Must fall within the years 1 to 9999 in UTC."}],
    )


def test_the_widest_replay_window_is_accepted(make_client: Any, database_url: str) -> None:
    """Years 1 and 9999 themselves, in UTC, are a valid window."""
    body = {"since": "0001-01-01T00:00:00Z", "until": "9999-12-31T23:59:59Z"}
    with make_client(database_url=database_url, **settings()) as client:
        answer = client.post("/admin/deliveries/replay", json=body, headers=AUTH)
    assert (answer.status, answer.json) == (202, {"deliveries": 0})


EVENT_ID_MESSAGE = "Must be 1 to 64 characters, each a letter, a digit or one of _ . : -."


@pytest.mark.parametrize(
    "event_id",
    ["e" * 65, "evt with spaces", "evt/slash", "évt", "evt_\u200b"],
    ids=["65-characters", "spaces", "slash", "non-ascii", "zero-width"],
)
def test_an_event_id_beyond_the_documented_pattern_is_400(make_client: Any, database_url: str, event_id: str) -> None:
    """An eventId longer than 64 characters or outside the pattern is 400 on every database."""
    with make_client(database_url=database_url, **settings()) as client:
        answer = client.post("/admin/events", json=room_claimed(eventId=event_id), headers=AUTH)
        stored = client.get("/admin/deliveries", headers=AUTH).json["deliveries"]
    assert (answer.status, answer.json["errors"]) == (
        400,
        [{"field": "eventId", "code": "invalid", "message": EVENT_ID_MESSAGE}],
    )
    assert stored == []


def test_an_event_id_of_64_characters_is_stored(make_client: Any, database_url: str) -> None:
    """The longest eventId the pattern allows is stored and answered as given."""
    event_id = "evt_" + "A1_.:-" * 10
    assert len(event_id) == 64
    with make_client(database_url=database_url, **settings()) as client:
        answer = client.post("/admin/events", json=room_claimed(eventId=event_id), headers=AUTH)
    assert (answer.status, answer.json["eventId"]) == (202, event_id)


@pytest.mark.parametrize(
    ("port", "accepted"), [(0, False), (1, True), (65535, True), (65536, False), (99999, False)]
)
def test_partner_url_ports_are_1_to_65535(make_client: Any, port: int, accepted: bool) -> None:
    """A partner URL naming port 0 or beyond 65535 is refused with 400."""
    with make_client(**settings()) as client:
        answer = client.post(
            "/admin/partners", json={"name": "P", "url": f"http://127.0.0.1:{port}/hook"}, headers=AUTH
        )
    if accepted:
        assert answer.status == 201, answer.json
    else:
        assert (answer.status, [e["field"] for e in answer.json["errors"]]) == (400, ["url"])
