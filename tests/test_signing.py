"""Webhook signatures, both schemes: fixed vectors, the Standard Webhooks library signing and
verifying the same bytes, and every way verification refuses."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook, WebhookVerificationError

from service.webhooks.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
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
    sign,
    sign_standard,
    signature_description,
    signature_headers,
    standard_key,
    standard_webhooks_secret,
    verify,
    verify_standard,
)

NEW_SECRET = "whsec_new_9f2c"
OLD_SECRET = "whsec_old_41aa"
TIMESTAMP = 1782734400  # 2026-06-29T12:00:00Z
BODY = b'{"eventId":"evt_01JZ8Q4M3V6T2K9P0R7S5W1X3Y","event":"room.claimed"}'
# Pinned once from the standard library; a change here breaks every partner's verifier.
NEW_SIGNATURE = "K3AS5rins9UFgrOQGnlFt4woaHhn5sgzGdH06V1R4oM"
OLD_SIGNATURE = "1gk1n1oIrh9l77lSTjMMDUUxd2uKSRmwAbbA3ZMelW4"


def reference_signature(secret: str, timestamp: int, body: bytes) -> str:
    """What a partner would write with nothing but the standard library."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def headers_for(secrets: list[str], *, body: bytes = BODY, timestamp: int = TIMESTAMP) -> dict[str, str]:
    return signature_headers(
        event="room.claimed", delivery_id="dlv_1", body=body, secrets=secrets, timestamp=timestamp
    )


@pytest.mark.parametrize(("secret", "expected"), [(NEW_SECRET, NEW_SIGNATURE), (OLD_SECRET, OLD_SIGNATURE)])
def test_pinned_vectors_match_the_standard_library(secret: str, expected: str) -> None:
    """The pinned vectors are plain HMAC-SHA256, base64url without padding."""
    assert reference_signature(secret, TIMESTAMP, BODY) == expected


@pytest.mark.parametrize(
    ("secrets", "expected"),
    [
        ([NEW_SECRET], f"v1={NEW_SIGNATURE}"),
        ([NEW_SECRET, OLD_SECRET], f"v1={NEW_SIGNATURE},v1={OLD_SIGNATURE}"),
        ([OLD_SECRET, NEW_SECRET], f"v1={OLD_SIGNATURE},v1={NEW_SIGNATURE}"),
    ],
)
def test_sign_writes_one_v1_per_secret_in_order(secrets: list[str], expected: str) -> None:
    """sign() gives one v1= per secret, in the order given (newest first by convention)."""
    assert sign(BODY, secrets, TIMESTAMP) == expected


@pytest.mark.parametrize(
    ("secret", "timestamp", "body"),
    [
        ("s", 0, b""),
        ("ünïcode-sécret", 1, b"{}"),
        ("x" * 200, 9999999999, bytes(range(256))),
    ],
)
def test_sign_matches_the_standard_library_for_other_inputs(secret: str, timestamp: int, body: bytes) -> None:
    """Secrets are UTF-8 bytes and the body is signed byte for byte."""
    assert sign(body, [secret], timestamp) == f"v1={reference_signature(secret, timestamp, body)}"


def test_signature_headers_carries_both_schemes() -> None:
    """The helper partners and tests share yields the four x-service headers and the three Standard
    Webhooks ones: the same id and timestamp, one signature per secret in each scheme."""
    assert headers_for([NEW_SECRET, OLD_SECRET]) == {
        EVENT_HEADER: "room.claimed",
        DELIVERY_HEADER: "dlv_1",
        TIMESTAMP_HEADER: "1782734400",
        SIGNATURE_HEADER: f"v1={NEW_SIGNATURE},v1={OLD_SIGNATURE}",
        STANDARD_ID_HEADER: "dlv_1",
        STANDARD_TIMESTAMP_HEADER: "1782734400",
        STANDARD_SIGNATURE_HEADER: sign_standard("dlv_1", BODY, [NEW_SECRET, OLD_SECRET], TIMESTAMP),
    }
    assert [
        EVENT_HEADER,
        DELIVERY_HEADER,
        TIMESTAMP_HEADER,
        SIGNATURE_HEADER,
        STANDARD_ID_HEADER,
        STANDARD_TIMESTAMP_HEADER,
        STANDARD_SIGNATURE_HEADER,
    ] == [
        "x-service-event",
        "x-service-delivery",
        "x-service-timestamp",
        "x-service-signature",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    ]


