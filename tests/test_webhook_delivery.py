"""The worker against a real receiver on loopback: signing, retries, pauses, failures, the log."""

from __future__ import annotations

import asyncio
import json
import socket
from datetime import datetime
from typing import Any

import pytest
from conftest import Client
from prometheus_client.parser import text_string_to_metric_families
from webhook_helpers import (
    AUTH,
    Receiver,
    Reply,
    deliveries,
    drain,
    milestone,
    onboard,
    publish,
    room_claimed,
    settings,
)

from service.app import create_app
from service.settings import Settings
from service.webhooks.signing import verify


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_a_delivery_is_the_stored_payload_signed_with_four_headers(make_client: Any, clock: Any) -> None:
    """One POST: the exact payload bytes, the kind, the delivery id, a fresh timestamp, a signature."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        published = publish(client, room_claimed())
        assert published["deliveries"] == 1
        clock.advance(2)
        assert drain(client) == 1

        [request] = receiver.requests
        [delivery] = deliveries(client)
        payload = json.loads(request.body)
        assert payload == {
            "eventId": published["eventId"],
            "event": "room.claimed",
            "occurredAt": "2026-06-29T12:00:00Z",
            **{k: v for k, v in room_claimed().items() if k != "event"},
        }
        assert request.headers["x-service-event"] == "room.claimed"
        assert request.headers["x-service-delivery"] == delivery["id"]
        assert request.headers["x-service-timestamp"] == str(int(clock().timestamp()))
        assert request.headers["Content-Type"] == "application/json"
        verify(request.headers, request.body, partner["secret"], now=clock().timestamp())

        assert delivery == {
            "id": delivery["id"],
            "eventId": published["eventId"],
            "event": "room.claimed",
            "partnerId": partner["id"],
            "status": "delivered",
            "createdAt": "2026-06-29T12:00:00.000000Z",
            "nextAttemptAt": None,
            "deliveredAt": "2026-06-29T12:00:02.000000Z",
            "batchSize": None,
            "batchId": None,
            "attempts": [
                {
                    "attempt": 1,
                    "startedAt": "2026-06-29T12:00:02.000000Z",
                    "durationMs": delivery["attempts"][0]["durationMs"],
                    "statusCode": 200,
                    "errorClass": None,
                    "responseExcerpt": "ok",
                    "outcome": "delivered",
                }
            ],
        }
        assert 0 <= delivery["attempts"][0]["durationMs"] < 5000
        assert drain(client) == 0  # nothing left


def test_retries_keep_the_delivery_id_and_body(make_client: Any, clock: Any) -> None:
    """500, 503, then 200: three attempts on the schedule, same id and bytes, fresh timestamps."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        receiver.script("/hook", Reply(500, "boom"), Reply(503, "busy"))
        publish(client, room_claimed())

        assert drain(client) == 1
        [delivery] = deliveries(client)
        assert delivery["status"] == "pending"
        wait = (_at(delivery["nextAttemptAt"]) - clock()).total_seconds()
        assert 8 <= wait <= 12  # schedule[0] = 10 s, ±20%
        clock.advance(wait - 1)
        assert drain(client) == 0  # not due yet
        clock.advance(1)
        assert drain(client) == 1
        [delivery] = deliveries(client)
        wait = (_at(delivery["nextAttemptAt"]) - clock()).total_seconds()
        assert 48 <= wait <= 72  # schedule[1] = 60 s
        clock.advance(wait)
        assert drain(client) == 1

        first, second, third = receiver.requests
        assert {r.headers["x-service-delivery"] for r in receiver.requests} == {delivery["id"]}
        assert first.body == second.body == third.body
        stamps = [int(r.headers["x-service-timestamp"]) for r in receiver.requests]
        assert stamps == sorted(set(stamps))  # fresh on every attempt
        for request in receiver.requests:
            verify(request.headers, request.body, partner["secret"], now=float(request.headers["x-service-timestamp"]))

        [delivery] = deliveries(client)
        assert delivery["status"] == "delivered"
        assert [
            (a["attempt"], a["statusCode"], a["errorClass"], a["responseExcerpt"], a["outcome"])
            for a in delivery["attempts"]
        ] == [
            (1, 500, "http_500", "boom", "retry"),
            (2, 503, "http_503", "busy", "retry"),
            (3, 200, None, "ok", "delivered"),
        ]


