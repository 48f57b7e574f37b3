"""A batch's events follow only the batch's own outcome, and a second chance sends each event once.

- A worker whose lease on a batch ran out before it logged its attempt settles nothing: the
  batch's members stay with the claim that took it over, and follow that claim's outcome.
- `partners retry` after a replay took some of a failed batch's events out (they went in a batch
  of their own) sends the rest in a new batch, never the old batch's bytes, which carry those
  events too.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from datetime import timedelta
from typing import Any

from service.clock import format_timestamp
from service.webhooks import runtime
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

BATCHED = {"events": ["room.trending"], "maxEvents": 100, "maxWaitSeconds": 5}



def carried(body: bytes) -> list[str]:
    """The event ids a request carried: a batch's, or one event's."""
    sent = json.loads(body)
    return [event["eventId"] for event in sent["events"]] if sent.get("batch") else [sent["eventId"]]


def test_a_worker_whose_claim_was_taken_over_moves_none_of_the_batchs_events(
    make_client: Any, database_url: str, clock: Any
) -> None:
    """Worker A's last attempt (its schedule spent) fails after its lease ran out and worker B
    claimed the batch again; B then delivers it. The batch and both its events end delivered,
    where A's failure made the events failed (and, retried, stuck in a batch that was done)."""
    held_a, held_b = threading.Event(), threading.Event()
    with Receiver() as receiver, make_client(**settings(), database_url=database_url) as client:
        partner = onboard(client, receiver.url("/b"), batch=BATCHED)
        for number in range(2):
            publish(client, trending(number))
        receiver.script("/b", 500, 500, 500, Reply(500, hold=held_a), Reply(200, hold=held_b))
        clock.advance(6)  # the batch forms
        for wait in (0, 13, 80):  # three failures, on the schedule
            clock.advance(wait)
            assert drain(client) == 1
        clock.advance(800)

        async def two_workers() -> None:
            first = runtime.worker_for(client.app, rng=random.Random(1))
            second = runtime.worker_for(client.app, rng=random.Random(2))
            async with first, second:
                stale = asyncio.create_task(first.drain())
                while len(receiver.to("/b")) < 4:
                    await asyncio.sleep(0.01)
                clock.advance(first.lease.total_seconds() + 1)  # A's lease has run out
                fresh = asyncio.create_task(second.drain())
                while len(receiver.to("/b")) < 5:
                    await asyncio.sleep(0.01)
                held_a.set()  # A's attempt fails, and A logs it
                await stale
                held_b.set()  # B, holding the claim now, delivers
                await fresh

        client.run(two_workers())
        rows = deliveries(client, partner=partner["id"])
        assert sorted((row["status"], bool(row["batchSize"])) for row in rows) == [
            ("delivered", False),
            ("delivered", False),
            ("delivered", True),
        ]


def test_a_retry_after_a_replay_split_a_failed_batch_sends_each_event_once(
    make_client: Any, database_url: str, clock: Any
) -> None:
    with (
        Receiver(Reply(503)) as receiver,
        make_client(**settings(webhook_retry_schedule=(10,)), database_url=database_url) as client,
    ):
        partner = onboard(client, receiver.url(), batch=BATCHED)
        start = clock()
        first = publish(client, trending(0))["eventId"]
        clock.advance(2)
        second = publish(client, trending(1))["eventId"]
        clock.advance(3)
        drain(client)
        clock.advance(15)
        drain(client)
        assert sorted(row["status"] for row in deliveries(client)) == ["failed"] * 3
        receiver.default = Reply(200)
        window = {
            "since": format_timestamp(start),
            "until": format_timestamp(start + timedelta(seconds=1)),
            "status": "failed",
        }
        (split,) = [row["id"] for row in deliveries(client) if row["batchSize"]]
        assert client.post("/admin/deliveries/replay", json=window, headers=AUTH).json == {"deliveries": 1}
        clock.advance(6)
        drain(client)
        refused = client.post(f"/admin/deliveries/{split}/resend", headers=AUTH)
        assert (refused.status, refused.json["message"]) == (
            409,
            "Some of this batch's events went out again in another batch; resend those, not the batch.",
        )
        retried = client.post(f"/admin/partners/{partner['id']}/retry", headers=AUTH)
        assert retried.json["requeued"] == 1  # the event left in the split batch
        clock.advance(6)
        drain(client)
        answered = [carried(request.body) for request in receiver.requests[2:]]
        assert answered == [[first], [second]]
        rows = {row["id"]: row for row in deliveries(client)}
        assert rows[split]["status"] == "cancelled"  # none of its events is left in it
        events = [row["status"] for row in rows.values() if row["batchId"]]
        assert events == ["delivered", "delivered"]
