"""Batched delivery against a real receiver: formed by count and by waiting time, one kind per
batch, fixed bytes on every retry and across a restart, partners and kinds that do not batch
unaffected, the body valid against the published schema, signatures every verifier accepts."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from standardwebhooks import Webhook, WebhookVerificationError
from webhook_helpers import (
    AUTH,
    Received,
    Receiver,
    Reply,
    deliveries,
    drain,
    fixed_keyring,
    onboard,
    publish,
    room_claimed,
    settings,
    trending,
)

from service.clock import ManualClock, format_timestamp
from service.db.engine import create_engine
from service.discovery.catalog import catalog_document
from service.events import parse_event
from service.webhooks import outbox, partners
from service.webhooks.claim import claim_due, next_due
from service.webhooks.operations import batch_member
from service.webhooks.signing import SignatureError, standard_webhooks_secret, verify, verify_standard

CATALOG = catalog_document("https://launchrooms.example")
BATCH_SCHEMA = Draft202012Validator(CATALOG["batchDelivery"]["bodySchema"])
PAYLOAD_SCHEMAS = {entry["id"]: Draft202012Validator(entry["payloadSchema"]) for entry in CATALOG["events"]}



def high_score(number: int) -> dict[str, Any]:
    return {
        "event": "room.arcade.high_score",
        "slug": "moonfrog",
        "roomUrl": "https://launchrooms.example/rooms/moonfrog",
        "game": "frogger",
        "playerName": f"p{number}",
        "score": 100 + number,
        "scoreId": f"s{number}",
    }


def batch_of(kinds: list[str], max_events: int = 100, max_wait: float = 5) -> dict[str, Any]:
    return {"batch": {"events": kinds, "maxEvents": max_events, "maxWaitSeconds": max_wait}}


def check_batch(request: Received, alone: dict[str, bytes]) -> list[dict[str, Any]]:
    """A batch request's body: valid against the published schema, every payload valid for its kind
    and byte-for-byte what the same event is sent alone (``alone``: eventId -> body)."""
    body = json.loads(request.body)
    BATCH_SCHEMA.validate(body)
    payloads: list[dict[str, Any]] = body["events"]
    for payload in payloads:
        PAYLOAD_SCHEMAS[body["event"]].validate(payload)
    texts = [alone[payload["eventId"]] for payload in payloads]
    kind = json.dumps(body["event"]).encode()
    assert request.body == b'{"event":' + kind + b',"batch":true,"events":[' + b",".join(texts) + b"]}"
    assert request.headers["x-service-event"] == body["event"]
    assert request.headers["webhook-id"] == request.headers["x-service-delivery"]
    return payloads


@pytest.fixture
def client_on(make_client: Any, database_url: str) -> Any:
    """A test app on SQLite or PostgreSQL."""

    def build(**overrides: Any) -> Any:
        return make_client(**settings(**overrides), database_url=database_url)

    return build


def test_a_full_batch_goes_out_at_once_and_a_partner_without_batching_sees_no_change(
    client_on: Any, clock: Any
) -> None:
    """maxEvents waiting make a batch at once (one per full batch); the rest wait for maxWait. The
    partner that did not opt in gets every event alone, as the same bytes the batch carries."""
    with Receiver() as receiver, client_on() as client:
        batching = onboard(client, receiver.url("/batched"), **batch_of(["room.trending"], 3, 60))
        alone_partner = onboard(client, receiver.url("/alone"))
        assert batching["batch"] == {"events": ["room.trending"], "maxEvents": 3, "maxWaitSeconds": 60.0}
        assert alone_partner["batch"] is None
        ids = [publish(client, trending(number))["eventId"] for number in range(7)]

        assert drain(client) == 7 + 2
        alone = {json.loads(request.body)["eventId"]: request.body for request in receiver.to("/alone")}
        assert sorted(alone) == sorted(ids)
        first, second = receiver.to("/batched")
        assert [payload["eventId"] for payload in check_batch(first, alone)] == ids[:3]
        assert [payload["eventId"] for payload in check_batch(second, alone)] == ids[3:6]
        for request in (first, second):
            verify(request.headers, request.body, batching["secret"], now=clock().timestamp())

        waiting = deliveries(client, partner=batching["id"], status="batching")
        assert [delivery["eventId"] for delivery in waiting] == [ids[6]]
        assert waiting[0]["nextAttemptAt"] == format_timestamp(clock() + timedelta(seconds=60))
        batches = [d for d in deliveries(client, partner=batching["id"]) if d["batchSize"] is not None]
        assert sorted(batch["id"] for batch in batches) == sorted(
            request.headers["x-service-delivery"] for request in (first, second)
        )
        assert {(batch["batchSize"], batch["status"], len(batch["attempts"])) for batch in batches} == {
            (3, "delivered", 1)
        }
        members = deliveries(client, partner=batching["id"], status="delivered")
        assert sorted(member["eventId"] for member in members if member["batchId"]) == sorted(ids[:6])

        clock.advance(59)
        assert drain(client) == 0
        clock.advance(1)
        assert drain(client) == 1
        third = receiver.to("/batched")[2]
        assert [payload["eventId"] for payload in check_batch(third, alone)] == ids[6:]
        assert len(receiver.to("/alone")) == 7  # nothing more for the partner sent one by one


def test_a_batch_forms_when_its_oldest_has_waited_max_wait(client_on: Any, clock: Any) -> None:
    """Fewer than maxEvents go out together when the oldest has waited maxWaitSeconds, oldest
    first; the worker's next wake-up is that moment."""
    with Receiver() as receiver, client_on() as client:
        partner = onboard(client, receiver.url(), **batch_of(["room.trending"], 100, 5))
        start = clock()
        ids = [publish(client, trending(number))["eventId"] for number in range(2)]
        clock.advance(3)
        ids.append(publish(client, trending(2))["eventId"])
        assert drain(client) == 0
        assert receiver.requests == []

        async def due() -> datetime | None:
            async with client.app.ctx.engine.connect() as conn:
                return await next_due(conn)

        assert client.run(due()) == start + timedelta(seconds=5)
        clock.advance(1.9)
        assert drain(client) == 0
        clock.advance(0.1)
        assert drain(client) == 1
        [request] = receiver.requests
        body = json.loads(request.body)
        assert [payload["eventId"] for payload in body["events"]] == ids
        BATCH_SCHEMA.validate(body)
        verify(request.headers, request.body, partner["secret"], now=clock().timestamp())
        assert client.run(due()) is None
        [batch] = [d for d in deliveries(client) if d["batchSize"] is not None]
        assert (batch["id"], batch["batchSize"], batch["eventId"]) == (
            request.headers["webhook-id"],
            3,
            ids[0],
        )


