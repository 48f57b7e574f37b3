"""A partner's lifecycle and second chances: update, removal, replay of a window, resend of one.

Routes and commands, on SQLite and PostgreSQL, against a real receiver on loopback; the clock is
the test's own.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from webhook_helpers import AUTH, Receiver, Reply, deliveries, drain, onboard, publish, room_claimed, settings

from service.cli import main
from service.clock import format_timestamp
from service.webhooks import partners, settle
from service.webhooks.claim import claim_due

ONE_TRY = {"webhook_retry_schedule": ()}  # a failed attempt is final: failed at once


def _partner_ids(client: Any) -> list[str]:
    return [partner["id"] for partner in client.get("/admin/partners", headers=AUTH).json["partners"]]


# --- update -----------------------------------------------------------------------------------


def test_update_changes_only_what_it_names_and_new_deliveries_follow(
    make_client: Any, database_url: str
) -> None:
    """PATCH sets name, URL, kinds and cap; a delivery waiting for its attempt goes to the new URL."""
    with (
        Receiver(Reply(500)) as old,
        Receiver() as new,
        make_client(database_url=database_url, **settings()) as client,
    ):
        partner = onboard(client, old.url(), events=["room.claimed"])
        publish(client, room_claimed("first"))
        assert drain(client) == 1  # failed at the old URL; its retry waits
        answer = client.patch(
            f"/admin/partners/{partner['id']}",
            json={"name": "Renamed", "url": new.url("/v2"), "maxInFlight": 3},
            headers=AUTH,
        )
        assert answer.status == 200, answer.json
        assert (answer.json["name"], answer.json["url"], answer.json["maxInFlight"]) == (
            "Renamed",
            new.url("/v2"),
            3,
        )
        assert answer.json["events"] == ["room.claimed"]  # not named: unchanged
        assert "secret" not in answer.json
        client.app.ctx.clock.advance(3600)
        assert drain(client) == 1
        assert [request.path for request in new.requests] == ["/v2"]
        everything = client.patch(f"/admin/partners/{partner['id']}", json={"events": None}, headers=AUTH)
        assert everything.json["events"] is None


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "body", "missing"),
        ({"secret": "x"}, "secret", "unknown_field"),
        ({"name": ""}, "name", "invalid"),
        ({"name": "x\x00"}, "name", "invalid_characters"),
        ({"url": 7}, "url", "invalid_type"),
        ({"url": "ftp://partner.example/"}, "url", None),
        ({"events": []}, "events", "invalid"),
        ({"events": ["room.nope"]}, "events.0", "unknown_event"),
        ({"maxInFlight": 0}, "maxInFlight", "invalid"),
        ({"maxInFlight": True}, "maxInFlight", "invalid"),
    ],
)
def test_a_bad_update_is_400_naming_the_member(
    make_client: Any, body: dict[str, Any], field: str, code: str | None
) -> None:
    with make_client(**settings()) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook")
        answer = client.patch(f"/admin/partners/{partner['id']}", json=body, headers=AUTH)
        assert answer.status == 400, answer.json
        [error] = answer.json["errors"]
        assert error["field"] == field
        if code is not None:
            assert error["code"] == code
        shown = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
        assert (shown["name"], shown["url"]) == (partner["name"], partner["url"])  # nothing changed


def test_an_update_to_an_internal_address_is_refused_as_at_onboarding(make_client: Any) -> None:
    with make_client(**settings(webhook_allow_private_urls=False)) as client:
        client.app.ctx.resolve = _dns({"partner.example": ["93.184.216.34"], "inside.example": ["10.1.2.3"]})
        partner = onboard(client, "https://partner.example/hook")
        answer = client.patch(
            f"/admin/partners/{partner['id']}", json={"url": "https://inside.example/hook"}, headers=AUTH
        )
        assert answer.status == 400
        assert answer.json["errors"][0]["field"] == "url"


def _dns(table: dict[str, list[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        return table[host]

    return resolve


# --- removal ----------------------------------------------------------------------------------


def test_removal_cancels_what_was_not_delivered_and_nothing_is_sent_after(
    make_client: Any, database_url: str
) -> None:
    """DELETE: 204; the partner is gone from listings, lookups and every per-partner route; its
    pending and in-flight deliveries are cancelled and never sent; delivered ones keep their state."""
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        gone = onboard(client, receiver.url("/gone"))
        kept = onboard(client, receiver.url("/kept"))
        publish(client, room_claimed("before"))
        assert drain(client) == 2
        publish(client, room_claimed("after"))
        assert client.delete(f"/admin/partners/{gone['id']}", headers=AUTH).status == 204
        assert drain(client) == 1
        assert sorted(request.path for request in receiver.requests) == ["/gone", "/kept", "/kept"]
        states = {(d["partnerId"], d["status"]) for d in deliveries(client)}
        assert states == {
            (gone["id"], "delivered"),
            (gone["id"], "cancelled"),
            (kept["id"], "delivered"),
        }
        assert _partner_ids(client) == [kept["id"]]
        for method, path in (
            ("get", ""),
            ("delete", ""),
            ("patch", ""),
            ("post", "/resume"),
            ("post", "/rotate-secret"),
            ("post", "/test"),
        ):
            body = {"json": {"name": "x"}} if method == "patch" else {}
            answer = client.request(method, f"/admin/partners/{gone['id']}{path}", headers=AUTH, **body)
            assert answer.status == 404, (method, path)
        publish(client, room_claimed("later"))
        assert {d["partnerId"] for d in deliveries(client, event=_last_event(client))} == {kept["id"]}


def _last_event(client: Any) -> str:
    return str(deliveries(client)[0]["eventId"])


def test_an_attempt_in_flight_when_its_partner_is_removed_stays_cancelled(
    make_client: Any, database_url: str, clock: Any
) -> None:
    """The worker's answer for a claim taken before the removal cannot settle the delivery."""
    from service.webhooks.worker import lease_for

    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())

        async def claim_then_remove() -> list[Any]:
            async with client.app.ctx.engine.begin() as conn:
                jobs = await claim_due(
                    conn,
                    now=clock(),
                    limit=10,
                    lease=lease_for(client.app.ctx.settings),
                    default_cap=8,
                    keyring=client.app.ctx.keyring,
                )
            return jobs

        [job] = client.run(claim_then_remove())
        assert client.delete(f"/admin/partners/{partner['id']}", headers=AUTH).status == 204

        async def answer_late() -> None:
            from service.webhooks.runtime import worker_for

            async with worker_for(client.app) as worker:
                record = await worker.attempt(job)
                async with client.app.ctx.engine.begin() as conn:
                    effects = (await settle.record(conn, [record], breaker=worker.breaker)).effects
                    await partners.apply(conn, effects, now=worker.clock())

        client.run(answer_late())
        [delivery] = deliveries(client)
        assert delivery["status"] == "cancelled"
        assert [attempt["outcome"] for attempt in delivery["attempts"]] == ["delivered"]  # it did happen