@pytest.mark.parametrize(
    ("signed_with", "verify_with"),
    [
        ([NEW_SECRET], [NEW_SECRET]),
        ([NEW_SECRET], NEW_SECRET),
        ([NEW_SECRET, OLD_SECRET], [NEW_SECRET]),
        ([NEW_SECRET, OLD_SECRET], [OLD_SECRET]),
        ([NEW_SECRET, OLD_SECRET], [OLD_SECRET, NEW_SECRET]),
        ([OLD_SECRET], [NEW_SECRET, OLD_SECRET]),
    ],
)
def test_verify_accepts_any_signature_under_any_secret(
    signed_with: list[str], verify_with: list[str] | str
) -> None:
    """During a rotation either secret verifies, on either side."""
    verify(headers_for(signed_with), BODY, verify_with, now=TIMESTAMP)  # raises if refused


@pytest.mark.parametrize("offset", [-TOLERANCE_SECONDS, 0, TOLERANCE_SECONDS])
def test_verify_accepts_timestamps_at_the_edge_of_tolerance(offset: int) -> None:
    """±300 s from the receiver's clock is still fresh."""
    verify(headers_for([NEW_SECRET]), BODY, [NEW_SECRET], now=TIMESTAMP + offset)  # raises if refused


def test_verify_reads_headers_case_insensitively() -> None:
    """HTTP header names are case-insensitive, whatever the framework hands over."""
    headers = {name.upper(): value for name, value in headers_for([NEW_SECRET]).items()}
    verify(headers, BODY, [NEW_SECRET], now=TIMESTAMP)  # raises if refused


def test_verify_defaults_to_the_system_clock() -> None:
    """Without now=, a timestamp from years ago is stale."""
    with pytest.raises(StaleTimestamp):
        verify(headers_for([NEW_SECRET], timestamp=1), BODY, [NEW_SECRET])


def replace(headers: dict[str, str], **changes: str | None) -> dict[str, str]:
    """Headers with some values swapped (None drops the header)."""
    names = {"timestamp": TIMESTAMP_HEADER, "signature": SIGNATURE_HEADER}
    result = dict(headers)
    for key, value in changes.items():
        if value is None:
            del result[names[key]]
        else:
            result[names[key]] = value
    return result


GOOD = headers_for([NEW_SECRET])