def test_a_batch_lists_its_members_as_stored_after_the_wait_was_shortened(client_on: Any, clock: Any) -> None:
    """An event stored while the partner waited 300 s, then one stored after the wait became 1 s:
    the newer is due first and brings the batch out, and the body still lists the older first,
    as the catalog says (oldest first), not in due order."""
    with Receiver() as receiver, client_on() as client:
        partner = onboard(client, receiver.url(), **batch_of(["room.trending"], 100, 300))
        older = publish(client, trending(0))["eventId"]
        clock.advance(1)
        changed = client.patch(f"/admin/partners/{partner['id']}", json=batch_of(["room.trending"], 100, 1), headers=AUTH)
        assert changed.status == 200
        newer = publish(client, trending(1))["eventId"]
        clock.advance(1)
        assert drain(client) == 1
        [request] = receiver.requests
        assert [payload["eventId"] for payload in json.loads(request.body)["events"]] == [older, newer]
        [batch] = [d for d in deliveries(client) if d["batchSize"] is not None]
        assert batch["eventId"] == older  # the attempt log names the oldest member's event


def test_one_kind_per_batch_beside_an_unbatched_kind(client_on: Any, clock: Any) -> None:
    """Two batched kinds make two batches; a kind the partner does not batch goes out alone, at once."""
    with Receiver() as receiver, client_on() as client:
        onboard(client, receiver.url(), **batch_of(["room.trending", "room.arcade.high_score"], 10, 5))
        publish(client, trending(1))
        publish(client, high_score(1))
        publish(client, trending(2))
        claimed = publish(client, room_claimed())
        assert drain(client) == 1
        [single] = receiver.requests
        assert json.loads(single.body)["eventId"] == claimed["eventId"]
        assert single.headers["x-service-event"] == "room.claimed"

        clock.advance(5)
        assert drain(client) == 2
        batches = {
            request.headers["x-service-event"]: json.loads(request.body) for request in receiver.requests[1:]
        }
        assert sorted(batches) == ["room.arcade.high_score", "room.trending"]
        for kind, body in batches.items():
            BATCH_SCHEMA.validate(body)
            assert body["event"] == kind
            assert {payload["event"] for payload in body["events"]} == {kind}
        assert [p["slug"] for p in batches["room.trending"]["events"]] == ["room-1", "room-2"]
        assert len(batches["room.arcade.high_score"]["events"]) == 1


