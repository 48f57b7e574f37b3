"""Deliveries a worker claimed ahead of its partner's free slots follow what changes meanwhile.

A partner that delivers has more of its deliveries claimed than it has slots; they wait in the
worker's lane and go out as slots free up. A pause, a removal, a new URL or a new secret reaches them at the worker's next turn: what is not yet sent is handed
back and, if still claimable, claimed again as the partner now is. Only attempts already out, and
one a slot handed on before that turn, go as they were claimed. Each case runs a real drain
against a receiver that answers in 30 ms, one attempt at a time, and changes the partner after the
third request.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import DBAPIError

from service.db import faults
from service.states import CircuitChange, HandedBack
from service.webhooks import partners, runtime, signing
from service.webhooks.breaker import BreakerState
from tests.webhook_helpers import Receiver, Reply, deliveries, onboard, publish, room_claimed, settings

EVENTS = 16
AFTER_AT_MOST = 2  # the attempt out when the change lands, and one handed on before the next turn
REMOVALS = 5  # times a removal is sent, each of which runs once more after a deadlock

Change_ = Callable[[Any, dict[str, Any]], Awaitable[Any]]


def _drain_changing(client: Any, receiver: Receiver, change: Change_, partner: dict[str, Any]) -> int:
    """Drain while ``change`` is made after the partner's third request; the requests received
    by then."""

    async def go() -> int:
        async with runtime.worker_for(client.app, rng=random.Random(1)) as worker:
            drained = asyncio.create_task(worker.drain())
            while len(receiver.requests) < 3:
                await asyncio.sleep(0.005)
            await change(client, partner)
            received = len(receiver.requests)
            await drained
            return received

    received: int = client.run(go())
    return received


def _publish(client: Any) -> None:
    for number in range(EVENTS):
        publish(client, room_claimed(f"room-{number}"))


async def _pause(client: Any, partner: dict[str, Any]) -> None:
    await client.app.ctx.operations.pause(partner["id"])


async def _remove(client: Any, partner: dict[str, Any]) -> None:
    """As an operator sends it again after a 503: on PostgreSQL a removal meets the busy worker's
    turns, and one PostgreSQL ends twice to break a deadlock stands (``Operations.remove``)."""
    for _ in range(REMOVALS):
        try:
            await client.app.ctx.operations.remove(partner["id"])
            return
        except DBAPIError as error:
            if not faults.rolled_back(error):
                raise
    raise AssertionError(f"the removal was rolled back {REMOVALS} times running")


@pytest.mark.parametrize(
    ("change", "status"),
    [(_pause, "pending"), (_remove, "cancelled")],
    ids=["paused", "removed"],
)
def test_a_stopped_partner_gets_nothing_more_than_was_out(
    make_client: Any, database_url: str, change: Change_, status: str
) -> None:
    with (
        Receiver(Reply(delay=0.03)) as receiver,
        make_client(database_url=database_url, **settings()) as client,
    ):
        partner = onboard(client, receiver.url(), maxInFlight=1)
        _publish(client)
        received = _drain_changing(client, receiver, change, partner)
        after = len(receiver.requests) - received
        assert after <= AFTER_AT_MOST, f"{after} requests reached the partner after it was stopped"
        # What its lane held was handed back unsent, and counted so (what was still due at a later
        # claim is not claimed again: the partner is paused or gone).
        handed = _handed_back(client)
        assert handed["changed"] >= EVENTS - received - AFTER_AT_MOST - 1, handed
        assert handed["late"] == handed["stopped"] == 0, handed
        if change is not _remove:  # a removed partner's deliveries are no longer listed
            left = [found["status"] for found in deliveries(client)]
            assert left.count(status) >= EVENTS - received - AFTER_AT_MOST, left


def test_a_new_url_takes_what_was_claimed_ahead(make_client: Any, database_url: str) -> None:
    with (
        Receiver(Reply(delay=0.03)) as receiver,
        make_client(database_url=database_url, **settings()) as client,
    ):
        partner = onboard(client, receiver.url("/old"), maxInFlight=1)
        _publish(client)

        async def move(client: Any, partner: dict[str, Any]) -> None:
            await client.app.ctx.operations.update(partner["id"], {"url": receiver.url("/new")})

        received = _drain_changing(client, receiver, move, partner)
        late = len(receiver.to("/old")) - received
        assert late <= AFTER_AT_MOST, f"{late} requests went to the old URL after the change"
        assert len(receiver.to("/old")) + len(receiver.to("/new")) >= EVENTS
        assert {found["status"] for found in deliveries(client)} == {"delivered"}


@pytest.mark.parametrize("overlap", [0, 86400])
def test_a_new_secret_signs_what_was_claimed_ahead(
    make_client: Any, database_url: str, clock: Any, overlap: int
) -> None:
    """With the overlap, every later request carries the new secret's signature (a receiver that
    swapped already accepts it); with none (after a leak), the old secret signs nothing more."""
    with (
        Receiver(Reply(delay=0.03)) as receiver,
        make_client(database_url=database_url, **settings()) as client,
    ):
        partner = onboard(client, receiver.url(), maxInFlight=1)
        old = partner["secret"]
        _publish(client)
        issued: list[str] = []

        async def rotate(client: Any, partner: dict[str, Any]) -> None:
            answer = await client.app.ctx.operations.rotate_secret(partner["id"], {"overlapSeconds": overlap})
            issued.append(answer["secret"])

        received = _drain_changing(client, receiver, rotate, partner)
        later = receiver.requests[received + AFTER_AT_MOST - 1 :]
        assert len(later) >= EVENTS - received - AFTER_AT_MOST
        now = clock().timestamp()
        refused = []
        for request in later:
            for verify in (signing.verify, signing.verify_standard):
                try:
                    verify(request.headers, request.body, issued, now=now)
                except signing.SignatureError:
                    refused.append(verify.__name__)
                if overlap == 0:
                    with pytest.raises(signing.SignatureError):
                        verify(request.headers, request.body, [old], now=now)
        assert not refused, f"{len(refused)} checks with the new secret alone refused later requests"


def test_an_unchanged_partner_keeps_what_was_claimed_ahead(
    make_client: Any, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing is handed back, nor read twice, for a partner nobody changed."""
    with (
        Receiver(Reply(delay=0.01)) as receiver,
        make_client(database_url=database_url, **settings()) as client,
        caplog.at_level(logging.INFO, logger="service.webhooks.worker"),
    ):
        onboard(client, receiver.url(), maxInFlight=2)
        _publish(client)

        async def go() -> int:
            async with runtime.worker_for(client.app, rng=random.Random(1)) as worker:
                return await worker.drain()

        assert client.run(go()) == EVENTS
        assert len(receiver.requests) == EVENTS
        assert not [record for record in caplog.records if "changed since" in record.getMessage()]
        assert _handed_back(client) == dict.fromkeys(HandedBack, 0.0)


