"""Signed test vectors: deliveries a partner's verifier must accept or refuse, in any language.

``vectors_document(base_url)`` is served at ``/api/v1/webhooks/test-vectors``. Every case is made
here by the signer itself, from fixed secrets, delivery ids and times, so the document is the
same bytes on every run while the schemes stay the same. A partner gives its verifier each case's
headers, the UTF-8 bytes of its body and the secrets it lists, with the document's ``now`` as the
current time, and compares the verdict, scheme by scheme, with ``expected``.

Cases are only ever appended within a version (a batched delivery, say, is one more case whose
``delivery`` is ``batch``); an existing case never changes. The secrets here are published with
the document: they sign nothing but these vectors.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.clock import ManualClock
from service.discovery.catalog import batch_example, public_api
from service.events import EVENT_MODELS
from service.ids import SeededIds
from service.webhooks.batching import batch_body
from service.webhooks.outbox import encode_payload
from service.webhooks.signing import (
    DELIVERY_HEADER,
    SECRET_PREFIX,
    SIGNATURE_HEADER,
    STANDARD_ID_HEADER,
    STANDARD_SIGNATURE_HEADER,
    STANDARD_TIMESTAMP_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
    BadSignature,
    MalformedHeader,
    MissingHeader,
    SignatureError,
    StaleTimestamp,
    signature_headers,
    standard_webhooks_secret,
)

VECTORS_KIND: Final = "service.public.webhook-test-vectors"
VECTORS_VERSION = "1.0"
# Every case is signed at SIGNED_AT (2026-06-30T12:00:00Z, after every example's occurredAt) unless
# it is about time, and verified at NOW.
SIGNED_AT = 1782820800
NOW = SIGNED_AT + 5
SCHEMES = (SIGNATURE_HEADER, STANDARD_SIGNATURE_HEADER)
DELIVERY_PREFIX = "dlv"  # as service.webhooks.outbox.new_delivery_id writes delivery ids


def _published_secret(label: str) -> str:
    """A whsec_ secret of the form the service issues, fixed by its label."""
    key = hashlib.sha256(f"webhook test vectors: {label}".encode()).digest()
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


SECRET = _published_secret("current secret")
ROTATED_SECRET = _published_secret("secret after a rotation")
OTHER_SECRET = _published_secret("somebody else's secret")
# The form secrets had before whsec_ ones (secrets.token_urlsafe(32)); still verifies both schemes.
EARLIER_SECRET = "q2Jx8sV_0dLr5Nw-T7hYb3KcE9mZa1Pf4Ug6Wi2Ro8s"  # noqa: S105 - published test key

Reason = Literal["bad_signature", "stale_timestamp", "malformed_header", "missing_header"]
# What each refusal means, and the exception the service's own verifiers raise for it.
REASONS: dict[str, tuple[type[SignatureError], str]] = {
    "bad_signature": (BadSignature, "No v1 signature matches the body and a secret you hold."),
    "stale_timestamp": (
        StaleTimestamp,
        f"The signature is genuine but the timestamp is more than {TOLERANCE_SECONDS} s from now.",
    ),
    "malformed_header": (MalformedHeader, "The timestamp header is not Unix seconds in ASCII digits."),
    "missing_header": (MissingHeader, "A header the scheme needs is absent."),
}


# --- the document's shape -------------------------------------------------------------------------


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accept: bool
    reason: Reason | None = Field(description="Why a verifier refuses; null when it accepts.")


class VectorCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable name of the case.")
    description: str
    delivery: Literal["single", "batch"] = Field(
        description='What the body holds: one event (single), or {"event", "batch": true, "events": '
        "[...]} with several events of one kind (batch)."
    )
    event: str = Field(description="The event kind in the body.")
    secrets: list[str] = Field(description="The secrets the receiver holds, as issued.")
    standardWebhooksSecrets: list[str] = Field(
        description="The same secrets in the whsec_ form Standard Webhooks libraries take."
    )
    headers: dict[str, str] = Field(description="Header names lower-case, values exactly as sent.")
    body: str = Field(description="The raw request body is the UTF-8 encoding of this string.")
    expected: dict[str, Expectation] = Field(
        description="Per signature header: whether a correct verifier accepts, and why not."
    )


class WebhookVectors(BaseModel):
    """GET /api/v1/webhooks/test-vectors: signed deliveries to check a webhook verifier against."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["service.public.webhook-test-vectors"]
    version: str = Field(description="Cases are only appended within a version; none ever changes.")
    publicApi: str
    description: str
    now: int = Field(description="Unix seconds: verify every case as if this were the current time.")
    timestampTolerance: int = Field(description="Seconds either side of now a timestamp may be.")
    schemes: dict[str, str]
    reasons: dict[str, str]
    cases: list[VectorCase]


# --- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignedDelivery:
    """One delivery as it goes on the wire: the signing headers and the raw body."""

    event: str
    headers: dict[str, str]
    body: bytes


