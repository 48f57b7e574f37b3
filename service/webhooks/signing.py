"""Signatures on webhook deliveries: the service signs with it, partners and tests verify with it.

One signed payload per attempt, ``{timestamp}.{raw_body}``; one ``v1=<sig>`` per live partner
secret (newest first during a rotation overlap), where ``sig`` is the unpadded base64url
HMAC-SHA256 of that payload keyed with the secret's UTF-8 bytes. itsdangerous is the HMAC
primitive: a ``Signer`` with SHA-256 and no key derivation is exactly that HMAC, verified in
constant time against a list of secrets.

Depends only on the standard library and itsdangerous, so a partner can vendor this file.

    SignatureError
    ├── MissingHeader     a signing header is absent
    ├── MalformedHeader   the timestamp is not Unix seconds
    ├── BadSignature      no v1 signature matches any secret
    └── StaleTimestamp    the signature is genuine but the timestamp is outside the tolerance
"""

from __future__ import annotations

import functools
import hashlib
import re
import time
from collections.abc import Mapping, Sequence

from itsdangerous import Signer

EVENT_HEADER = "x-service-event"
DELIVERY_HEADER = "x-service-delivery"
TIMESTAMP_HEADER = "x-service-timestamp"
SIGNATURE_HEADER = "x-service-signature"

SCHEME = "v1"
# DESIGN.md "Signed delivery": receivers accept a timestamp within ±300 s of their clock.
TOLERANCE_SECONDS = 300

_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # ASCII digits only: int() would also take " +1_0 "
# 32 HMAC-SHA256 bytes are 43 unpadded base64url characters; anything else cannot match, and
# checking first keeps the lenient base64 decoder from reading look-alike spellings as equal.
_SIGNATURE = re.compile(r"[A-Za-z0-9_-]{43}")


class SignatureError(Exception):
    """The delivery cannot be trusted; ``str(error)`` says why, without secret material."""


class MissingHeader(SignatureError):
    def __init__(self, header: str) -> None:
        super().__init__(f"The {header} header is missing.")
        self.header = header


class MalformedHeader(SignatureError):
    def __init__(self, header: str) -> None:
        super().__init__(f"The {header} header is malformed.")
        self.header = header


class BadSignature(SignatureError):
    def __init__(self) -> None:
        super().__init__("No v1 signature matches the body and a signing secret.")


class StaleTimestamp(SignatureError):
    def __init__(self, timestamp: int, now: float, tolerance: float) -> None:
        super().__init__(f"The timestamp is more than {tolerance:g} seconds from the current time.")
        self.timestamp = timestamp
        self.now = now
        self.tolerance = tolerance


# Signers are built once per secret (or list of secrets) and reused: building one costs more than
# the HMAC it computes, and the worker signs every attempt with the same few partner secrets. A
# Signer holds nothing but its keys and settings, so sharing one is safe.
_SIGNERS_CACHED = 1024  # secret lists at a time: a partner has one, or two during a rotation


def _checked(secrets: tuple[str, ...]) -> tuple[str, ...]:
    # An empty list would verify nothing and an empty secret would sign with a public key.
    if not secrets or not all(secrets):
        raise ValueError("signing needs at least one secret, and no empty ones")
    return secrets


def _new_signer(secrets: Sequence[str]) -> Signer:
    return Signer(list(secrets), key_derivation="none", digest_method=hashlib.sha256)


@functools.lru_cache(maxsize=_SIGNERS_CACHED)
def _signers(secrets: tuple[str, ...]) -> tuple[Signer, ...]:
    """One signer per secret, in order: Signer.get_signature always uses its newest key."""
    return tuple(_new_signer((secret,)) for secret in _checked(secrets))


@functools.lru_cache(maxsize=_SIGNERS_CACHED)
def _verifier(secrets: tuple[str, ...]) -> Signer:
    """One signer holding every secret: verify_signature tries each of its keys."""
    return _new_signer(_checked(secrets))


def _signed_payload(timestamp: int | str, body: bytes) -> bytes:
    return f"{timestamp}.".encode() + body