# --- replay -----------------------------------------------------------------------------------


def test_replay_requeues_a_window_across_partners_and_for_one(
    make_client: Any, database_url: str, clock: Any
) -> None:
    """Deliveries created at or after since and before until, in the status asked (failed by
    default), across partners or for one; the same delivery ids go out again, numbered on."""
    with (
        Receiver(Reply(500)) as receiver,
        make_client(database_url=database_url, **settings(**ONE_TRY)) as client,
    ):
        first = onboard(client, receiver.url("/a"))
        second = onboard(client, receiver.url("/b"))
        start = clock()
        early = publish(client, room_claimed("early"))["eventId"]
        clock.advance(60)
        edge = clock()
        publish(client, room_claimed("edge"))  # created exactly at `until` below: left out
        assert drain(client) == 4
        assert {d["status"] for d in deliveries(client)} == {"failed"}
        window = {"since": format_timestamp(start), "until": format_timestamp(edge)}
        receiver.default = Reply(200)

        one = client.post("/admin/deliveries/replay", json={**window, "partner": first["id"]}, headers=AUTH)
        assert (one.status, one.json) == (202, {"deliveries": 1})
        both = client.post("/admin/deliveries/replay", json=window, headers=AUTH)
        assert (both.status, both.json) == (202, {"deliveries": 1})  # the first was pending already
        assert drain(client) == 2
        states = {(d["partnerId"], d["eventId"] == early, d["status"]) for d in deliveries(client)}
        assert states == {
            (first["id"], True, "delivered"),
            (second["id"], True, "delivered"),
            (first["id"], False, "failed"),
            (second["id"], False, "failed"),
        }
        for delivery in deliveries(client, event=early):
            sent = [r for r in receiver.requests if r.headers["x-service-delivery"] == delivery["id"]]
            assert len(sent) == 2 and sent[0].body == sent[1].body
            assert [attempt["attempt"] for attempt in delivery["attempts"]] == [1, 2]

        delivered = client.post(
            "/admin/deliveries/replay", json={**window, "status": "delivered"}, headers=AUTH
        )
        assert delivered.json == {"deliveries": 2}


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({}, "since", "missing"),
        ({"since": "yesterday"}, "since", "invalid"),
        ({"since": "2026-06-01T00:00:00"}, "since", "invalid"),  # no offset: ambiguous
        ({"since": 5}, "since", "invalid_type"),
        ({"since": "2026-06-02T00:00:00Z", "until": "2026-06-01T00:00:00Z"}, "until", "invalid"),
        ({"since": "2026-06-01T00:00:00Z", "status": "pending"}, "status", "invalid"),
        ({"since": "2026-06-01T00:00:00Z", "status": "cancelled"}, "status", "invalid"),
        ({"since": "2026-06-01T00:00:00Z", "window": 3}, "window", "unknown_field"),
    ],
)
def test_a_bad_replay_is_400_naming_the_member(
    make_client: Any, body: dict[str, Any], field: str, code: str
) -> None:
    with make_client(**settings()) as client:
        answer = client.post("/admin/deliveries/replay", json=body, headers=AUTH)
        assert answer.status == 400, answer.json
        assert [(e["field"], e["code"]) for e in answer.json["errors"]] == [(field, code)]


