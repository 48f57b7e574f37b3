"""Real deliveries checked as partners check them: with the Standard Webhooks library (standardwebhooks
on PyPI) and with the service's own verifiers, over a receiver on loopback.

The library reads the system clock and takes no other, so these apps run on a hand-moved clock set
from the system time once at the start: what the service signs is fresh to the library.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from standardwebhooks import Webhook, WebhookVerificationError
from webhook_helpers import (
    AUTH,
    Received,
    Receiver,
    deliveries,
    drain,
    onboard,
    publish,
    room_claimed,
    settings,
)

from service.clock import ManualClock
from service.discovery.catalog import catalog_document
from service.events import WebhookTest
from service.webhooks import partners
from service.webhooks.signing import (
    BadSignature,
    SignatureError,
    StaleTimestamp,
    standard_webhooks_secret,
    verify,
    verify_standard,
)


def wall_clock(offset: timedelta = timedelta(0)) -> ManualClock:
    """A test clock starting at the system time (plus ``offset``), whole seconds."""
    return ManualClock(datetime.now(UTC).replace(microsecond=0) + offset)


def library_accepts(request: Received, secret: str) -> bool:
    """What a Python partner's receiver decides with the library and the secret it was given."""
    try:
        payload = Webhook(standard_webhooks_secret(secret)).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    assert payload == json.loads(request.body)  # the library hands back the parsed body
    return True


def service_accepts(check: Callable[..., None], request: Received, secret: str, now: float) -> bool:
    try:
        check(request.headers, request.body, [secret], now=now)
    except SignatureError:
        return False
    return True


def all_verdicts(request: Received, secret: str, now: float) -> tuple[bool, bool, bool]:
    """(library, verify_standard, verify) for one received request and one secret."""
    return (
        library_accepts(request, secret),
        service_accepts(verify_standard, request, secret, now),
        service_accepts(verify, request, secret, now),
    )


def test_a_delivery_verifies_with_the_library_and_the_service(make_client: Any) -> None:
    """One delivery: webhook-id is the delivery id, webhook-timestamp the attempt's, and the library,
    verify_standard and verify all accept it with the partner's secret."""
    clock = wall_clock()
    with Receiver() as receiver, make_client(clock=clock, **settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        assert drain(client) == 1
        [request] = receiver.requests
        [delivery] = deliveries(client)
        headers = request.headers
        assert headers["webhook-id"] == headers["x-service-delivery"] == delivery["id"]
        assert headers["webhook-timestamp"] == headers["x-service-timestamp"] == str(int(clock().timestamp()))
        assert headers["webhook-signature"].startswith("v1,")
        assert headers["webhook-signature"].count("v1,") == 1
        assert all_verdicts(request, partner["secret"], clock().timestamp()) == (True, True, True)
        assert all_verdicts(request, onboard(client, receiver.url())["secret"], clock().timestamp()) == (
            False,
            False,
            False,
        )


def test_during_a_rotation_either_secret_verifies_both_schemes(make_client: Any) -> None:
    """After a rotation a delivery carries two signatures in each scheme; the old secret and the new
    one each verify it with the library and with both of the service's verifiers."""
    clock = wall_clock()
    with Receiver() as receiver, make_client(clock=clock, **settings()) as client:
        partner = onboard(client, receiver.url())
        rotated = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH)
        assert rotated.status == 200
        publish(client, room_claimed())
        assert drain(client) == 1
        [request] = receiver.requests
        assert len(request.headers["webhook-signature"].split(" ")) == 2
        assert request.headers["x-service-signature"].count("v1=") == 2
        now = clock().timestamp()
        for secret in (partner["secret"], rotated.json["secret"]):
            assert all_verdicts(request, secret, now) == (True, True, True)


def tampered(request: Received, part: str) -> Received:
    headers = dict(request.headers)
    body = request.body
    if part == "body":
        body = body.replace(b'"moonfrog"', b'"moonfrag"')
    elif part == "id":
        headers["webhook-id"] = headers["x-service-delivery"] = "dlv_01JZ8R0A2B4C6D8E0F2G4H6J8K"
    else:
        later = str(int(headers["webhook-timestamp"]) + 1)
        headers["webhook-timestamp"] = headers["x-service-timestamp"] = later
    return Received(request.path, headers, body, request.at)