def _delivery_ids() -> tuple[dict[str, str], str]:
    """One fixed delivery id per kind, then the batch's, as the service writes them (ULIDs at
    SIGNED_AT); drawn in this order so the ids of the first cases never change."""
    ids = SeededIds(ManualClock(datetime.fromtimestamp(SIGNED_AT, UTC)), "webhook test vectors")
    per_kind = {kind: ids(DELIVERY_PREFIX) for kind in EVENT_MODELS}
    return per_kind, ids(DELIVERY_PREFIX)


DELIVERY_IDS, BATCH_DELIVERY_ID = _delivery_ids()


def example_delivery(
    kind: str, *, secrets: Sequence[str] = (SECRET,), timestamp: int = SIGNED_AT
) -> SignedDelivery:
    """The kind's catalog example delivered as the service would: exact body bytes and headers."""
    model = EVENT_MODELS[kind]
    body = encode_payload(model.model_validate(model.EXAMPLE)).encode("utf-8")
    headers = signature_headers(
        event=kind, delivery_id=DELIVERY_IDS[kind], body=body, secrets=secrets, timestamp=timestamp
    )
    return SignedDelivery(kind, headers, body)


def batch_delivery(*, reverse: bool = False) -> SignedDelivery:
    """The catalog's example batch delivered as the service would (``reverse``: its events swapped
    after signing, a tampering)."""
    example = batch_example()
    kind = example["event"]
    model = EVENT_MODELS[kind]
    payloads = [encode_payload(model.model_validate(payload)) for payload in example["events"]]
    body = batch_body(kind, payloads).encode("utf-8")
    headers = signature_headers(
        event=kind, delivery_id=BATCH_DELIVERY_ID, body=body, secrets=(SECRET,), timestamp=SIGNED_AT
    )
    if reverse:
        body = batch_body(kind, payloads[::-1]).encode("utf-8")
    return SignedDelivery(kind, headers, body)


ACCEPT = Expectation(accept=True, reason=None)


def _refused(reason: Reason) -> Expectation:
    return Expectation(accept=False, reason=reason)


def _both(expectation: Expectation) -> dict[str, Expectation]:
    return dict.fromkeys(SCHEMES, expectation)


def _case(
    case_id: str,
    description: str,
    delivery: SignedDelivery,
    held: Sequence[str],
    expected: dict[str, Expectation],
    kind: Literal["single", "batch"] = "single",
) -> VectorCase:
    return VectorCase(
        id=case_id,
        description=description,
        delivery=kind,
        event=delivery.event,
        secrets=list(held),
        standardWebhooksSecrets=[standard_webhooks_secret(secret) for secret in held],
        headers=dict(delivery.headers),
        body=delivery.body.decode("utf-8"),
        expected=expected,
    )


def _with_headers(delivery: SignedDelivery, **changes: str | None) -> SignedDelivery:
    """The delivery with headers set (or dropped, for None); keys use _ for -."""
    headers = dict(delivery.headers)
    for key, value in changes.items():
        name = key.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return replace(delivery, headers=headers)