def test_retry_after_is_honoured(make_client: Any, clock: Any) -> None:
    """A 429 with Retry-After: 120 waits 120 s, not the scheduled 10."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        receiver.script("/hook", Reply(429, "slow down", {"Retry-After": "120"}))
        publish(client, room_claimed())
        drain(client)
        [delivery] = deliveries(client)
        assert (_at(delivery["nextAttemptAt"]) - clock()).total_seconds() == 120
        clock.advance(119)
        assert drain(client) == 0
        clock.advance(1)
        assert drain(client) == 1
        assert deliveries(client)[0]["status"] == "delivered"


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "9" * 400},
        {"Retry-After": "9" * 5000},
        {"Retry-After": "Mon, 29 Jun 2026 12:00:00 +99999999999999999999"},
        {"Content-Encoding": "br"},
        {"Content-Encoding": "zstd"},
        {"Content-Encoding": "gzip"},  # says gzip, sends plain bytes
    ],
)
def test_an_answer_with_headers_the_worker_cannot_use_still_counts(
    make_client: Any, clock: Any, headers: dict[str, str]
) -> None:
    """A 2xx is delivered and a 410 pauses, whatever else the answer says: a Retry-After too long
    for any number or date, a body in an encoding the worker never asked for (it reads only an
    excerpt, as sent). Their status is never lost to an error of 'no answer' and sent again."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        receiver.script("/hook", Reply(200, "received", headers), Reply(410, "gone", headers))
        publish(client, room_claimed())
        publish(client, room_claimed())
        assert drain(client) == 2
        attempts = sorted(
            (a["statusCode"], a["errorClass"], a["responseExcerpt"], a["outcome"])
            for delivery in deliveries(client)
            for a in delivery["attempts"]
        )
        shown = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
    assert attempts == [(200, None, "received", "delivered"), (410, "http_410", "gone", "paused")]
    assert shown["status"] == "paused"


def test_spent_schedule_fails_until_an_admin_retry(make_client: Any, clock: Any) -> None:
    """Four 500s spend a three-delay schedule: failed; an admin retry makes it go out again."""
    with Receiver(default=Reply(500, "down")) as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        for _ in range(4):
            assert drain(client) == 1
            clock.advance(3600)
        assert drain(client) == 0
        [delivery] = deliveries(client)
        assert delivery["status"] == "failed"
        assert [a["outcome"] for a in delivery["attempts"]] == ["retry", "retry", "retry", "failed"]
        assert deliveries(client, status="failed") == [delivery]

        receiver.default = Reply(200, "fixed")
        response = client.post(f"/admin/partners/{partner['id']}/retry", headers=AUTH)
        assert response.status == 200
        assert response.json == {"partnerId": partner["id"], "requeued": 1}
        assert deliveries(client)[0]["status"] == "pending"
        assert drain(client) == 1
        [delivery] = deliveries(client)
        assert delivery["status"] == "delivered"
        assert delivery["attempts"][-1]["attempt"] == 5
        assert len({r.headers["x-service-delivery"] for r in receiver.requests}) == 1
        again = client.post(f"/admin/partners/{partner['id']}/retry", headers=AUTH)
        assert again.json["requeued"] == 0