def test_retries_send_the_same_bytes_under_the_same_id(client_on: Any, clock: Any) -> None:
    """A batch answered 500 is retried on the schedule with the same body and id and a fresh
    timestamp; its members stay batched until it is delivered, events published meanwhile wait
    for the next batch."""
    with Receiver() as receiver, client_on() as client:
        partner = onboard(client, receiver.url(), **batch_of(["room.trending"], 2, 5))
        receiver.script("/hook", Reply(500, "boom"))
        publish(client, trending(1))
        publish(client, trending(2))
        assert drain(client) == 1
        [batch] = [d for d in deliveries(client) if d["batchSize"] is not None]
        assert batch["status"] == "pending"
        assert {d["status"] for d in deliveries(client) if d["batchId"]} == {"batched"}
        publish(client, trending(3))  # not in the formed batch

        clock.advance(15)  # past the first retry (10 s ±20%) and the new event's wait
        assert drain(client) == 2
        first, again, later = receiver.requests
        assert first.body == again.body
        assert first.headers["webhook-id"] == again.headers["webhook-id"] == batch["id"]
        assert int(again.headers["webhook-timestamp"]) > int(first.headers["webhook-timestamp"])
        assert later.headers["webhook-id"] != batch["id"]
        assert [p["slug"] for p in json.loads(later.body)["events"]] == ["room-3"]
        for request in receiver.requests:
            verify(
                request.headers,
                request.body,
                partner["secret"],
                now=float(request.headers["webhook-timestamp"]),
            )
        assert {d["status"] for d in deliveries(client)} == {"delivered"}


def test_a_failed_batch_takes_its_members_and_an_admin_retry_resends_it(client_on: Any, clock: Any) -> None:
    """The schedule spent, the batch and its members are failed; an admin retry sends the batch
    again (same bytes, same id), never its members one by one."""
    with Receiver(Reply(503, "down")) as receiver, client_on(webhook_retry_schedule=(10,)) as client:
        partner = onboard(client, receiver.url(), **batch_of(["room.trending"], 2, 5))
        publish(client, trending(1))
        publish(client, trending(2))
        assert drain(client) == 1
        clock.advance(12)
        assert drain(client) == 1
        assert sorted(d["status"] for d in deliveries(client)) == ["failed"] * 3

        receiver.default = Reply()
        response = client.post(f"/admin/partners/{partner['id']}/retry", headers=AUTH)
        assert response.status == 200
        assert response.json["requeued"] == 1
        assert sorted(d["status"] for d in deliveries(client)) == ["batched", "batched", "pending"]
        assert drain(client) == 1
        assert len({request.body for request in receiver.requests}) == 1
        assert len({request.headers["webhook-id"] for request in receiver.requests}) == 1
        assert sorted(d["status"] for d in deliveries(client)) == ["delivered"] * 3


def test_a_formed_batch_survives_a_restart(client_on: Any, clock: Any) -> None:
    """A batch formed and refused before a restart goes out after it with the same bytes and id."""
    with Receiver() as receiver:
        receiver.script("/hook", Reply(500, "boom"))
        with client_on() as client:
            onboard(client, receiver.url(), **batch_of(["room.trending"], 2, 5))
            publish(client, trending(1))
            publish(client, trending(2))
            assert drain(client) == 1
        clock.advance(15)
        with client_on() as client:
            assert drain(client) == 1
            assert {d["status"] for d in deliveries(client)} == {"delivered"}
        first, second = receiver.requests
        assert first.body == second.body
        assert first.headers["webhook-id"] == second.headers["webhook-id"]