@pytest.mark.parametrize(
    ("headers", "body", "secrets", "now", "error", "message"),
    [
        (GOOD, BODY + b" ", [NEW_SECRET], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (GOOD, BODY.replace(b"claimed", b"upgraded"), [NEW_SECRET], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (GOOD, BODY, ["whsec_wrong"], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (replace(GOOD, timestamp=str(TIMESTAMP + 1)), BODY, [NEW_SECRET], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (replace(GOOD, signature=f"v0={NEW_SIGNATURE}"), BODY, [NEW_SECRET], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (replace(GOOD, signature=f"v1={NEW_SIGNATURE}="), BODY, [NEW_SECRET], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (replace(GOOD, signature=f"v1={NEW_SIGNATURE[:-1]}!{NEW_SIGNATURE[-1]}"), BODY, [NEW_SECRET],
         TIMESTAMP, BadSignature, "No v1 signature matches the body and a signing secret."),
        (replace(GOOD, signature=""), BODY, [NEW_SECRET], TIMESTAMP, BadSignature,
         "No v1 signature matches the body and a signing secret."),
        (GOOD, BODY, [NEW_SECRET], TIMESTAMP + TOLERANCE_SECONDS + 1, StaleTimestamp,
         "The timestamp is more than 300 seconds from the current time."),
        (GOOD, BODY, [NEW_SECRET], TIMESTAMP - TOLERANCE_SECONDS - 1, StaleTimestamp,
         "The timestamp is more than 300 seconds from the current time."),
        (replace(GOOD, timestamp=None), BODY, [NEW_SECRET], TIMESTAMP, MissingHeader,
         "The x-service-timestamp header is missing."),
        (replace(GOOD, signature=None), BODY, [NEW_SECRET], TIMESTAMP, MissingHeader,
         "The x-service-signature header is missing."),
        (replace(GOOD, timestamp="1782734400.0"), BODY, [NEW_SECRET], TIMESTAMP, MalformedHeader,
         "The x-service-timestamp header is malformed."),
        (replace(GOOD, timestamp="+1782734400"), BODY, [NEW_SECRET], TIMESTAMP, MalformedHeader,
         "The x-service-timestamp header is malformed."),
        (replace(GOOD, timestamp="1_782_734_400"), BODY, [NEW_SECRET], TIMESTAMP, MalformedHeader,
         "The x-service-timestamp header is malformed."),
    ],
    ids=[
        "body-appended", "body-altered", "wrong-secret", "timestamp-altered", "unknown-scheme",
        "padded-signature", "foreign-character", "empty-signature", "stale", "future",
        "no-timestamp", "no-signature", "fractional-timestamp", "signed-timestamp",
        "underscored-timestamp",
    ],
)  # fmt: skip
def test_verify_refuses(
    headers: dict[str, str],
    body: bytes,
    secrets: list[str],
    now: int,
    error: type[SignatureError],
    message: str,
) -> None:
    """Tampering, wrong secrets, replays, clock skew and missing headers are each refused."""
    with pytest.raises(error) as raised:
        verify(headers, body, secrets, now=now)
    assert str(raised.value) == message


def test_stale_timestamp_carries_the_times() -> None:
    """A StaleTimestamp says which timestamp, which clock and which tolerance were compared."""
    with pytest.raises(StaleTimestamp) as raised:
        verify(GOOD, BODY, [NEW_SECRET], now=TIMESTAMP + 301, tolerance=300)
    assert (raised.value.timestamp, raised.value.now, raised.value.tolerance) == (
        TIMESTAMP,
        TIMESTAMP + 301,
        300,
    )


@pytest.mark.parametrize("secrets", [[], [""], [NEW_SECRET, ""]])
def test_signing_refuses_empty_secrets(secrets: list[str]) -> None:
    """No secret, or an empty one, is a configuration bug, not a signature."""
    with pytest.raises(ValueError, match="at least one secret"):
        sign(BODY, secrets, TIMESTAMP)
    with pytest.raises(ValueError, match="at least one secret"):
        verify(GOOD, BODY, secrets, now=TIMESTAMP)


def test_signature_description_states_the_scheme() -> None:
    """The catalog's signature object names the algorithm, payload, headers and tolerance."""
    description = signature_description(
        test_vectors_url="https://rooms.example/api/v1/webhooks/test-vectors",
        guide_url="https://rooms.example/docs/webhooks/verifying-signatures",
    )
    assert list(description) == [
        "algorithm",
        "scheme",
        "signedPayload",
        "headers",
        "encoding",
        "timestampTolerance",
        "verification",
        "rotation",
        "secrets",
        "standardWebhooks",
        "testVectors",
        "guide",
    ]
    assert (description["algorithm"], description["scheme"], description["signedPayload"]) == (
        "HMAC-SHA256",
        "v1",
        "{timestamp}.{raw_body}",
    )
    assert isinstance(description["headers"], dict)
    assert list(description["headers"]) == [
        "x-service-event",
        "x-service-delivery",
        "x-service-timestamp",
        "x-service-signature",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    ]
    assert str(description["timestampTolerance"]).startswith("300 seconds")
    standard = description["standardWebhooks"]
    assert isinstance(standard, dict)
    assert (standard["specification"], standard["signedPayload"]) == (
        "https://www.standardwebhooks.com/",
        "{webhook-id}.{webhook-timestamp}.{raw_body}",
    )
    assert list(standard["libraries"]) == [
        "Python", "JavaScript / TypeScript", "Go", "Java", "Ruby", "PHP", "Rust", "C#",
    ]  # fmt: skip


# --- the Standard Webhooks scheme ----------------------------------------------------------------

# The specification's own example (its libraries' test suites sign exactly this).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

# Secrets as the service issues them now (whsec_ + base64 of 32 bytes), and one issued earlier.
WHSEC_NEW = "whsec_" + base64.b64encode(hashlib.sha256(b"new").digest()).decode()
WHSEC_OLD = "whsec_" + base64.b64encode(hashlib.sha256(b"old").digest()).decode()
LEGACY = "Xq3vJ0cN1s6Yb8e2Wm4R9tKp7Lz5Ha0Ud2Gf6Ji8Bo4"  # token_urlsafe(32) form, no prefix


def standard_headers(secrets: list[str], *, delivery_id: str = "dlv_1", timestamp: int = TIMESTAMP) -> dict[str, str]:
    headers = signature_headers(
        event="room.claimed", delivery_id=delivery_id, body=BODY, secrets=secrets, timestamp=timestamp
    )
    return {name: value for name, value in headers.items() if name.startswith("webhook-")}


def test_the_specification_example_signs_to_its_published_signature() -> None:
    """sign_standard reproduces the Standard Webhooks example byte for byte."""
    assert sign_standard(SPEC_ID, SPEC_BODY, [SPEC_SECRET], SPEC_TIMESTAMP) == SPEC_SIGNATURE
    headers = {"webhook-id": SPEC_ID, "webhook-timestamp": str(SPEC_TIMESTAMP), "webhook-signature": SPEC_SIGNATURE}
    verify_standard(headers, SPEC_BODY, [SPEC_SECRET], now=SPEC_TIMESTAMP)  # raises if refused


@pytest.mark.parametrize(
    ("secret", "key"),
    [
        (WHSEC_NEW, hashlib.sha256(b"new").digest()),
        (SPEC_SECRET, base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")),
        (LEGACY, LEGACY.encode()),
        ("ünïcode-sécret", "ünïcode-sécret".encode()),
        ("whsec_not_base64!", b"whsec_not_base64!"),  # not the format: the whole string's bytes
        ("whsec_", b"whsec_"),  # an empty key would sign with a public value
        ("whsec_YWJj", b"abc"),
    ],
)
def test_standard_key_decodes_whsec_secrets_and_takes_others_as_utf8(secret: str, key: bytes) -> None:
    """whsec_ + standard base64 is decoded as the specification says; any other secret is its UTF-8 bytes."""
    assert standard_key(secret) == key


@pytest.mark.parametrize("secret", [WHSEC_NEW, SPEC_SECRET, LEGACY, "ünïcode-sécret", "whsec_not_base64!"])
def test_the_library_takes_standard_webhooks_secret(secret: str) -> None:
    """Given standard_webhooks_secret(secret), the library signs exactly as the service does."""
    library_form = standard_webhooks_secret(secret)
    assert library_form.startswith("whsec_")
    if secret.startswith("whsec_") and secret != "whsec_not_base64!":
        assert library_form == secret  # issued secrets go to the library unchanged
    signed = Webhook(library_form).sign(SPEC_ID, datetime.fromtimestamp(SPEC_TIMESTAMP, UTC), SPEC_BODY.decode())
    assert signed == sign_standard(SPEC_ID, SPEC_BODY, [secret], SPEC_TIMESTAMP)


@given(
    key=st.binary(min_size=24, max_size=64),
    delivery_id=st.text(min_size=1, max_size=40),
    timestamp=st.integers(min_value=0, max_value=9_999_999_999),
    body=st.text(max_size=200),
)
def test_sign_standard_agrees_with_the_library(key: bytes, delivery_id: str, timestamp: int, body: str) -> None:
    """For any key, id, timestamp and UTF-8 body, the service and the library write the same v1 value."""
    secret = "whsec_" + base64.b64encode(key).decode()
    expected = Webhook(secret).sign(delivery_id, datetime.fromtimestamp(timestamp, UTC), body)
    assert sign_standard(delivery_id, body.encode(), [secret], timestamp) == expected


@pytest.mark.parametrize(
    "secrets", [[WHSEC_NEW], [WHSEC_NEW, WHSEC_OLD], [WHSEC_NEW, LEGACY], [LEGACY]], ids=["one", "rotation", "from-legacy", "legacy"]
)
def test_the_library_verifies_what_the_service_signs(secrets: list[str]) -> None:
    """A receiver holding any one live secret verifies with the library, at the library's own clock."""
    now = int(time.time())
    headers = standard_headers(secrets, timestamp=now)
    assert len(headers["webhook-signature"].split(" ")) == len(secrets)
    for secret in secrets:
        assert Webhook(standard_webhooks_secret(secret)).verify(BODY, headers) == {
            "eventId": "evt_01JZ8Q4M3V6T2K9P0R7S5W1X3Y", "event": "room.claimed",
        }  # fmt: skip
        verify_standard(headers, BODY, [secret], now=now)  # raises if refused
    with pytest.raises(WebhookVerificationError):
        Webhook(SPEC_SECRET).verify(BODY, headers)  # a secret the partner was never given


@pytest.mark.parametrize(
    ("signed_with", "verify_with"),
    [
        ([WHSEC_NEW], [WHSEC_NEW]),
        ([WHSEC_NEW], WHSEC_NEW),
        ([WHSEC_NEW, WHSEC_OLD], [WHSEC_OLD]),
        ([WHSEC_NEW, WHSEC_OLD], [WHSEC_OLD, WHSEC_NEW]),
        ([WHSEC_OLD], [WHSEC_NEW, WHSEC_OLD]),
        ([WHSEC_NEW, LEGACY], [LEGACY]),
    ],
)
def test_verify_standard_accepts_any_signature_under_any_secret(
    signed_with: list[str], verify_with: list[str] | str
) -> None:
    """During a rotation either secret verifies the Standard Webhooks signature, on either side."""
    verify_standard(standard_headers(signed_with), BODY, verify_with, now=TIMESTAMP)  # raises if refused


@pytest.mark.parametrize("offset", [-TOLERANCE_SECONDS, 0, TOLERANCE_SECONDS])
def test_verify_standard_accepts_timestamps_at_the_edge_of_tolerance(offset: int) -> None:
    """±300 s from the receiver's clock is still fresh in this scheme too."""
    verify_standard(standard_headers([WHSEC_NEW]), BODY, [WHSEC_NEW], now=TIMESTAMP + offset)


def test_verify_standard_reads_headers_case_insensitively() -> None:
    """Webhook-Id and WEBHOOK-SIGNATURE are the same headers."""
    headers = {name.title(): value for name, value in standard_headers([WHSEC_NEW]).items()}
    verify_standard(headers, BODY, [WHSEC_NEW], now=TIMESTAMP)  # raises if refused


STANDARD = standard_headers([WHSEC_NEW])
GOOD_STANDARD_SIGNATURE = STANDARD["webhook-signature"].removeprefix("v1,")
assert "+" in GOOD_STANDARD_SIGNATURE and "/" in GOOD_STANDARD_SIGNATURE  # see "base64url-spelling"


def swap(headers: dict[str, str], name: str, value: str | None) -> dict[str, str]:
    """Headers with one value swapped (None drops the header)."""
    result = {key: old for key, old in headers.items() if key != name}
    if value is not None:
        result[name] = value
    return result


MISMATCH = (BadSignature, "No v1 signature matches the body and a signing secret.")


@pytest.mark.parametrize(
    ("headers", "body", "secrets", "now", "expected"),
    [
        (STANDARD, BODY + b" ", [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (STANDARD, BODY, [WHSEC_OLD], TIMESTAMP, MISMATCH),
        (STANDARD, BODY, ["whsec_" + base64.b64encode(b"new").decode()], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-id", "dlv_2"), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-timestamp", str(TIMESTAMP + 1)), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-signature", f"v2,{GOOD_STANDARD_SIGNATURE}"), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-signature", f"v1={GOOD_STANDARD_SIGNATURE}"), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-signature", f"v1,{GOOD_STANDARD_SIGNATURE.rstrip('=')}"), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        # This digest has a "+" and a "/", so its base64url spelling is a different string.
        (swap(STANDARD, "webhook-signature", "v1," + base64.urlsafe_b64encode(base64.b64decode(GOOD_STANDARD_SIGNATURE)).decode()),
         BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-signature", "v1"), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (swap(STANDARD, "webhook-signature", ""), BODY, [WHSEC_NEW], TIMESTAMP, MISMATCH),
        (STANDARD, BODY, [WHSEC_NEW], TIMESTAMP + TOLERANCE_SECONDS + 1,
         (StaleTimestamp, "The timestamp is more than 300 seconds from the current time.")),
        (STANDARD, BODY, [WHSEC_NEW], TIMESTAMP - TOLERANCE_SECONDS - 1,
         (StaleTimestamp, "The timestamp is more than 300 seconds from the current time.")),
        (swap(STANDARD, "webhook-id", None), BODY, [WHSEC_NEW], TIMESTAMP,
         (MissingHeader, "The webhook-id header is missing.")),
        (swap(STANDARD, "webhook-timestamp", None), BODY, [WHSEC_NEW], TIMESTAMP,
         (MissingHeader, "The webhook-timestamp header is missing.")),
        (swap(STANDARD, "webhook-signature", None), BODY, [WHSEC_NEW], TIMESTAMP,
         (MissingHeader, "The webhook-signature header is missing.")),
        (swap(STANDARD, "webhook-timestamp", f"{TIMESTAMP}.0"), BODY, [WHSEC_NEW], TIMESTAMP,
         (MalformedHeader, "The webhook-timestamp header is malformed.")),
        (swap(STANDARD, "webhook-timestamp", "\u0661" * 10), BODY, [WHSEC_NEW], TIMESTAMP,
         (MalformedHeader, "The webhook-timestamp header is malformed.")),
    ],
    ids=[
        "body-appended", "other-secret", "key-not-the-secret-string", "id-altered", "timestamp-altered",
        "unknown-version", "x-service-spelling", "unpadded", "base64url-spelling", "no-value", "empty",
        "stale", "future", "no-id", "no-timestamp", "no-signature", "fractional-timestamp",
        "non-ascii-digits",
    ],
)  # fmt: skip
def test_verify_standard_refuses(
    headers: dict[str, str],
    body: bytes,
    secrets: list[str],
    now: int,
    expected: tuple[type[SignatureError], str],
) -> None:
    """Tampering (body, id, timestamp), wrong keys, replays and malformed headers are each refused."""
    error, message = expected
    with pytest.raises(error) as raised:
        verify_standard(headers, body, secrets, now=now)
    assert str(raised.value) == message


def test_the_x_service_signature_does_not_pass_for_the_standard_one() -> None:
    """Each verifier reads only its own headers: x-service headers alone satisfy only verify."""
    headers = headers_for([WHSEC_NEW])
    x_service = {name: value for name, value in headers.items() if name.startswith("x-service-")}
    verify(x_service, BODY, [WHSEC_NEW], now=TIMESTAMP)  # raises if refused
    with pytest.raises(MissingHeader):
        verify_standard(x_service, BODY, [WHSEC_NEW], now=TIMESTAMP)