def test_410_pauses_the_partner_until_resumed(make_client: Any, clock: Any) -> None:
    """410 Gone pauses the partner; its deliveries wait and go out on resume."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        receiver.script("/hook", Reply(410, "gone"))
        publish(client, room_claimed("first"))
        assert drain(client) == 1
        shown = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
        assert shown["status"] == "paused"
        [gone] = deliveries(client)
        assert gone["status"] == "pending"
        assert gone["attempts"][0]["outcome"] == "paused"
        assert gone["attempts"][0]["errorClass"] == "http_410"

        publish(client, room_claimed("second"))
        clock.advance(3600)
        assert drain(client) == 0
        assert len(receiver.requests) == 1

        assert client.post(f"/admin/partners/{partner['id']}/resume", headers=AUTH).status == 200
        assert drain(client) == 2
        assert {d["status"] for d in deliveries(client)} == {"delivered"}
        assert receiver.requests[0].headers["x-service-delivery"] in {
            r.headers["x-service-delivery"] for r in receiver.requests[1:]
        }


def test_paused_backlog_goes_out_on_resume(make_client: Any) -> None:
    """Nothing is sent to a paused partner; everything that waited is sent after resume."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        client.post(f"/admin/partners/{partner['id']}/pause", headers=AUTH)
        for slug in ("a", "b", "c"):
            assert publish(client, room_claimed(slug))["deliveries"] == 1
        assert drain(client) == 0
        assert receiver.requests == []
        assert [d["status"] for d in deliveries(client)] == ["pending"] * 3
        client.post(f"/admin/partners/{partner['id']}/resume", headers=AUTH)
        assert drain(client) == 3
        assert sorted(json.loads(r.body)["slug"] for r in receiver.requests) == ["a", "b", "c"]


def test_redirects_are_not_followed(make_client: Any) -> None:
    """A 302 is a failed attempt (class redirect); the Location is never requested."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        receiver.script("/hook", Reply(302, "", {"Location": receiver.url("/elsewhere")}))
        publish(client, room_claimed())
        drain(client)
        assert [r.path for r in receiver.requests] == ["/hook"]
        attempt = deliveries(client)[0]["attempts"][0]
        assert (attempt["statusCode"], attempt["errorClass"], attempt["outcome"]) == (302, "redirect", "retry")


def test_a_slow_partner_times_out(make_client: Any) -> None:
    """An answer slower than the webhook timeout is a timeout attempt, retried later."""
    with Receiver() as receiver, make_client(**settings(receiver_timeout=0.3)) as client:
        onboard(client, receiver.url())
        receiver.script("/hook", Reply(delay=0.6))
        publish(client, room_claimed())
        drain(client)
        attempt = deliveries(client)[0]["attempts"][0]
        assert (attempt["statusCode"], attempt["errorClass"], attempt["outcome"]) == (None, "timeout", "retry")
        assert attempt["durationMs"] >= 250  # it waited out the timeout (cut off, as its class says)


def test_a_dropped_connection_and_a_refused_one_are_retried(make_client: Any) -> None:
    """A connection closed without an answer, and a port nobody listens on, are retryable errors."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead_port = closed.getsockname()[1]
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        onboard(client, f"http://127.0.0.1:{dead_port}/hook")
        receiver.script("/hook", Reply(drop=True))
        publish(client, room_claimed())
        assert drain(client) == 2
        classes = sorted(d["attempts"][0]["errorClass"] for d in deliveries(client))
        assert classes == ["connect", "disconnected"]
        assert {d["status"] for d in deliveries(client)} == {"pending"}