def test_a_batch_verifies_with_the_library_and_the_service_and_tampering_fails_both(client_on: Any) -> None:
    """A real batched delivery verifies with the standardwebhooks package and both of the service's
    verifiers; a changed body or id fails every one."""
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))  # the library reads the system clock
    with Receiver() as receiver, client_on(clock=clock) as client:
        partner = onboard(client, receiver.url(), **batch_of(["room.trending"], 2, 5))
        publish(client, trending(1))
        publish(client, trending(2))
        assert drain(client) == 1
        [request] = receiver.requests
        secret, now = partner["secret"], clock().timestamp()

        def verdicts(body: bytes, headers: dict[str, str]) -> tuple[bool, ...]:
            results = []
            try:
                Webhook(standard_webhooks_secret(secret)).verify(body, headers)
                results.append(True)
            except WebhookVerificationError:
                results.append(False)
            for check in (verify_standard, verify):
                try:
                    check(headers, body, [secret], now=now)
                    results.append(True)
                except SignatureError:
                    results.append(False)
            return tuple(results)

        assert verdicts(request.body, request.headers) == (True, True, True)
        for forged in (
            request.body.replace(b"room-1", b"room-9"),  # a payload changed
            request.body.replace(b'"batch":true', b'"batch":false'),
            request.body[: request.body.rindex(b',{"eventId"')] + b"]}",  # the newest event dropped
        ):
            assert forged != request.body
            assert verdicts(forged, request.headers) == (False, False, False)
        other_id = {**request.headers, "webhook-id": "dlv_forged", "x-service-delivery": "dlv_forged"}
        # The id is signed by the Standard Webhooks scheme; x-service-signature covers the body only.
        assert verdicts(request.body, other_id) == (False, False, True)


@pytest.mark.parametrize(
    ("batch", "field", "code"),
    [
        ("yes", "batch", "invalid_type"),
        ({"maxEvents": 5}, "batch.events", "missing"),
        ({"events": []}, "batch.events", "invalid"),
        ({"events": ["room.claimed"]}, "batch.events.0", "not_batchable"),
        ({"events": [7]}, "batch.events.0", "invalid_type"),
        ({"events": ["room.trending"], "maxEvents": 0}, "batch.maxEvents", "invalid"),
        ({"events": ["room.trending"], "maxEvents": 1001}, "batch.maxEvents", "invalid"),
        ({"events": ["room.trending"], "maxEvents": True}, "batch.maxEvents", "invalid"),
        ({"events": ["room.trending"], "maxWaitSeconds": 0.05}, "batch.maxWaitSeconds", "invalid"),
        ({"events": ["room.trending"], "maxWaitSeconds": 301}, "batch.maxWaitSeconds", "invalid"),
        ({"events": ["room.trending"], "maxWaitSeconds": "5"}, "batch.maxWaitSeconds", "invalid"),
        ({"events": ["room.trending"], "size": 5}, "batch.size", "unknown_field"),
    ],
)
def test_a_bad_batch_member_is_a_400_naming_it(make_client: Any, batch: Any, field: str, code: str) -> None:
    with make_client(**settings()) as client:
        response = client.post(
            "/admin/partners",
            json={"name": "P", "url": "http://127.0.0.1:9/hook", "batch": batch},
            headers=AUTH,
        )
        assert response.status == 400
        assert [(e["field"], e["code"]) for e in response.json["errors"]] == [(field, code)]
        assert client.get("/admin/partners", headers=AUTH).json["partners"] == []


def test_only_kinds_the_partner_receives_may_be_batched(make_client: Any) -> None:
    with make_client(**settings()) as client:
        response = client.post(
            "/admin/partners",
            json={
                "name": "P",
                "url": "http://127.0.0.1:9/hook",
                "events": ["room.claimed", "room.trending"],
                "batch": {"events": ["room.trending", "room.artwork.vote_milestone"]},
            },
            headers=AUTH,
        )
        assert response.status == 400
        assert [(e["field"], e["code"]) for e in response.json["errors"]] == [
            ("batch.events.1", "not_subscribed")
        ]


