"""Partner onboarding and admin controls: validation, listings without secrets, auth, rotation."""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import pytest
from webhook_helpers import ADMIN_TOKEN, AUTH, Receiver, drain, onboard, publish, room_claimed, settings

from service.webhooks.signing import verify

URL = "https://partner.example/hook"

ROUTES = [
    ("post", "/admin/partners"),
    ("get", "/admin/partners"),
    ("get", "/admin/partners/ptn_x"),
    ("post", "/admin/partners/ptn_x/pause"),
    ("post", "/admin/partners/ptn_x/resume"),
    ("post", "/admin/partners/ptn_x/test"),
    ("post", "/admin/partners/ptn_x/rotate-secret"),
    ("post", "/admin/partners/ptn_x/retry"),
    ("post", "/admin/events"),
    ("get", "/admin/deliveries"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_admin_routes_demand_the_token(make_client: Any, method: str, path: str) -> None:
    """Without the bearer token: 401; with a wrong one: 401; without a configured token: 404."""
    with make_client(**settings()) as client:
        missing = client.request(method, path)
        assert missing.status == 401
        assert missing.headers["www-authenticate"] == 'Bearer realm="admin"'
        wrong = client.request(method, path, headers={"authorization": "Bearer nope"})
        assert wrong.status == 401
    with make_client(**settings(admin_token=None)) as client:
        assert client.request(method, path, headers=AUTH).status == 404


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if "ptn_x" in r[1]])
def test_unknown_partner_is_404(make_client: Any, method: str, path: str) -> None:
    """Every per-partner route answers 404 for an id nobody has."""
    with make_client(**settings()) as client:
        response = client.request(method, path, headers=AUTH)
        assert response.status == 404
        assert response.json == {"ok": False, "message": "No partner has this id."}


def test_onboarding_answers_the_secret_once(make_client: Any) -> None:
    """201 with the partner and its secret; listings and lookups never show a secret."""
    with make_client(**settings(webhook_allow_private_urls=False)) as client:
        client.app.ctx.resolve = _public_dns
        created = client.post(
            "/admin/partners",
            json={"name": " Acme ", "url": URL, "events": ["room.claimed", "room.upgraded"]},
            headers=AUTH,
        )
        assert created.status == 201
        body = created.json
        secret = body.pop("secret")
        # The Standard Webhooks form: whsec_ and the standard base64 of 32 random bytes.
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", secret)
        assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
        assert body == {
            "id": body["id"],
            "name": "Acme",
            "url": URL,
            "events": ["room.claimed", "room.upgraded"],
            "status": "active",
            "batch": None,
            "maxInFlight": None,
            "circuit": "closed",
            "consecutiveFailures": 0,
            "failingSince": None,
            "createdAt": "2026-06-29T12:00:00.000000Z",
            "updatedAt": "2026-06-29T12:00:00.000000Z",
            "liveSecrets": 1,
            "previousSecretExpiresAt": None,
        }
        assert body["id"].startswith("ptn_")
        listing = client.get("/admin/partners", headers=AUTH)
        assert listing.json == {"partners": [body]}
        assert client.get(f"/admin/partners/{body['id']}", headers=AUTH).json == body
        assert secret not in listing.text
        other = onboard(client, URL)
        assert other["secret"] != secret


async def _public_dns(host: str, port: int) -> list[str]:
    return ["93.184.216.34"]


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"url": URL}, [("name", "missing")]),
        ({"name": "P"}, [("url", "missing")]),
        ({"name": 5, "url": URL}, [("name", "invalid_type")]),
        ({"name": "   ", "url": URL}, [("name", "invalid")]),
        ({"name": "x" * 201, "url": URL}, [("name", "too_long")]),
        ({"name": "P", "url": ["x"]}, [("url", "invalid_type")]),
        ({"name": "P", "url": URL, "secret": "mine"}, [("secret", "unknown_field")]),
        ({"name": "P", "url": URL, "events": "room.claimed"}, [("events", "invalid_type")]),
        ({"name": "P", "url": URL, "events": []}, [("events", "invalid")]),
        ({"name": "P", "url": URL, "events": None}, [("events", "invalid_type")]),
        (
            {"name": "P", "url": URL, "events": ["room.claimed", "room.sold", 3]},
            [("events.1", "unknown_event"), ("events.2", "invalid_type")],
        ),
        ({"name": "P", "url": "https://user:pw@partner.example/"}, [("url", "credentials_in_url")]),
        ({"name": "P", "url": "http://partner.example/"}, [("url", "insecure_scheme")]),
        ({"name": "P", "url": "https://" + "a" * 2100}, [("url", "too_long")]),
        ({"name": "P", "url": "https://a..b/x"}, [("url", "invalid_url")]),
        ({"name": "Acme\u202eevil", "url": URL}, [("name", "invalid_characters")]),  # reorders on screen
        ({"name": "Acme\nPartner", "url": URL}, [("name", "invalid_characters")]),  # breaks a listing's line
        ({"name": "Acme\x1b[31m", "url": URL}, [("name", "invalid_characters")]),  # a terminal escape
        ({"name": "P", "url": "https://" + "a" * 64 + ".com/x"}, [("url", "invalid_url")]),
    ],
)
def test_onboarding_validation(make_client: Any, body: dict[str, Any], errors: list[tuple[str, str]]) -> None:
    """Bad onboarding bodies are 400 with each field at fault named."""
    with make_client(**settings(webhook_allow_private_urls=False)) as client:
        client.app.ctx.resolve = _public_dns
        response = client.post("/admin/partners", json=body, headers=AUTH)
        assert response.status == 400
        assert [(e["field"], e["code"]) for e in response.json["errors"]] == errors
        assert client.get("/admin/partners", headers=AUTH).json == {"partners": []}