def test_response_excerpt_is_bounded(make_client: Any) -> None:
    """Only the first 256 characters of an answer are kept."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        receiver.script("/hook", Reply(500, "é" * 50_000))
        publish(client, room_claimed())
        drain(client)
        assert deliveries(client)[0]["attempts"][0]["responseExcerpt"] == "é" * 256


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Huge": "a" * 65_536},  # one header line far past the line limit
        {f"X-Many-{n}": "b" for n in range(100)},  # more header lines than the 64 allowed
    ],
    ids=["oversized header", "too many headers"],
)
def test_a_hostile_answer_head_is_a_failed_attempt(make_client: Any, headers: dict[str, str]) -> None:
    """An oversized or overlong head is an attempt failed as "protocol", retried; the worker goes on."""
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        receiver.script("/hook", Reply(200, "ok", headers=headers))
        publish(client, room_claimed())
        assert drain(client) == 1
        [delivery] = deliveries(client)
        [attempt] = delivery["attempts"]
        assert (delivery["status"], attempt["errorClass"], attempt["statusCode"]) == ("pending", "protocol", None)
        publish(client, room_claimed("second"))  # the next answer is an ordinary 200
        assert drain(client) == 1
        assert sorted(d["status"] for d in deliveries(client)) == ["delivered", "pending"]


def test_event_filters(make_client: Any) -> None:
    """A partner with an events filter gets only those kinds; one without gets every kind."""
    with Receiver() as receiver, make_client(**settings()) as client:
        picky = onboard(client, receiver.url("/picky"), events=["room.claimed"])
        every = onboard(client, receiver.url("/every"))
        assert publish(client, room_claimed())["deliveries"] == 2
        assert publish(client, milestone())["deliveries"] == 1
        assert drain(client) == 3
        assert [r.headers["x-service-event"] for r in receiver.to("/picky")] == ["room.claimed"]
        assert sorted(r.headers["x-service-event"] for r in receiver.to("/every")) == [
            "platform.milestone",
            "room.claimed",
        ]
        assert len(deliveries(client, partner=picky["id"])) == 1
        assert len(deliveries(client, partner=every["id"])) == 2


def test_test_delivery(make_client: Any, clock: Any) -> None:
    """POST .../test sends a signed webhook.test now and answers its result; nothing is queued."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        client.post(f"/admin/partners/{partner['id']}/pause", headers=AUTH)  # tests work while paused
        response = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
        assert response.status == 200
        result = response.json
        assert result == {
            "ok": True,
            "deliveryId": result["deliveryId"],
            "eventId": result["eventId"],
            "event": "webhook.test",
            "attempt": {
                "startedAt": "2026-06-29T12:00:00.000000Z",
                "durationMs": result["attempt"]["durationMs"],
                "statusCode": 200,
                "errorClass": None,
                "responseExcerpt": "ok",
                "outcome": "delivered",
            },
        }
        [request] = receiver.requests
        verify(request.headers, request.body, partner["secret"], now=clock().timestamp())
        assert request.headers["x-service-event"] == "webhook.test"
        assert request.headers["x-service-delivery"] == result["deliveryId"]
        assert json.loads(request.body) == {
            "eventId": result["eventId"],
            "event": "webhook.test",
            "occurredAt": "2026-06-29T12:00:00Z",
            "partnerId": partner["id"],
            "test": True,
        }
        receiver.script("/hook", Reply(500, "nope"))
        failed = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH).json
        assert failed["ok"] is False
        assert failed["attempt"]["errorClass"] == "http_500"
        assert failed["attempt"]["outcome"] == "failed"
        assert deliveries(client) == []


async def _never_resolves(host: str, port: int) -> list[str]:
    await asyncio.Event().wait()  # a name server that takes the question and never answers
    return []


def test_a_test_delivery_honours_the_connect_timeout(make_client: Any) -> None:
    """A partner whose name never resolves: the test delivery gives up at
    SERVICE_WEBHOOK_CONNECT_TIMEOUT, long before SERVICE_WEBHOOK_TIMEOUT, as the worker's attempts do."""
    with make_client(**settings(receiver_timeout=30.0, webhook_connect_timeout=0.2)) as client:
        partner = onboard(client, "http://partner.example/hook")
        client.app.ctx.resolve = _never_resolves
        response = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
        assert response.status == 200
        attempt = response.json["attempt"]
        assert (response.json["ok"], attempt["errorClass"], attempt["outcome"]) == (
            False,
            "timeout",
            "failed",
        )
        assert attempt["durationMs"] < 10_000  # the whole-attempt timeout is 30 s