@pytest.mark.parametrize(
    ("onboarded", "change", "field"),
    [
        # the filter narrowed under a stored batch
        (
            {
                "events": ["room.trending", "room.artwork.vote_milestone"],
                "batch": {"events": ["room.artwork.vote_milestone"]},
            },
            {"events": ["room.trending"]},
            "batch.events.0",
        ),
        # a batch of a kind the stored filter leaves out
        (
            {"events": ["room.trending"]},
            {"batch": {"events": ["room.trending", "room.artwork.vote_milestone"]}},
            "batch.events.1",
        ),
    ],
    ids=["events", "batch"],
)
def test_an_update_of_events_or_batch_is_checked_against_the_other_as_stored(
    make_client: Any, onboarded: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    """An update that changes one of the two leaves the other as stored, so the two are checked
    together as at onboarding; refused, the partner stays as it was."""
    with make_client(**settings()) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook", **onboarded)
        response = client.patch(f"/admin/partners/{partner['id']}", json=change, headers=AUTH)
        shown = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
        both = client.patch(
            f"/admin/partners/{partner['id']}",
            json={"events": ["room.trending", "room.artwork.vote_milestone"], **change},
            headers=AUTH,
        )
    assert (response.status, [(e["field"], e["code"]) for e in response.json["errors"]]) == (
        400,
        [(field, "not_subscribed")],
    )
    assert (shown["events"], shown["batch"]) == (partner["events"], partner["batch"])
    assert both.status == (400 if "events" in change else 200)  # both given: the body's own pair


def test_defaults_and_the_partner_resource(make_client: Any) -> None:
    """Only events named: maxEvents 100 and maxWaitSeconds 5; shown on the partner, never null-ed by a read."""
    with make_client(**settings()) as client:
        partner = onboard(
            client, "http://127.0.0.1:9/hook", batch={"events": ["room.trending", "room.trending"]}
        )
        expected = {"events": ["room.trending"], "maxEvents": 100, "maxWaitSeconds": 5.0}
        assert partner["batch"] == expected
        assert client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json["batch"] == expected
        assert batch_member(None) is None
        assert batch_member({"events": ["room.trending"], "maxWaitSeconds": 0.5}).public() == {
            "events": ["room.trending"],
            "maxEvents": 100,
            "maxWaitSeconds": 0.5,
        }


def test_a_kind_no_longer_batched_goes_out_alone(client_on: Any, clock: Any) -> None:
    """Waiting deliveries of a kind the partner stops batching go out one by one at the next claim."""
    with Receiver() as receiver, client_on() as client:
        partner = onboard(client, receiver.url(), **batch_of(["room.trending"], 10, 60))
        publish(client, trending(1))
        publish(client, trending(2))
        assert drain(client) == 0

        async def stop_batching() -> None:
            async with client.app.ctx.engine.begin() as conn:
                assert await partners.set_batch(conn, partner["id"], None, now=clock())

        client.run(stop_batching())
        assert drain(client) == 2
        assert [json.loads(request.body)["slug"] for request in receiver.requests] == ["room-1", "room-2"]
        assert all(request.headers["x-service-event"] == "room.trending" for request in receiver.requests)


def test_the_catalog_and_llms_full_describe_batches(make_client: Any) -> None:
    """The served catalog carries batchDelivery (kinds, body schema, an example the schema accepts)
    and subscriptionModel.batching; llms-full.txt has the same text under "Batched delivery"."""
    with make_client(base_url="https://launchrooms.example") as client:
        catalog = client.get("/api/v1/webhooks/events").json
        llms = client.get("/llms-full.txt").text
    entry = catalog["batchDelivery"]
    assert entry["batchable"] == ["room.trending", "room.arcade.high_score", "room.artwork.vote_milestone"]
    Draft202012Validator(entry["bodySchema"]).validate(entry["exampleBody"])
    schema = Draft202012Validator(entry["bodySchema"])
    assert not schema.is_valid({**entry["exampleBody"], "batch": False})
    stranger = {"eventId": "evt_x", "event": "room.claimed", "occurredAt": "2026-06-29T21:00:00Z"}
    mixed = {**entry["exampleBody"], "events": [*entry["exampleBody"]["events"], stranger]}
    assert not schema.is_valid(mixed)  # one kind per batch
    assert not schema.is_valid({**entry["exampleBody"], "events": []})
    assert catalog["subscriptionModel"]["batching"] == entry["summary"]
    assert "### Batched delivery\n\n" + entry["summary"] in llms
    assert "batch" in catalog["deliveryModel"]


def test_workers_forming_at_once_put_each_event_in_one_batch(database_url: str, clock: Any) -> None:
    """Two workers (two engines) claiming side by side form every batch once: each event lands in
    exactly one batch, and the batches claimed between them are all there are."""
    from sqlalchemy import select

    from service.db.tables import deliveries as table
    from service.webhooks.batching import BatchPolicy
    from service.webhooks.partners import NewPartner

    async def scenario() -> tuple[list[int], dict[str, int], int]:
        engines = [create_engine(database_url) for _ in range(2)]
        policy = BatchPolicy(("room.trending",), max_events=10, max_wait=5)
        async with engines[0].begin() as conn:
            new = NewPartner("batching", "https://partner.example/hook", None, 1000, batch=policy)
            await partners.create_partner(conn, new, now=clock(), keyring=fixed_keyring())
        for number in range(95):
            await outbox.publish_event(engines[0], parse_event(trending(number), now=clock()), now=clock())

        async def claim(engine: Any) -> int:
            async with engine.begin() as conn:
                jobs = await claim_due(
                    conn,
                    now=clock(),
                    limit=50,
                    lease=timedelta(seconds=30),
                    default_cap=8,
                    keyring=fixed_keyring(),
                )
            assert all(job.batch for job in jobs)
            return len(jobs)

        claimed = list(await asyncio.gather(*(claim(engine) for engine in engines)))
        async with engines[0].connect() as conn:
            rows = (
                await conn.execute(select(table.c.batch_id, table.c.status).where(table.c.body.is_(None)))
            ).all()
            batches = (await conn.execute(select(table.c.id).where(table.c.body.is_not(None)))).all()
        for engine in engines:
            await engine.dispose()
        sizes: dict[str, int] = {}
        for batch_id, status in rows:
            key = str(batch_id) if status == "batched" else status
            sizes[key] = sizes.get(key, 0) + 1
        return claimed, sizes, len(batches)

    claimed, sizes, batches = asyncio.run(scenario())
    assert sorted(claimed) in ([0, 9], [1, 8], [2, 7], [3, 6], [4, 5])  # 9 full batches between them
    assert batches == 9
    assert sizes.pop("batching") == 5  # the rest waits for maxWaitSeconds
    assert sorted(sizes.values()) == [10] * 9


def test_a_batch_is_resent_and_replayed_whole(make_client: Any, database_url: str, clock: Any) -> None:
    """An event that went out in a batch is not sent alone again (409, naming the batch); the
    batch's own delivery is resent and replayed whole, the same bytes under the same id, its
    events waiting in it again meanwhile."""
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        onboard(client, receiver.url(), **batch_of(["room.trending"], max_events=2))
        start = clock()
        for number in range(2):
            publish(client, trending(number))
        assert drain(client) == 1
        [batch] = [d for d in deliveries(client) if d["batchSize"] == 2]
        member = next(d for d in deliveries(client) if d["batchId"] == batch["id"])
        refused = client.post(f"/admin/deliveries/{member['id']}/resend", headers=AUTH)
        assert refused.status == 409 and "batch" in refused.json["message"]

        assert client.post(f"/admin/deliveries/{batch['id']}/resend", headers=AUTH).status == 202
        assert {d["status"] for d in deliveries(client) if d["batchId"] == batch["id"]} == {"batched"}
        assert drain(client) == 1
        clock.advance(1)
        window = {"since": format_timestamp(start), "status": "delivered"}
        replayed = client.post("/admin/deliveries/replay", json=window, headers=AUTH)
        assert replayed.json == {"deliveries": 1}  # the batch, not its two events one by one
        assert drain(client) == 1
        assert len(receiver.requests) == 3
        assert len({request.body for request in receiver.requests}) == 1
        assert {request.headers["webhook-id"] for request in receiver.requests} == {batch["id"]}
        assert {d["status"] for d in deliveries(client)} == {"delivered"}
