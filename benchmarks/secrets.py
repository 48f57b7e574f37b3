"""Claiming and signing deliveries with partner secrets sealed at rest, beside the same with plaintext.

    python -m benchmarks.secrets [--partners 10] [--events 2000] [--rounds 4] [--database-url URL]

One database (a SQLite file of its own, or ``--database-url``) holds ``--partners`` partners and
``--events`` events, one delivery each per partner. A round makes every delivery due again, then
claims them all in batches of the worker's size (``claim.claim_due``) and signs each claimed job
as the sender does (``signing.signature_headers``, every live secret): the worker's path minus the
network. The stored secrets are sealed (``fernet:`` tokens, opened once per partner per claim) or
plaintext (what the column held before sealing, passed through unopened), alternating the two
(ABBA) for ``--rounds`` rounds in one process, so load from anything else on the machine hits
both alike. Printed: the medians of deliveries per second and the ratio sealed / plaintext.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select, update

from service.db.engine import create_engine, migrate
from service.db.tables import deliveries, partner_secrets
from service.events import parse_event
from service.keyring import Keyring, parse_keys
from service.states import DeliveryStatus
from service.webhooks import outbox, partners
from service.webhooks.claim import claim_due
from service.webhooks.signing import signature_headers
from service.webhooks.worker import BATCH

KEY = "BQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU="  # 32 bytes of 0x05: a benchmark's own key
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=35)


async def setup(database_url: str, partner_count: int, event_count: int, keyring: Keyring) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            for n in range(partner_count):
                new = partners.NewPartner(
                    name=f"bench {n}", url=f"https://bench{n}.example/hook", events=None
                )
                await partners.create_partner(conn, new, now=NOW, keyring=keyring)
        for start in range(0, event_count, 500):
            async with engine.begin() as conn:
                for index in range(start, min(event_count, start + 500)):
                    event = parse_event(
                        {"event": "platform.milestone", "milestone": f"m{index}", "value": index}, now=NOW
                    )
                    await outbox.publish(conn, event, now=NOW)
    finally:
        await engine.dispose()


async def store(database_url: str, keyring: Keyring, *, sealed: bool) -> None:
    """Every stored secret sealed, or plaintext as before sealing."""
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:
            rows = (await conn.execute(select(partner_secrets.c.id, partner_secrets.c.secret))).all()
            for row in rows:
                plain = keyring.open(row.secret)
                value = keyring.seal(plain) if sealed else plain
                await conn.execute(
                    update(partner_secrets).where(partner_secrets.c.id == row.id).values(secret=value)
                )
    finally:
        await engine.dispose()


async def claim_and_sign(database_url: str, keyring: Keyring, round_number: int) -> tuple[int, float]:
    """Make every delivery due, then claim and sign them all; (deliveries, seconds)."""
    engine = create_engine(database_url)
    now = NOW + timedelta(hours=round_number)  # each round's leases are past the previous one's
    try:
        async with engine.begin() as conn:
            await conn.execute(
                update(deliveries).values(
                    status=DeliveryStatus.PENDING, next_attempt_at=now, claim_token=None, claimed_until=None
                )
            )
        signed = 0
        started = time.perf_counter()
        while True:
            async with engine.begin() as conn:
                jobs = await claim_due(
                    conn, now=now, limit=BATCH, lease=LEASE, default_cap=10_000, keyring=keyring
                )
            if not jobs:
                break
            for job in jobs:
                signature_headers(
                    event=job.kind,
                    delivery_id=job.delivery_id,
                    body=job.body,
                    secrets=job.secrets,
                    timestamp=int(now.timestamp()),
                )
                signed += 1
        return signed, time.perf_counter() - started
    finally:
        await engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.secrets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--partners", type=int, default=10)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--database-url", help="default: a SQLite file of its own")
    args = parser.parse_args(argv)
    keyring = parse_keys(KEY)
    rates: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as workdir:
        url = args.database_url or f"sqlite:///{Path(workdir) / 'secrets.db'}"
        migrate(url)
        asyncio.run(setup(url, args.partners, args.events, keyring))
        number = 0
        for _ in range(args.rounds):
            for sealed in (False, True, True, False):  # ABBA
                asyncio.run(store(url, keyring, sealed=sealed))
                number += 1
                count, seconds = asyncio.run(claim_and_sign(url, keyring, number))
                assert count == args.partners * args.events, count
                rates[sealed].append(count / seconds)
    plain, sealed_rate = statistics.median(rates[False]), statistics.median(rates[True])
    print(
        f"claim + sign, {args.partners} partners x {args.events} events, {args.rounds} ABBA rounds (medians)"
    )
    print(f"  plaintext secrets: {plain:,.0f} deliveries/s")
    print(f"  sealed secrets:    {sealed_rate:,.0f} deliveries/s")
    print(f"  ratio sealed / plaintext: {sealed_rate / plain:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