def test_deliveries_listing_filters(make_client: Any) -> None:
    """GET /admin/deliveries filters by partner, status and event; a bad status is 400."""
    with Receiver() as receiver, make_client(**settings()) as client:
        a = onboard(client, receiver.url("/a"))
        onboard(client, receiver.url("/b"))
        first = publish(client, room_claimed("one"))
        publish(client, room_claimed("two"))
        receiver.script("/a", 500)
        drain(client)
        assert len(deliveries(client)) == 4
        assert {d["partnerId"] for d in deliveries(client, partner=a["id"])} == {a["id"]}
        assert {d["eventId"] for d in deliveries(client, event=first["eventId"])} == {first["eventId"]}
        assert len(deliveries(client, status="pending")) == 1
        assert len(deliveries(client, status="delivered")) == 3
        assert len(deliveries(client, limit="1")) == 1
        bad = client.get("/admin/deliveries", params={"status": "lost"}, headers=AUTH)
        assert bad.status == 400
        assert bad.json["errors"] == [
            {"field": "status", "code": "invalid", "message": "Must be one of: pending, delivering, delivered, failed, batching, batched, cancelled."}
        ]


def _attempts(text: str) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["partner"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "service_webhook_attempts_total"
    }


def test_metrics_count_attempts_and_what_waits(make_client: Any, clock: Any) -> None:
    """/admin/metrics shows attempts by outcome, the undelivered queue by state, and per partner
    what waits and how old the oldest waiting delivery is."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        receiver.script("/hook", 500)
        publish(client, room_claimed("one"))
        publish(client, room_claimed("two"))
        drain(client)
        clock.advance(42)
        text = client.get("/admin/metrics", headers=AUTH).text
        by_outcome: dict[str, float] = {}
        for (_, outcome), value in _attempts(text).items():
            by_outcome[outcome] = by_outcome.get(outcome, 0) + value
        assert by_outcome == {"delivered": 1.0, "retry": 1.0, "failed": 0.0, "paused": 0.0}
        assert 'service_webhook_queue_depth{status="pending"} 1.0' in text
        assert 'service_webhook_queue_depth{status="delivering"} 0.0' in text
        assert 'service_webhook_queue_depth{status="delivered"}' not in text
        assert f'service_webhook_deliveries_waiting{{partner="{partner["id"]}"}} 1.0' in text
        assert f'service_webhook_oldest_waiting_seconds{{partner="{partner["id"]}"}} 42.0' in text
        assert "service_webhook_attempt_seconds_count 2.0" in text


def test_the_worker_counts_attempts_by_partner(make_client: Any) -> None:
    """Each attempt the worker makes is counted under its partner's id."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed("one"))
        drain(client)
        text = client.get("/admin/metrics", headers=AUTH).text
        shown = {(partner["id"], outcome): 0.0 for outcome in ("retry", "failed", "paused")}
        assert _attempts(text) == {**shown, (partner["id"], "delivered"): 1.0}


def test_the_serve_worker_wakes_on_publish(sqlite_url: str, clock: Any) -> None:
    """With run_worker, a publish wakes the app's own worker: no drain, no poll interval."""
    app = create_app(Settings(database_url=sqlite_url, **settings()), clock=clock, run_worker=True)
    with Receiver() as receiver, Client(app) as client:
        onboard(client, receiver.url())
        worker = app.ctx.webhooks.worker
        assert worker is not None
        worker.poll_interval = 60  # only the wake-up can deliver in time

        async def delivered() -> None:
            for _ in range(500):  # up to 5 s; typically a few milliseconds
                if worker.logged:
                    return
                await asyncio.sleep(0.01)

        publish(client, room_claimed())
        client.run(delivered())
        assert worker.logged == 1
        assert len(receiver.requests) == 1
        assert deliveries(client)[0]["status"] == "delivered"
