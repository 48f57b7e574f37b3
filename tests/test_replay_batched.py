"""Replaying a window of batched events: a window holds the events published in it, whenever the
batch that carried them was formed. A batch whose every event is in the window goes again whole
(the same bytes under the same id); events whose batch also carried events outside it go again in
a new batch of their own, so the partner is sent exactly the window's events."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from service.clock import format_timestamp
from service.webhooks import partners
from tests.webhook_helpers import (
    AUTH,
    Receiver,
    Reply,
    deliveries,
    drain,
    onboard,
    publish,
    settings,
    trending,
)

BATCHED = {"batch": {"events": ["room.trending"], "maxEvents": 100, "maxWaitSeconds": 5}}


@pytest.fixture
def client_on(make_client: Any, database_url: str) -> Any:
    """A test app on SQLite or PostgreSQL, one retry before a delivery fails."""

    def build() -> Any:
        return make_client(**settings(webhook_retry_schedule=(10,)), database_url=database_url)

    return build


def settle(client: Any, clock: Any) -> None:
    """Let every waiting event form its batch and every batch spend its schedule."""
    for _ in range(3):
        clock.advance(30)
        drain(client)


def replay(client: Any, **window: Any) -> Any:
    return client.post("/admin/deliveries/replay", json=window, headers=AUTH)


def carried(request: Any) -> list[str]:
    """The event ids a request carried, in its order."""
    body = json.loads(request.body)
    return [payload["eventId"] for payload in body["events"]] if body.get("batch") else [body["eventId"]]


def members(client: Any) -> dict[str, dict[str, Any]]:
    """Each event's own delivery (a batch's is left out), by event id."""
    return {d["eventId"]: d for d in deliveries(client) if d["batchSize"] is None}


def check_consistent(client: Any) -> None:
    """Nothing left waiting, and every event has the status of the batch it names."""
    listed = deliveries(client)
    status = {d["id"]: d["status"] for d in listed}
    assert not {"pending", "batching", "batched", "delivering"} & set(status.values()), status
    for delivery in listed:
        if delivery["batchId"] is not None:
            assert status[delivery["batchId"]] == delivery["status"]


@pytest.mark.parametrize("status", ["delivered", "failed"])
def test_a_window_replays_the_batched_events_published_in_it(client_on: Any, clock: Any, status: str) -> None:
    """The event published at ``since`` is replayed, the one at ``until`` is not, nor the one
    published before ``since`` whose batch formed inside the window; the two replayed go out again
    together, and nothing else does."""
    failing = status == "failed"
    with Receiver(Reply(503, "down") if failing else Reply()) as receiver, client_on() as client:
        onboard(client, receiver.url(), **BATCHED)
        before = publish(client, trending(0))["eventId"]
        clock.advance(4)
        since = clock()
        at_since = publish(client, trending(1))["eventId"]
        clock.advance(1)
        assert drain(client) == 1  # the first batch forms (before, at_since) inside the window
        clock.advance(1)
        inside = publish(client, trending(2))["eventId"]
        clock.advance(2)
        until = clock()
        at_until = publish(client, trending(3))["eventId"]
        settle(client, clock)  # the second batch (inside, at_until) forms after the window
        batches = sorted((d for d in deliveries(client) if d["batchSize"]), key=lambda d: d["createdAt"])
        assert batches[0]["createdAt"] == format_timestamp(since + timedelta(seconds=1))
        assert {d["status"] for d in deliveries(client)} == {status}
        receiver.default = Reply()
        sent = len(receiver.requests)

        window = {"since": format_timestamp(since), "until": format_timestamp(until), "status": status}
        assert replay(client, **window).json == {"deliveries": 2}
        assert drain(client) == 1
        [again] = receiver.requests[sent:]
        assert carried(again) == [at_since, inside]
        assert again.headers["webhook-id"] not in {batch["id"] for batch in batches}
        events = members(client)
        assert {events[event]["status"] for event in (at_since, inside)} == {"delivered"}
        assert events[at_since]["batchId"] == events[inside]["batchId"] == again.headers["webhook-id"]
        assert {events[event]["status"] for event in (before, at_until)} == {status}
        assert [events[event]["batchId"] for event in (before, at_until)] == [b["id"] for b in batches]
        check_consistent(client)

        # Again: delivered now, the two make a batch of the window's own, resent whole.
        assert replay(client, **window).json == {"deliveries": 0 if failing else 1}
        assert drain(client) == (0 if failing else 1)


@pytest.mark.parametrize("status", ["delivered", "failed"])
def test_a_batch_formed_after_the_window_goes_again_whole_for_the_partner_named(
    client_on: Any, clock: Any, status: str
) -> None:
    """Every event of a batch in the window (the batch formed after it): the batch is resent as it
    was, the same bytes under the same id, counted once; a partner filter keeps to its partner."""
    failing = status == "failed"
    with Receiver(Reply(503, "down") if failing else Reply()) as receiver, client_on() as client:
        chosen = onboard(client, receiver.url("/chosen"), **BATCHED)
        onboard(client, receiver.url("/other"), **BATCHED)
        start = clock()
        published = [publish(client, trending(number))["eventId"] for number in range(2)]
        clock.advance(5)
        assert drain(client) == 2
        clock.advance(1)
        publish(client, trending(2))  # a batch of its own, after the window
        settle(client, clock)
        [first, *_] = receiver.to("/chosen")
        assert carried(first) == published
        receiver.default = Reply()
        sent = len(receiver.requests)

        window = {"since": format_timestamp(start), "until": format_timestamp(start + timedelta(seconds=1))}
        answer = replay(client, **window, status=status, partner=chosen["id"])
        assert answer.json == {"deliveries": 1}  # the batch, as retry counts it
        assert drain(client) == 1
        [again] = receiver.requests[sent:]
        assert again.path == "/chosen"
        assert again.body == first.body
        assert again.headers["webhook-id"] == first.headers["webhook-id"]
        check_consistent(client)

        # For every partner: the other's batch (and, delivered now, the chosen one's again).
        assert replay(client, **window, status=status).json == {"deliveries": 1 if failing else 2}
        assert drain(client) == (1 if failing else 2)
        assert {request.path for request in receiver.requests[sent + 1 :]} == (
            {"/other"} if failing else {"/chosen", "/other"}
        )
        check_consistent(client)


def test_an_event_replayed_out_of_its_batch_is_not_sent_again_with_the_rest(
    client_on: Any, clock: Any
) -> None:
    """Once one event of a batch went again alone, a window holding the batch's other events sends
    those only: the batch's stored bytes, which carry the first too, are not resent."""
    with Receiver() as receiver, client_on() as client:
        onboard(client, receiver.url(), **BATCHED)
        start = clock()
        first = publish(client, trending(0))["eventId"]
        clock.advance(2)
        second = publish(client, trending(1))["eventId"]
        clock.advance(3)
        assert drain(client) == 1
        [batch] = receiver.requests
        assert carried(batch) == [first, second]

        def window(offset: int) -> dict[str, str]:
            since = start + timedelta(seconds=offset)
            until = since + timedelta(seconds=1)
            return {"since": format_timestamp(since), "until": format_timestamp(until), "status": "delivered"}

        assert replay(client, **window(0)).json == {"deliveries": 1}
        assert drain(client) == 1
        assert carried(receiver.requests[1]) == [first]
        assert replay(client, **window(2)).json == {"deliveries": 1}
        assert drain(client) == 1
        assert carried(receiver.requests[2]) == [second]
        assert receiver.requests[2].headers["webhook-id"] != batch.headers["webhook-id"]
        check_consistent(client)


def test_an_event_replayed_after_its_partner_stopped_batching_goes_out_alone(
    client_on: Any, clock: Any
) -> None:
    """An event taken out of its batch waits for a batch again; if its partner no longer batches
    its kind, it goes out alone, as any waiting event would."""
    with Receiver() as receiver, client_on() as client:
        partner = onboard(client, receiver.url(), **BATCHED)
        start = clock()
        first = publish(client, trending(0))["eventId"]
        clock.advance(2)
        publish(client, trending(1))
        clock.advance(3)
        assert drain(client) == 1

        async def stop_batching() -> None:
            async with client.app.ctx.engine.begin() as conn:
                assert await partners.set_batch(conn, partner["id"], None, now=clock())

        client.run(stop_batching())
        until = start + timedelta(seconds=1)
        window = {"since": format_timestamp(start), "until": format_timestamp(until), "status": "delivered"}
        assert replay(client, **window).json == {"deliveries": 1}
        assert drain(client) == 1
        alone = receiver.requests[1]
        assert json.loads(alone.body)["eventId"] == first and "batch" not in json.loads(alone.body)
        assert members(client)[first]["batchId"] is None
        check_consistent(client)