def cases() -> list[VectorCase]:
    """Every case, in the document's order: accepted deliveries first, then each refusal."""
    singles = [
        _case(
            f"single/{kind}",
            f"A {kind} delivery signed with one secret.",
            example_delivery(kind),
            [SECRET],
            _both(ACCEPT),
        )
        for kind in EVENT_MODELS
    ]
    rotation = example_delivery("room.upgraded", secrets=(ROTATED_SECRET, SECRET))
    claimed = example_delivery("room.claimed")
    return [
        *singles,
        _case(
            "rotation/new-secret",
            "During a rotation's overlap: two signatures per scheme, newest first; the receiver "
            "already holds only the new secret.",
            rotation,
            [ROTATED_SECRET],
            _both(ACCEPT),
        ),
        _case(
            "rotation/old-secret",
            "The same delivery; the receiver still holds only the old secret.",
            rotation,
            [SECRET],
            _both(ACCEPT),
        ),
        _case(
            "earlier-secret",
            "A secret issued before whsec_ secrets: x-service-signature is keyed with its UTF-8 "
            "bytes as always, webhook-signature too; a Standard Webhooks library takes the "
            "standardWebhooksSecrets form.",
            example_delivery("room.claimed", secrets=(EARLIER_SECRET,)),
            [EARLIER_SECRET],
            _both(ACCEPT),
        ),
        _case(
            "refused/tampered-body",
            "The body was changed after signing (roomType official_owner became nft_room).",
            replace(claimed, body=claimed.body.replace(b"official_owner", b"nft_room")),
            [SECRET],
            _both(_refused("bad_signature")),
        ),
        _case(
            "refused/tampered-id",
            "The delivery id was changed in both headers after signing. Only webhook-signature "
            "signs the id; x-service-signature does not, so it still verifies.",
            _with_headers(
                claimed,
                x_service_delivery=DELIVERY_IDS["room.upgraded"],
                webhook_id=DELIVERY_IDS["room.upgraded"],
            ),
            [SECRET],
            {SIGNATURE_HEADER: ACCEPT, STANDARD_SIGNATURE_HEADER: _refused("bad_signature")},
        ),
        _case(
            "refused/tampered-timestamp",
            "Both timestamp headers were moved one second after signing (still within tolerance).",
            _with_headers(
                claimed, x_service_timestamp=str(SIGNED_AT + 1), webhook_timestamp=str(SIGNED_AT + 1)
            ),
            [SECRET],
            _both(_refused("bad_signature")),
        ),
        _case(
            "refused/wrong-secret",
            "A genuine delivery checked with a secret that did not sign it.",
            claimed,
            [OTHER_SECRET],
            _both(_refused("bad_signature")),
        ),
        _case(
            "refused/stale-timestamp",
            f"A genuine delivery signed {TOLERANCE_SECONDS + 1} s before now: a replay.",
            example_delivery("room.claimed", timestamp=NOW - TOLERANCE_SECONDS - 1),
            [SECRET],
            _both(_refused("stale_timestamp")),
        ),
        _case(
            "refused/future-timestamp",
            f"A genuine delivery signed {TOLERANCE_SECONDS + 1} s after now: a skewed clock.",
            example_delivery("room.claimed", timestamp=NOW + TOLERANCE_SECONDS + 1),
            [SECRET],
            _both(_refused("stale_timestamp")),
        ),
        _case(
            "refused/malformed-timestamp",
            "Both timestamp headers hold an ISO-8601 time instead of Unix seconds.",
            _with_headers(
                claimed,
                x_service_timestamp="2026-06-30T12:00:00Z",
                webhook_timestamp="2026-06-30T12:00:00Z",
            ),
            [SECRET],
            _both(_refused("malformed_header")),
        ),
        _case(
            "refused/unknown-version",
            "Every signature is labelled v2, a version this document's verifiers do not know.",
            _with_headers(
                claimed,
                x_service_signature=claimed.headers[SIGNATURE_HEADER].replace("v1=", "v2="),
                webhook_signature=claimed.headers[STANDARD_SIGNATURE_HEADER].replace("v1,", "v2,"),
            ),
            [SECRET],
            _both(_refused("bad_signature")),
        ),
        _case(
            "refused/missing-signature",
            "Both signature headers are absent.",
            _with_headers(claimed, x_service_signature=None, webhook_signature=None),
            [SECRET],
            _both(_refused("missing_header")),
        ),
        # Appended after the first 21: batched delivery.
        _case(
            "batch/room.trending",
            "A batch of two room.trending events, one delivery id for the batch; each payload is "
            "exactly what it would be sent alone, oldest first.",
            batch_delivery(),
            [SECRET],
            _both(ACCEPT),
            "batch",
        ),
        _case(
            "refused/batch-reordered",
            "The same batch with its two events swapped after signing: the order is signed too.",
            batch_delivery(reverse=True),
            [SECRET],
            _both(_refused("bad_signature")),
            "batch",
        ),
    ]


def vectors(base_url: str) -> WebhookVectors:
    return WebhookVectors(
        kind=VECTORS_KIND,
        version=VECTORS_VERSION,
        publicApi=public_api(base_url),
        description=(
            "Signed webhook deliveries to check a verifier against. For each case, give your "
            "verifier the headers, the UTF-8 bytes of body and the secrets listed (a Standard "
            "Webhooks library takes standardWebhooksSecrets), with now as the current time, and "
            "compare its verdict for each signature header with expected. A verifier may check "
            "either scheme or both."
        ),
        now=NOW,
        timestampTolerance=TOLERANCE_SECONDS,
        schemes={
            SIGNATURE_HEADER: (
                f"v1=<signature>, comma-separated: the unpadded base64url HMAC-SHA256 of "
                f"'{{{TIMESTAMP_HEADER}}}.{{raw body}}' keyed with the secret's UTF-8 bytes."
            ),
            STANDARD_SIGNATURE_HEADER: (
                f"v1,<signature>, space-separated (Standard Webhooks): the base64 HMAC-SHA256 of "
                f"'{{{STANDARD_ID_HEADER}}}.{{{STANDARD_TIMESTAMP_HEADER}}}.{{raw body}}' keyed with "
                f"the base64-decoded part of the whsec_ secret (of the standardWebhooksSecrets "
                f"form for secrets issued without the prefix). {STANDARD_ID_HEADER} equals "
                f"{DELIVERY_HEADER}, {STANDARD_TIMESTAMP_HEADER} equals {TIMESTAMP_HEADER}."
            ),
        },
        reasons={reason: meaning for reason, (_, meaning) in REASONS.items()},
        cases=cases(),
    )


def vectors_document(base_url: str) -> dict[str, object]:
    """The test vectors as JSON-ready data."""
    return vectors(base_url).model_dump(mode="json")