def test_onboarding_body_must_be_json(make_client: Any) -> None:
    """Form bodies are 415; an empty body is 400."""
    with make_client(**settings()) as client:
        form = client.post("/admin/partners", content=b"name=P&url=x", headers={
            **AUTH, "content-type": "application/x-www-form-urlencoded"})
        assert form.status == 415
        empty = client.post("/admin/partners", content=b"", headers={**AUTH, "content-type": "application/json"})
        assert empty.status == 400


def test_pause_and_resume(make_client: Any, clock: Any) -> None:
    """Pause and resume answer the partner with its new status; repeating is harmless."""
    with make_client(**settings()) as client:
        partner = onboard(client, URL)
        clock.advance(60)
        for path, status in [("pause", "paused"), ("pause", "paused"), ("resume", "active")]:
            response = client.post(f"/admin/partners/{partner['id']}/{path}", headers=AUTH)
            assert response.status == 200
            assert response.json["status"] == status
            assert response.json["updatedAt"] == "2026-06-29T12:01:00.000000Z"
            assert "secret" not in response.json


def test_rotation_overlap(make_client: Any, clock: Any) -> None:
    """After a rotation both secrets sign until the overlap ends; then only the new one."""
    with Receiver() as receiver, make_client(**settings(secret_rotation_overlap=600)) as client:
        partner = onboard(client, receiver.url())
        old = partner["secret"]
        rotated = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH)
        assert rotated.status == 200
        new = rotated.json["secret"]
        assert new != old
        assert rotated.json["previousSecretExpiresAt"] == "2026-06-29T12:10:00.000000Z"
        listing = client.get("/admin/partners", headers=AUTH).text
        assert old not in listing and new not in listing

        publish(client, room_claimed("during"))
        drain(client)
        during = receiver.requests[-1]
        signatures = during.headers["x-service-signature"].split(",")
        assert len(signatures) == 2  # newest first
        now = clock().timestamp()
        verify(during.headers, during.body, [new], now=now)
        verify(during.headers, during.body, [old], now=now)
        assert signatures[0] == _only(during, new)

        clock.advance(601)
        publish(client, room_claimed("after"))
        drain(client)
        after = receiver.requests[-1]
        assert len(after.headers["x-service-signature"].split(",")) == 1
        verify(after.headers, after.body, [new], now=clock().timestamp())
        with pytest.raises(Exception, match="No v1 signature"):
            verify(after.headers, after.body, [old], now=clock().timestamp())


def _only(request: Any, secret: str) -> str:
    from service.webhooks.signing import sign

    return sign(request.body, [secret], int(request.headers["x-service-timestamp"]))


def test_two_quick_rotations_keep_the_original_signing_until_its_overlap(
    make_client: Any, clock: Any
) -> None:
    """A second rotation inside the overlap (a retried call) drops no secret: the original signs
    until its own overlap ends, then only the two newer ones, then the newest alone."""
    with Receiver() as receiver, make_client(**settings(secret_rotation_overlap=600)) as client:
        partner = onboard(client, receiver.url())
        rotate = f"/admin/partners/{partner['id']}/rotate-secret"
        first = partner["secret"]
        second = client.post(rotate, headers=AUTH).json["secret"]
        clock.advance(60)
        answer = client.post(rotate, headers=AUTH).json
        third = answer["secret"]
        assert answer["liveSecrets"] == 3
        assert answer["previousSecretExpiresAt"] == "2026-06-29T12:11:00.000000Z"

        def signed_with() -> list[str]:
            response = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
            assert response.json["ok"] is True
            signatures: list[str] = receiver.requests[-1].headers["x-service-signature"].split(",")
            return signatures

        def only(secret: str) -> str:
            return _only(receiver.requests[-1], secret)

        assert signed_with() == [only(third), only(second), only(first)]  # newest first
        clock.advance(541)  # the first rotation's overlap has ended; the second's has not
        assert signed_with() == [only(third), only(second)]
        clock.advance(60)
        assert signed_with() == [only(third)]