def sign(body: bytes, secrets: Sequence[str], timestamp: int) -> str:
    """The ``x-service-signature`` value: ``v1=<sig>`` per secret, in the order given (newest first)."""
    signers = _signers(tuple(secrets))  # refuses an empty list or secret before anything is signed
    payload = _signed_payload(timestamp, body)
    return ",".join([f"{SCHEME}={signer.get_signature(payload).decode('ascii')}" for signer in signers])


def signature_headers(
    *, event: str, delivery_id: str, body: bytes, secrets: Sequence[str], timestamp: int
) -> dict[str, str]:
    """All four delivery headers; the service, the tests and partners build them the same way."""
    return {
        EVENT_HEADER: event,
        DELIVERY_HEADER: delivery_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(body, secrets, timestamp),
    }


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str] | str,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_SECONDS,
) -> None:
    """Accept the delivery or raise ``SignatureError``.

    ``body`` must be the raw bytes received, before any JSON parsing. Any ``v1`` signature may
    match any of ``secrets``, so a receiver holding both secrets during a rotation keeps working.
    The signature is checked before the clock, so ``StaleTimestamp`` only ever reports a genuine
    delivery that arrived too late (a replay) or from a skewed clock.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    raw_timestamp = lowered.get(TIMESTAMP_HEADER)
    if raw_timestamp is None:
        raise MissingHeader(TIMESTAMP_HEADER)
    raw_signatures = lowered.get(SIGNATURE_HEADER)
    if raw_signatures is None:
        raise MissingHeader(SIGNATURE_HEADER)
    raw_timestamp = raw_timestamp.strip()
    if not _TIMESTAMP.fullmatch(raw_timestamp):
        raise MalformedHeader(TIMESTAMP_HEADER)

    signer = _verifier((secrets,) if isinstance(secrets, str) else tuple(secrets))
    payload = _signed_payload(raw_timestamp, body)
    candidates = [
        value
        for scheme, _, value in (item.strip().partition("=") for item in raw_signatures.split(","))
        if scheme == SCHEME and _SIGNATURE.fullmatch(value)
    ]
    # Every candidate is checked, so timing does not reveal which one (or which secret) matched.
    matched = [signer.verify_signature(payload, candidate) for candidate in candidates]
    if not any(matched):
        raise BadSignature()

    timestamp = int(raw_timestamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise StaleTimestamp(timestamp, current, tolerance)


def signature_description() -> dict[str, object]:
    """The ``signature`` member of the catalog documents."""
    return {
        "algorithm": "HMAC-SHA256",
        "scheme": SCHEME,
        "signedPayload": "{timestamp}.{raw_body}",
        "headers": {
            EVENT_HEADER: "The event kind id, as in the payload's event member.",
            DELIVERY_HEADER: (
                "Delivery id, one per event and partner, the same on every retry of that delivery."
            ),
            TIMESTAMP_HEADER: (
                "Unix time in whole seconds when this attempt was signed; fresh on each attempt."
            ),
            SIGNATURE_HEADER: (
                "Comma-separated v1=<signature> values, one per live partner secret, newest first."
            ),
        },
        "encoding": (
            "HMAC-SHA256 keyed with the UTF-8 bytes of the partner secret over the ASCII timestamp, "
            "a dot and the raw request body bytes; the 32-byte digest is base64url-encoded without "
            "padding."
        ),
        "timestampTolerance": (
            f"{TOLERANCE_SECONDS} seconds: reject a delivery whose x-service-timestamp is further "
            "than this from your clock, in either direction."
        ),
        "verification": (
            "Compute the signature over the raw body before parsing it, compare in constant time, "
            "and accept when any v1 value matches any secret you hold; then check the timestamp "
            "and process eventId idempotently. The event and delivery headers are not signed: "
            "trust the event member of the signed body."
        ),
        "rotation": (
            "Secrets are issued at partner onboarding and rotated through admin controls. After a "
            "rotation the previous secret keeps signing for an overlap window, so deliveries carry "
            "one v1 signature per live secret; accept either secret until the overlap ends."
        ),
    }