@pytest.mark.parametrize(
    ("part", "verdicts"),
    [
        ("body", (False, False, False)),
        # x-service-signature does not cover the delivery id (the catalog says so); webhook-signature does.
        ("id", (False, False, True)),
        ("timestamp", (False, False, False)),
    ],
)
def test_tampering_is_refused(make_client: Any, part: str, verdicts: tuple[bool, bool, bool]) -> None:
    """A changed body, id or timestamp fails the library and verify_standard (and verify where signed)."""
    clock = wall_clock()
    with Receiver() as receiver, make_client(clock=clock, **settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        drain(client)
        [request] = receiver.requests
        secret = partner["secret"]
        assert all_verdicts(request, secret, clock().timestamp()) == (True, True, True)
        forged = tampered(request, part)
        assert all_verdicts(forged, secret, clock().timestamp()) == verdicts
        with pytest.raises(BadSignature):
            verify_standard(forged.headers, forged.body, [secret], now=clock().timestamp())


def test_a_stale_delivery_is_refused_by_every_verifier(make_client: Any) -> None:
    """A genuine delivery signed ten minutes ago is a replay to the library and to both verifiers."""
    clock = wall_clock(-timedelta(minutes=10))
    with Receiver() as receiver, make_client(clock=clock, **settings()) as client:
        partner = onboard(client, receiver.url())
        publish(client, room_claimed())
        drain(client)
        [request] = receiver.requests
        now = (clock() + timedelta(minutes=10)).timestamp()
        assert all_verdicts(request, partner["secret"], now) == (False, False, False)
        with pytest.raises(WebhookVerificationError, match="too old"):
            Webhook(partner["secret"]).verify(request.body, request.headers)
        for check in (verify, verify_standard):
            with pytest.raises(StaleTimestamp):
                check(request.headers, request.body, [partner["secret"]], now=now)


LEGACY_SECRET = "q2Jx8sV_0dLr5Nw-T7hYb3KcE9mZa1Pf4Ug6Wi2Ro8s"  # secrets.token_urlsafe(32) form


def test_a_secret_issued_before_whsec_secrets_keeps_verifying(make_client: Any) -> None:
    """A partner holding a token_urlsafe secret verifies x-service-signature with it as before, and
    webhook-signature with the library given whsec_ + base64 of its UTF-8 bytes (or those bytes);
    a rotation then issues a whsec_ secret, and the overlap delivery verifies under both."""
    clock = wall_clock()
    legacy = LEGACY_SECRET
    with Receiver() as receiver, make_client(clock=clock, **settings()) as client:
        new = partners.NewPartner(name="Early partner", url=receiver.url(), events=None)

        async def create() -> partners.Partner:
            async with client.app.ctx.engine.begin() as conn:
                return await partners.create_partner(
                    conn, new, now=clock(), secret=legacy, keyring=client.app.ctx.keyring
                )

        partner = client.run(create())
        publish(client, room_claimed())
        drain(client)
        [first] = receiver.requests
        assert all_verdicts(first, legacy, clock().timestamp()) == (True, True, True)
        assert standard_webhooks_secret(legacy).startswith("whsec_")
        assert Webhook(legacy.encode()).verify(first.body, first.headers) == json.loads(first.body)
        with pytest.raises(binascii.Error):
            Webhook(legacy)  # as it is, the secret is not a Standard Webhooks secret

        rotated = client.post(f"/admin/partners/{partner.id}/rotate-secret", headers=AUTH).json["secret"]
        assert rotated.startswith("whsec_")
        assert standard_webhooks_secret(rotated) == rotated
        publish(client, room_claimed("second"))
        drain(client)
        second = receiver.requests[-1]
        for secret in (legacy, rotated):
            assert all_verdicts(second, secret, clock().timestamp()) == (True, True, True)


def test_the_admin_test_delivery_verifies_with_the_library(make_client: Any) -> None:
    """POST /admin/partners/{id}/test sends a webhook.test delivery signed in both schemes, its body
    exactly what the catalog's testEvent describes."""
    clock = wall_clock()
    with Receiver() as receiver, make_client(clock=clock, **settings()) as client:
        partner = onboard(client, receiver.url())
        answer = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
        assert answer.status == 200
        assert answer.json["ok"] is True
        [request] = receiver.requests
        assert request.headers["webhook-id"] == answer.json["deliveryId"]
        assert all_verdicts(request, partner["secret"], clock().timestamp()) == (True, True, True)
        body = json.loads(request.body)
        assert request.headers["x-service-event"] == body["event"] == "webhook.test"
        assert body == {**body, "partnerId": partner["id"], "test": True, "eventId": answer.json["eventId"]}
        schema = catalog_document("https://rooms.example")["testEvent"]["payloadSchema"]
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        assert [error.message for error in validator.iter_errors(body)] == []
        WebhookTest.model_validate(body)  # strict: raises on any member the model does not describe