def test_a_replay_for_an_unknown_partner_is_404(make_client: Any) -> None:
    with make_client(**settings()) as client:
        body = {"since": "2026-06-01T00:00:00Z", "partner": "ptn_nobody"}
        assert client.post("/admin/deliveries/replay", json=body, headers=AUTH).status == 404


# --- resend -----------------------------------------------------------------------------------


def test_resend_sends_a_delivered_delivery_again_under_its_id(make_client: Any, database_url: str) -> None:
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        onboard(client, receiver.url())
        publish(client, room_claimed())
        assert drain(client) == 1
        [delivery] = deliveries(client)
        answer = client.post(f"/admin/deliveries/{delivery['id']}/resend", headers=AUTH)
        assert (answer.status, answer.json) == (202, {"deliveryId": delivery["id"], "status": "pending"})
        assert drain(client) == 1
        first, second = receiver.requests
        assert first.headers["x-service-delivery"] == second.headers["x-service-delivery"] == delivery["id"]
        assert first.body == second.body
        [again] = deliveries(client)
        assert again["status"] == "delivered"
        assert [attempt["attempt"] for attempt in again["attempts"]] == [1, 2]


def test_resend_refuses_what_it_must_not_send(make_client: Any, clock: Any) -> None:
    """404 for an unknown delivery; 409 for one in flight and for a removed partner's."""
    from service.webhooks.worker import lease_for

    with Receiver() as receiver, make_client(**settings()) as client:
        assert client.post("/admin/deliveries/dlv_nothing/resend", headers=AUTH).status == 404
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        [delivery] = deliveries(client)

        async def claim() -> None:
            async with client.app.ctx.engine.begin() as conn:
                await claim_due(
                    conn,
                    now=clock(),
                    limit=1,
                    lease=lease_for(client.app.ctx.settings),
                    default_cap=8,
                    keyring=client.app.ctx.keyring,
                )

        client.run(claim())
        in_flight = client.post(f"/admin/deliveries/{delivery['id']}/resend", headers=AUTH)
        assert in_flight.status == 409
        clock.advance(lease_for(client.app.ctx.settings).total_seconds() + 1)  # its worker died
        assert client.post(f"/admin/deliveries/{delivery['id']}/resend", headers=AUTH).status == 202
        client.delete(f"/admin/partners/{partner['id']}", headers=AUTH)
        removed = client.post(f"/admin/deliveries/{delivery['id']}/resend", headers=AUTH)
        assert removed.status == 409
        assert "removed" in removed.json["message"]


# --- every admin route refuses stray query parameters ---------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/admin/partners"),
        ("get", "/admin/partners/ptn_x"),
        ("post", "/admin/partners/ptn_x/pause"),
        ("post", "/admin/events"),
        ("post", "/admin/deliveries/replay"),
        ("get", "/admin/metrics"),
        ("get", "/admin/deliveries"),
        ("get", "/admin/waitlist"),
    ],
)
def test_unknown_query_parameters_are_400_on_every_admin_route(
    make_client: Any, method: str, path: str
) -> None:
    with make_client(**settings()) as client:
        answer = client.request(method, f"{path}?since=2026-11-01", headers=AUTH)
        assert answer.status == 400, (path, answer.json)
        assert answer.json["errors"][0] == {
            "field": "since",
            "code": "unknown_parameter",
            "message": "This parameter is not accepted.",
        }


# --- the commands -----------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, json.loads(out if code == 0 else err)


def test_the_commands_update_remove_list_replay_and_resend(
    make_client: Any,
    clock: Any,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS", "1")
    with Receiver(Reply(500)) as receiver, make_client(**settings(**ONE_TRY)) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        assert drain(client) == 1
        code, updated = _cli(
            capsys, "partners", "update", partner["id"], "--name", "Acme", "--max-in-flight", "2"
        )
        assert (code, updated["name"], updated["maxInFlight"]) == (0, "Acme", 2)
        code, refused = _cli(capsys, "partners", "update", partner["id"], "--max-in-flight", "lots")
        assert (code, refused["errors"][0]["field"]) == (1, "maxInFlight")
        code, listed = _cli(capsys, "deliveries", "list", "--status", "failed")
        assert code == 0
        [delivery] = listed["deliveries"]
        code, bad = _cli(capsys, "deliveries", "list", "--status", "lost")
        assert (code, bad["errors"][0]["field"]) == (1, "status")
        since = format_timestamp(clock() - timedelta(hours=1))
        code, replayed = _cli(capsys, "deliveries", "replay", "--since", since)
        assert (code, replayed) == (0, {"deliveries": 1})
        code, resent = _cli(capsys, "deliveries", "resend", delivery["id"])
        assert (code, resent) == (0, {"deliveryId": delivery["id"], "status": "pending"})
        code, removed = _cli(capsys, "partners", "delete", partner["id"])
        assert (code, removed) == (0, {"partnerId": partner["id"], "cancelled": 1})
        code, again = _cli(capsys, "partners", "delete", partner["id"])
        assert (code, again["message"]) == (1, "No partner has this id.")