def test_overlap_zero_ends_every_old_secret_now(make_client: Any, database_url: str) -> None:
    """After a leak, a rotation with overlapSeconds 0 leaves the new secret alone, and the old
    ones are gone from the database."""
    with Receiver() as receiver, make_client(database_url=database_url, **settings()) as client:
        partner = onboard(client, receiver.url())
        rotate = f"/admin/partners/{partner['id']}/rotate-secret"
        client.post(rotate, headers=AUTH)
        answer = client.post(rotate, json={"overlapSeconds": 0}, headers=AUTH)
        assert answer.status == 200
        assert (answer.json["liveSecrets"], answer.json["previousSecretExpiresAt"]) == (1, None)
        response = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
        request = receiver.requests[-1]
        assert response.json["ok"] is True
        assert request.headers["x-service-signature"] == _only(request, answer.json["secret"])
        assert client.run(_stored_secrets(client)) == 1


@pytest.mark.parametrize("body", [b"", b" \n\t "])
def test_a_rotation_without_a_body_takes_the_default_overlap(make_client: Any, body: bytes) -> None:
    """No body, or only white space (as the routes that take no body read it), rotates with the
    default overlap; white space was refused as an empty JSON body."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        answer = client.post(
            f"/admin/partners/{partner['id']}/rotate-secret",
            content=body,
            headers={**AUTH, "content-type": "application/json"},
        )
    assert answer.status == 200
    assert answer.json["liveSecrets"] == 2


async def _stored_secrets(client: Any) -> int:
    from sqlalchemy import func, select

    from service.db.tables import partner_secrets

    async with client.app.ctx.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(partner_secrets))).scalar_one())


def test_an_expired_secret_is_deleted_from_the_database(make_client: Any, clock: Any, database_url: str) -> None:
    """Once its overlap has ended, an old secret is not kept: the next claim deletes it."""
    options = settings(secret_rotation_overlap=600)
    with Receiver() as receiver, make_client(database_url=database_url, **options) as client:
        partner = onboard(client, receiver.url())
        client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH)
        assert client.run(_stored_secrets(client)) == 2
        clock.advance(601)
        publish(client, room_claimed())
        drain(client)
        assert len(receiver.requests) == 1
        assert client.run(_stored_secrets(client)) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"overlapSeconds": -1}, "overlapSeconds"),
        ({"overlapSeconds": "60"}, "overlapSeconds"),
        ({"overlapSeconds": True}, "overlapSeconds"),
        ({"overlapSeconds": 2_592_001}, "overlapSeconds"),
        ({"overlap": 60}, "overlap"),
    ],
)
def test_a_bad_overlap_is_refused(make_client: Any, body: dict[str, Any], field: str) -> None:
    """overlapSeconds is a whole number of seconds from 0 to 30 days; other members are refused."""
    with make_client(**settings()) as client:
        partner = onboard(client, URL)
        response = client.post(f"/admin/partners/{partner['id']}/rotate-secret", json=body, headers=AUTH)
        assert response.status == 400
        assert [error["field"] for error in response.json["errors"]] == [field]


def test_secrets_never_reach_the_logs(make_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Onboarding, rotation, deliveries, retries and tests log nothing secret.

    The service's own loggers are captured at DEBUG; libraries at INFO (aiosqlite's DEBUG log
    prints every SQL parameter, so it must stay off in production).
    """
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="service")
    with Receiver() as receiver, make_client(**settings()) as client:
        receiver.script("/hook", 500)
        partner = onboard(client, receiver.url())
        rotated = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH).json
        publish(client, room_claimed())
        drain(client)
        client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
        client.get("/admin/deliveries", headers=AUTH)
        assert any("webhook attempt" in record.message for record in caplog.records)
    text = caplog.text + "".join(repr(record.__dict__) for record in caplog.records)
    for secret in (partner["secret"], rotated["secret"], ADMIN_TOKEN):
        assert secret not in text
