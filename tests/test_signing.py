"""Webhook signatures: fixed vectors from the standard library, and every way verification refuses."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from service.webhooks.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
    BadSignature,
    MalformedHeader,
    MissingHeader,
    SignatureError,
    StaleTimestamp,
    sign,
    signature_description,
    signature_headers,
    verify,
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


def test_signature_headers_carries_all_four_headers() -> None:
    """The helper partners and tests share yields exactly the four delivery headers."""
    assert headers_for([NEW_SECRET, OLD_SECRET]) == {
        EVENT_HEADER: "room.claimed",
        DELIVERY_HEADER: "dlv_1",
        TIMESTAMP_HEADER: "1782734400",
        SIGNATURE_HEADER: f"v1={NEW_SIGNATURE},v1={OLD_SIGNATURE}",
    }
    assert [EVENT_HEADER, DELIVERY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER] == [
        "x-service-event",
        "x-service-delivery",
        "x-service-timestamp",
        "x-service-signature",
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
    description = signature_description()
    assert list(description) == [
        "algorithm",
        "scheme",
        "signedPayload",
        "headers",
        "encoding",
        "timestampTolerance",
        "verification",
        "rotation",
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
    ]
    assert str(description["timestampTolerance"]).startswith("300 seconds")
