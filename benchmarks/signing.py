"""Signing deliveries: the service's keyed HMACs beside itsdangerous Signers, the same bytes.

    python -m benchmarks.signing [--deliveries 20000] [--rounds 6] [--secrets 1]

Each side signs the same deliveries (distinct ids and bodies of the size the catalog's events
have) with both schemes and the same partner secrets (``--secrets`` of them, newest first, as
during a rotation):

- baseline: the straightforward way, an itsdangerous ``Signer`` per secret (built once and
  reused) for ``x-service-signature`` and a one-shot ``hmac.digest`` for ``webhook-signature``;
- service: ``signing.signature_headers``, each secret keyed once and its state copied per payload.

Both must produce the same headers byte for byte (checked first). The sides alternate (ABBA) for
``--rounds`` rounds; printed are the medians of signatures per second and the ratio service /
baseline. The worker signs on an event loop busy with hundreds of connections, where the gap is
wider than in this tight loop (docs/benchmarks.md, "Where a delivery's time goes").
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import hmac
import statistics
import time
from collections.abc import Callable, Sequence

from itsdangerous import Signer

from service.webhooks.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    STANDARD_ID_HEADER,
    STANDARD_SIGNATURE_HEADER,
    STANDARD_TIMESTAMP_HEADER,
    TIMESTAMP_HEADER,
    signature_headers,
    standard_key,
)

SECRETS = (  # bench keys
    "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    "whsec_ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=",
)
TIMESTAMP = 1_795_000_000
Sign = Callable[[str, bytes, Sequence[str]], dict[str, str]]


@functools.lru_cache
def _signers(secrets: tuple[str, ...]) -> list[Signer]:
    return [Signer(secret, key_derivation="none", digest_method=hashlib.sha256) for secret in secrets]


def baseline(delivery_id: str, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """Both signatures the plain way: each secret's Signer, a one-shot HMAC per secret."""
    stamp = str(TIMESTAMP)
    service = ",".join(
        "v1=" + signer.get_signature(f"{stamp}.".encode() + body).decode("ascii")
        for signer in _signers(tuple(secrets))
    )
    payload = f"{delivery_id}.{stamp}.".encode() + body
    standard = " ".join(
        "v1," + base64.b64encode(hmac.digest(standard_key(secret), payload, "sha256")).decode("ascii")
        for secret in secrets
    )
    return {
        EVENT_HEADER: "room.trending",
        DELIVERY_HEADER: delivery_id,
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: service,
        STANDARD_ID_HEADER: delivery_id,
        STANDARD_TIMESTAMP_HEADER: stamp,
        STANDARD_SIGNATURE_HEADER: standard,
    }


def service(delivery_id: str, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    return signature_headers(
        event="room.trending", delivery_id=delivery_id, body=body, secrets=secrets, timestamp=TIMESTAMP
    )


def deliveries(count: int) -> list[tuple[str, bytes]]:
    """Distinct delivery ids and bodies of about 600 bytes, as a room.trending event's payload is."""
    filler = "x" * 480
    return [
        (f"dlv_{index:026d}", f'{{"eventId":"evt_{index:026d}","room":"{filler}","n":{index}}}'.encode())
        for index in range(count)
    ]


def rate(sign: Sign, work: list[tuple[str, bytes]], secrets: Sequence[str]) -> float:
    started = time.perf_counter()
    for delivery_id, body in work:
        sign(delivery_id, body, secrets)
    return len(work) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deliveries", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--secrets", type=int, choices=(1, 2), default=1)
    args = parser.parse_args(argv)
    secrets = SECRETS[: args.secrets]
    work = deliveries(args.deliveries)
    for delivery_id, body in work[:100]:
        if service(delivery_id, body, secrets) != baseline(delivery_id, body, secrets):
            print("the service's signatures differ from the baseline's")
            return 1
    rates: dict[str, list[float]] = {"baseline": [], "service": []}
    for round_number in range(args.rounds):
        order = ("baseline", "service") if round_number % 2 == 0 else ("service", "baseline")
        for side in order:
            rates[side].append(rate(baseline if side == "baseline" else service, work, secrets))
    base, own = statistics.median(rates["baseline"]), statistics.median(rates["service"])
    what = f"{args.deliveries} deliveries with {args.secrets} secret(s)"
    print(f"signing {what}, both schemes, {args.rounds} rounds")
    print(f"  baseline (Signers):      {base:9.0f}/s  {1e6 / base:5.2f} us")
    print(f"  service (keyed, copied): {own:9.0f}/s  {1e6 / own:5.2f} us")
    print(f"  ratio service / baseline: {own / base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