def _handed_back(client: Any) -> dict[str, float]:
    """``service_webhook_handed_back_total`` by reason, as the app's metrics hold it."""
    registry = client.app.ctx.metrics.registry
    return {
        reason: registry.get_sample_value("service_webhook_handed_back_total", {"reason": reason})
        for reason in HandedBack
    }


def test_every_change_a_claim_reads_counts_the_revision_up(make_client: Any, database_url: str) -> None:
    """What a claim reads to send (status, URL, cap, secrets, an opening circuit) counts the
    partner's revision up; what it does not (a name, a failure that leaves the circuit closed, a
    resume of a partner already running) leaves it, so nothing claimed ahead goes back for it."""
    with make_client(database_url=database_url, **settings()) as client:
        ops = client.app.ctx.operations
        partner_id = onboard(client, "http://127.0.0.1:9/hook")["id"]

        async def revision() -> int:
            async with client.app.ctx.engine.connect() as conn:
                return (await partners.revisions(conn, [partner_id]))[partner_id]

        async def circuit(*changes: CircuitChange) -> None:
            now = ops.clock()
            state = (
                BreakerState(5, now, now + timedelta(seconds=60), 60.0) if changes else BreakerState(1, now)
            )
            async with client.app.ctx.engine.begin() as conn:
                await partners.apply(
                    conn, [partners.PartnerEffect(partner_id, state, changes=changes)], now=now
                )

        steps: list[tuple[str, Callable[[], Awaitable[Any]], int]] = [
            ("renamed", lambda: ops.update(partner_id, {"name": "Another name"}), 0),
            ("paused", lambda: ops.pause(partner_id), 1),
            ("resumed", lambda: ops.resume(partner_id), 1),
            ("resumed again", lambda: ops.resume(partner_id), 0),
            ("moved", lambda: ops.update(partner_id, {"url": "http://127.0.0.1:9/other"}), 1),
            ("capped", lambda: ops.update(partner_id, {"maxInFlight": 3}), 1),
            ("rotated", lambda: ops.rotate_secret(partner_id, {"overlapSeconds": 0}), 1),
            ("failed once", lambda: circuit(), 0),
            ("circuit opened", lambda: circuit(CircuitChange.OPENED), 1),
            ("removed", lambda: ops.remove(partner_id), 1),
        ]

        async def walk() -> list[tuple[str, int]]:
            seen = []
            for name, step, _ in steps:
                before = await revision()
                await step()
                seen.append((name, await revision() - before))
            return seen

        assert client.run(walk()) == [(name, counted) for name, _, counted in steps]
