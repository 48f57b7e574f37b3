"""Two signed deliveries as a partner's endpoint received them from the real service.

The signature notebook checks its plain-Python verifier against them: ``capture_signed_deliveries``
runs the service on a fresh database and a fixed clock, onboards a partner on loopback, publishes
one event, rotates the partner's secret, publishes another, and returns both requests.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from service.clock import ManualClock
from service.demo.driver import Response, send_due, serve
from service.demo.receivers import Received, Receiver
from service.ids import SeededIds
from service.settings import Settings

# After the catalog examples it publishes (room.claimed at 14:05:12, room.upgraded at 15:30):
# an event is never recorded ahead of the service's clock.
CAPTURE_START = datetime(2026, 6, 29, 16, 0, tzinfo=UTC)
# Not a credential: it guards only the capture's own server, on loopback, while it runs.
CAPTURE_ADMIN_TOKEN = "capture-admin-token-for-the-loopback-server"  # noqa: S105
CAPTURE_SEED = "capture"  # the partner id the signature notebook shows
ROTATION_GAP = timedelta(minutes=5)  # between the first delivery and the rotation
T = TypeVar("T")


@dataclass(frozen=True)
class Capture:
    """What a partner's endpoint received from the real service, and the secrets it holds.

    ``first`` was signed with ``old_secret`` alone; ``second`` was sent after a rotation, during
    the overlap, so it carries a signature for ``new_secret`` and one for ``old_secret``.
    """

    old_secret: str
    new_secret: str
    first: Received
    second: Received


async def _capture(database_url: str, events: tuple[Mapping[str, Any], Mapping[str, Any]]) -> Capture:
    clock = ManualClock(CAPTURE_START)
    settings = Settings(
        database_url=database_url,
        admin_token=CAPTURE_ADMIN_TOKEN,
        webhook_allow_private_urls=True,  # the partner is on loopback
    )
    ids = SeededIds(clock, CAPTURE_SEED)
    async with Receiver(clock) as receiver, serve(settings, clock, ids) as service:
        onboarded = await service.request(
            "POST", "/admin/partners", json={"name": "Example partner", "url": receiver.url}, admin=True
        )
        _expect(onboarded, 201)
        old_secret = onboarded.body["secret"]
        async with service.worker(random.Random(0)) as worker:
            _expect(await service.request("POST", "/admin/events", json=events[0], admin=True), 202)
            await send_due(worker)
            clock.advance(ROTATION_GAP.total_seconds())
            path = f"/admin/partners/{onboarded.body['id']}/rotate-secret"
            rotated = await service.request("POST", path, admin=True)
            _expect(rotated, 200)
            _expect(await service.request("POST", "/admin/events", json=events[1], admin=True), 202)
            await send_due(worker)
    if len(receiver.received) != 2:
        raise RuntimeError(f"expected two deliveries, the receiver got {len(receiver.received)}")
    first, second = receiver.received
    return Capture(old_secret, rotated.body["secret"], first, second)


def capture_signed_deliveries(
    database_url: str, events: tuple[Mapping[str, Any], Mapping[str, Any]]
) -> Capture:
    """Run the service on a fresh database, onboard a partner on loopback, publish ``events[0]``,
    rotate the partner's secret, publish ``events[1]``, and return both requests as received."""
    return run(_capture(database_url, events))


def _expect(answer: Response, status: int) -> None:
    if answer.status != status:
        raise RuntimeError(f"the service answered {answer.status}, expected {status}: {answer.body}")


def run(coro: Awaitable[T]) -> T:
    """Run ``coro`` to the end, also from a notebook, whose kernel already runs an event loop."""

    async def main() -> T:
        return await coro

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, main()).result()
