"""Signatures on webhook deliveries: the service signs with it, partners and tests verify with it.

Every attempt carries two signatures of the same body, so a partner may check either:

- ``x-service-signature``: over ``{timestamp}.{raw_body}``, one ``v1=<sig>`` per live partner
  secret (newest first during a rotation overlap), comma-separated, where ``sig`` is the unpadded
  base64url HMAC-SHA256 of that payload keyed with the secret's UTF-8 bytes. itsdangerous verifies
  it: a ``Signer`` with SHA-256 and no key derivation is exactly that HMAC, checked in constant time
  against a list of secrets, and its base64url is the encoding signed values carry.
- ``webhook-signature``, the Standard Webhooks scheme (standardwebhooks.com), which its maintained
  libraries verify in many languages: over ``{webhook-id}.{webhook-timestamp}.{raw_body}``, one
  ``v1,<sig>`` per live secret, space-separated, newest first, where ``sig`` is the padded standard
  base64 HMAC-SHA256 keyed with ``standard_key(secret)``: the decoded bytes of a ``whsec_`` secret,
  as that specification defines them, or the UTF-8 bytes of any other secret (secrets issued
  before ``whsec_`` ones). ``webhook-id`` is the delivery id, so that scheme signs it too.

Depends only on the standard library and itsdangerous, so a partner can vendor this file.

    SignatureError
    ├── MissingHeader     a signing header is absent
    ├── MalformedHeader   the timestamp is not Unix seconds
    ├── BadSignature      no v1 signature matches any secret
    └── StaleTimestamp    the signature is genuine but the timestamp is outside the tolerance
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import time
from collections.abc import Mapping, Sequence

from itsdangerous import Signer, base64_encode

EVENT_HEADER = "x-service-event"
DELIVERY_HEADER = "x-service-delivery"
TIMESTAMP_HEADER = "x-service-timestamp"
SIGNATURE_HEADER = "x-service-signature"

# The Standard Webhooks headers: the delivery id, the same timestamp, the second signature.
STANDARD_ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"

SCHEME = "v1"
# docs/architecture.md "Signed delivery": receivers accept a timestamp within ±300 s of their clock
# (the Standard Webhooks libraries use the same five minutes).
TOLERANCE_SECONDS = 300
# Standard Webhooks: a secret is this prefix and the standard base64 of the key bytes.
SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
STANDARD_SPECIFICATION = "https://www.standardwebhooks.com/"

_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # ASCII digits only: int() would also take " +1_0 "
# 32 HMAC-SHA256 bytes are 43 unpadded base64url characters; anything else cannot match, and
# checking first keeps the lenient base64 decoder from reading look-alike spellings as equal.
_SIGNATURE = re.compile(r"[A-Za-z0-9_-]{43}")
# The same 32 bytes in padded standard base64 are 44 characters, the last one "=".
_STANDARD_SIGNATURE = re.compile(r"[A-Za-z0-9+/]{43}=")


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


# Keyed HMACs (signing) and Signers (verifying) are built once per list of secrets and reused:
# building one costs more than the HMAC it computes, and the worker signs every attempt with the
# same few partner secrets. Neither holds anything but its keys, so sharing one is safe.
_SIGNERS_CACHED = 1024  # secret lists at a time: a partner has one, or two during a rotation


def _checked(secrets: tuple[str, ...]) -> tuple[str, ...]:
    # An empty list would verify nothing and an empty secret would sign with a public key.
    if not secrets or not all(secrets):
        raise ValueError("signing needs at least one secret, and no empty ones")
    return secrets


def _new_signer(secrets: Sequence[str]) -> Signer:
    return Signer(list(secrets), key_derivation="none", digest_method=hashlib.sha256)


@functools.lru_cache(maxsize=_SIGNERS_CACHED)
def _verifier(secrets: tuple[str, ...]) -> Signer:
    """One signer holding every secret: verify_signature tries each of its keys."""
    return _new_signer(_checked(secrets))


def _signed_payload(timestamp: int | str, body: bytes) -> bytes:
    return f"{timestamp}.".encode() + body


def standard_key(secret: str) -> bytes:
    """The Standard Webhooks key of ``secret``.

    A ``whsec_`` secret whose rest is standard base64 (as the service issues them) is keyed with
    the decoded bytes, as the Standard Webhooks specification defines. Any other secret, such as
    one issued before ``whsec_`` secrets, is keyed with its UTF-8 bytes: a Standard Webhooks
    library then takes ``standard_webhooks_secret(secret)``.
    """
    if secret.startswith(SECRET_PREFIX):
        try:
            key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except binascii.Error:
            key = b""
        if key:
            return key
    return secret.encode("utf-8")


def secret_digest(secret: str) -> str:
    """The SHA-256 of ``secret``'s Standard Webhooks key, in hex: what the service keeps of every
    secret it issued, after the secret itself is deleted, to know it again in a partner's answer
    (``send``). A key of 32 random bytes cannot be found from it."""
    return hashlib.sha256(standard_key(secret)).hexdigest()


def standard_webhooks_secret(secret: str) -> str:
    """What to hand a Standard Webhooks library: ``whsec_`` + the standard base64 of the key.

    The secret itself for every secret the service issues now; the converted form for older ones.
    """
    return SECRET_PREFIX + base64.b64encode(standard_key(secret)).decode("ascii")


@functools.lru_cache(maxsize=_SIGNERS_CACHED)
def _standard_keys(secrets: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(standard_key(secret) for secret in _checked(secrets))


def _standard_payload(delivery_id: str, timestamp: int | str, body: bytes) -> bytes:
    return f"{delivery_id}.{timestamp}.".encode() + body


def _standard_digest(key: bytes, payload: bytes) -> bytes:
    return hmac.digest(key, payload, hashlib.sha256)


# The worker signs every attempt twice on its busy event loop, so each secret's HMAC is keyed once
# (for either scheme) and every payload is signed on a copy of that keyed state, which skips the
# key schedule and the objects a Signer builds per call. Inside the worker's loop that took signing
# from 13 to 7.5 µs an attempt (benchmarks/signing.py measures the two side by side); verifying
# stays with itsdangerous's Signer, which tests/test_signing.py holds to the same bytes.
@functools.lru_cache(maxsize=_SIGNERS_CACHED)
def _keyed(secrets: tuple[str, ...]) -> tuple[tuple[hmac.HMAC, hmac.HMAC], ...]:
    """Per secret, in order: its HMAC-SHA256 keyed for ``x-service-signature`` and for
    ``webhook-signature``; copied for each payload, never updated themselves."""
    return tuple(
        (
            hmac.new(secret.encode("utf-8"), digestmod=hashlib.sha256),
            hmac.new(standard_key(secret), digestmod=hashlib.sha256),
        )
        for secret in _checked(secrets)
    )


def _digest(keyed: hmac.HMAC, head: bytes, body: bytes) -> bytes:
    mac = keyed.copy()
    mac.update(head)
    mac.update(body)
    return mac.digest()


def _service_value(keyed: Sequence[tuple[hmac.HMAC, hmac.HMAC]], head: bytes, body: bytes) -> str:
    return ",".join(
        [f"{SCHEME}={base64_encode(_digest(mac, head, body)).decode('ascii')}" for mac, _ in keyed]
    )


def _standard_value(keyed: Sequence[tuple[hmac.HMAC, hmac.HMAC]], head: bytes, body: bytes) -> str:
    return " ".join(
        [f"{SCHEME},{base64.b64encode(_digest(mac, head, body)).decode('ascii')}" for _, mac in keyed]
    )


def sign(body: bytes, secrets: Sequence[str], timestamp: int) -> str:
    """The ``x-service-signature`` value: ``v1=<sig>`` per secret, in the order given (newest first)."""
    # _keyed refuses an empty list or secret before anything is signed.
    return _service_value(_keyed(tuple(secrets)), f"{timestamp}.".encode(), body)


def sign_standard(delivery_id: str, body: bytes, secrets: Sequence[str], timestamp: int) -> str:
    """The ``webhook-signature`` value: ``v1,<sig>`` per secret, space-separated, in the order given."""
    return _standard_value(_keyed(tuple(secrets)), f"{delivery_id}.{timestamp}.".encode(), body)


def signature_headers(
    *, event: str, delivery_id: str, body: bytes, secrets: Sequence[str], timestamp: int
) -> dict[str, str]:
    """Every signing header of a delivery; the service, the tests and partners build them the same way."""
    stamp = str(timestamp)
    keyed = _keyed(tuple(secrets))
    head = f"{stamp}.".encode()
    return {
        EVENT_HEADER: event,
        DELIVERY_HEADER: delivery_id,
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: _service_value(keyed, head, body),
        STANDARD_ID_HEADER: delivery_id,
        STANDARD_TIMESTAMP_HEADER: stamp,
        STANDARD_SIGNATURE_HEADER: _standard_value(keyed, f"{delivery_id}.".encode() + head, body),
    }


def _lowered(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _required(lowered: Mapping[str, str], name: str) -> str:
    value = lowered.get(name)
    if value is None:
        raise MissingHeader(name)
    return value


def _timestamp(lowered: Mapping[str, str], name: str) -> str:
    raw = _required(lowered, name).strip()
    if not _TIMESTAMP.fullmatch(raw):
        raise MalformedHeader(name)
    return raw


def _secret_tuple(secrets: Sequence[str] | str) -> tuple[str, ...]:
    return (secrets,) if isinstance(secrets, str) else tuple(secrets)


def _check_fresh(raw_timestamp: str, now: float | None, tolerance: float) -> None:
    timestamp = int(raw_timestamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise StaleTimestamp(timestamp, current, tolerance)


def verify(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str] | str,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_SECONDS,
) -> None:
    """Accept the delivery by its ``x-service-signature`` or raise ``SignatureError``.

    ``body`` must be the raw bytes received, before any JSON parsing. Any ``v1`` signature may
    match any of ``secrets``, so a receiver holding both secrets during a rotation keeps working.
    The signature is checked before the clock, so ``StaleTimestamp`` only ever reports a genuine
    delivery that arrived too late (a replay) or from a skewed clock.
    """
    lowered = _lowered(headers)
    _required(lowered, TIMESTAMP_HEADER)
    raw_signatures = _required(lowered, SIGNATURE_HEADER)
    raw_timestamp = _timestamp(lowered, TIMESTAMP_HEADER)

    signer = _verifier(_secret_tuple(secrets))
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
    _check_fresh(raw_timestamp, now, tolerance)


def verify_standard(
    headers: Mapping[str, str],
    body: bytes,
    secrets: Sequence[str] | str,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_SECONDS,
) -> None:
    """Accept the delivery by its Standard Webhooks ``webhook-signature`` or raise ``SignatureError``.

    The same rules as ``verify``, for the other scheme: ``secrets`` are the secrets as issued
    (``standard_key`` turns each into its key), and the delivery id in ``webhook-id`` is signed.
    """
    lowered = _lowered(headers)
    delivery_id = _required(lowered, STANDARD_ID_HEADER)
    _required(lowered, STANDARD_TIMESTAMP_HEADER)
    raw_signatures = _required(lowered, STANDARD_SIGNATURE_HEADER)
    raw_timestamp = _timestamp(lowered, STANDARD_TIMESTAMP_HEADER)

    keys = _standard_keys(_secret_tuple(secrets))
    payload = _standard_payload(delivery_id, raw_timestamp, body)
    candidates = [
        base64.b64decode(value)
        for scheme, _, value in (item.partition(",") for item in raw_signatures.split())
        if scheme == SCHEME and _STANDARD_SIGNATURE.fullmatch(value)
    ]
    expected = [_standard_digest(key, payload) for key in keys]
    # Every pair is compared, so timing does not reveal which one (or which secret) matched.
    matched = [hmac.compare_digest(mine, theirs) for mine in expected for theirs in candidates]
    if not any(matched):
        raise BadSignature()
    _check_fresh(raw_timestamp, now, tolerance)


# Standard Webhooks libraries by language, as standardwebhooks.com lists them: package and registry.
STANDARD_LIBRARIES = {
    "Python": "standardwebhooks (PyPI)",
    "JavaScript / TypeScript": "standardwebhooks (npm)",
    "Go": "github.com/standard-webhooks/standard-webhooks/libraries/go (Go module)",
    "Java": "com.standardwebhooks:standardwebhooks (Maven Central)",
    "Ruby": "standardwebhooks (RubyGems)",
    "PHP": "standard-webhooks/standard-webhooks (Packagist)",
    "Rust": "standardwebhooks (crates.io)",
    "C#": "StandardWebhooks (NuGet)",
}


def signature_description(*, test_vectors_url: str, guide_url: str) -> dict[str, object]:
    """The ``signature`` member of the catalog documents: both schemes, and how secrets key them.

    ``test_vectors_url`` and ``guide_url`` are absolute: the published test vectors and the
    partner page on verifying signatures.
    """
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
            STANDARD_ID_HEADER: f"Standard Webhooks: the same value as {DELIVERY_HEADER}.",
            STANDARD_TIMESTAMP_HEADER: f"Standard Webhooks: the same value as {TIMESTAMP_HEADER}.",
            STANDARD_SIGNATURE_HEADER: (
                "Standard Webhooks: space-separated v1,<signature> values, one per live partner "
                "secret, newest first."
            ),
        },
        "encoding": (
            "x-service-signature: HMAC-SHA256 keyed with the UTF-8 bytes of the whole partner "
            "secret (whsec_ included) over the ASCII timestamp, a dot and the raw request body "
            "bytes; the 32-byte digest is base64url-encoded without padding."
        ),
        "timestampTolerance": (
            f"{TOLERANCE_SECONDS} seconds: reject a delivery whose timestamp (x-service-timestamp, "
            "equal to webhook-timestamp) is further than this from your clock, in either direction."
        ),
        "verification": (
            "Check either scheme. Compute the signature over the raw body before parsing it, "
            "compare in constant time, and accept when any v1 value matches any secret you hold; "
            "then check the timestamp and process eventId idempotently. x-service-signature does "
            "not sign the event and delivery headers (webhook-signature signs the delivery id): "
            "trust the event member of the signed body. Test vectors to check a verifier against: "
            f"{test_vectors_url}. Code to copy, in Python and Node.js: {guide_url}."
        ),
        "rotation": (
            "Secrets are issued at partner onboarding and rotated through admin controls. After a "
            "rotation the previous secret keeps signing for an overlap window, so deliveries carry "
            "one v1 signature per live secret in each scheme; accept either secret until the "
            "overlap ends."
        ),
        "secrets": (
            f"Secrets are issued as {SECRET_PREFIX} followed by the standard base64 of 32 random "
            "bytes: pass one unchanged to a Standard Webhooks library. A secret without that "
            "prefix, issued earlier, keys webhook-signature with its UTF-8 bytes: pass a library "
            f"{SECRET_PREFIX} followed by the standard base64 of those bytes, or ask for a "
            "rotation to receive a new secret."
        ),
        "standardWebhooks": {
            "specification": STANDARD_SPECIFICATION,
            "headers": [STANDARD_ID_HEADER, STANDARD_TIMESTAMP_HEADER, STANDARD_SIGNATURE_HEADER],
            "signedPayload": "{webhook-id}.{webhook-timestamp}.{raw_body}",
            "encoding": (
                "HMAC-SHA256 keyed with the secret's key bytes (the base64-decoded part after "
                f"{SECRET_PREFIX}) over the delivery id, a dot, the timestamp, a dot and the raw "
                "body bytes; the 32-byte digest in standard base64 with padding, written "
                "v1,<signature>."
            ),
            "libraries": dict(STANDARD_LIBRARIES),
        },
        "testVectors": test_vectors_url,
        "guide": guide_url,
    }
