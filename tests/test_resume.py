"""Resume means "try this partner now": an open circuit turns half-open and one probe goes at once;
success releases what the circuit held, failure re-opens it for the cool-down it had."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Client
from webhook_helpers import AUTH, Receiver, Reply, deliveries, drain, onboard, publish, room_claimed, settings

from service.app import create_app
from service.settings import Settings
from service.states import Circuit
from service.webhooks.breaker import BreakerPolicy, BreakerState, after_attempt, circuit, resumed

T0 = datetime(2026, 6, 29, 12, 0, tzinfo=UTC)
POLICY = BreakerPolicy(failures=3, cooldown=30, disable_after=3600, max_cooldown=100)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize("cooldown", [30.0, 60.0, 100.0])
def test_a_resumed_probe_that_fails_reopens_for_the_same_cooldown(cooldown: float) -> None:
    """Resumed while open: half-open at once, failures still counted; the probe's failure re-opens
    the circuit for the cool-down it had (the policy's maximum included), not twice that."""
    state = BreakerState(7, at(0), at(10 + cooldown), cooldown)
    resumed_state = resumed(state, at(10))
    assert circuit(resumed_state, at(10)) is Circuit.HALF_OPEN
    assert (resumed_state.consecutive_failures, resumed_state.failing_since) == (7, at(0))
    after, _ = after_attempt(resumed_state, ok=False, probe=True, at=at(11), policy=POLICY)
    assert (after.open_until, after.cooldown) == (at(11 + cooldown), cooldown)
    closed, _ = after_attempt(resumed_state, ok=True, probe=True, at=at(11), policy=POLICY)
    assert closed == BreakerState()


@pytest.mark.parametrize(
    ("state", "lift", "expected"),
    [
        (BreakerState(), False, BreakerState()),
        (BreakerState(2, at(0)), False, BreakerState()),  # closed: failures forgotten
        (BreakerState(5, at(0), at(5), 30), False, BreakerState()),  # half-open already: afresh
        (BreakerState(5, at(0), at(40), 30), True, BreakerState(5, None, at(10), 15)),  # was disabled
    ],
)
def test_resume_otherwise_starts_the_circuit_afresh(
    state: BreakerState, lift: bool, expected: BreakerState
) -> None:
    """A closed or half-open circuit is closed afresh; resuming a disabled partner restarts its
    clock towards disable_after, so the probe's failure cannot disable it again at once."""
    assert resumed(state, at(10), lift_disable=lift) == expected


def test_resume_on_an_open_circuit_delivers_the_held_backlog_at_once(database_url: str, clock: Any) -> None:
    """The receiver is fixed while the circuit is open (an hour's cool-down): resume answers
    half-open and wakes the app's worker; its probe succeeds and the held backlog (retries not yet
    due included) follows at once, the clock never moving."""
    options = settings(
        webhook_breaker_failures=3, webhook_breaker_cooldown=3600, webhook_retry_schedule=(10,) * 5
    )
    app = create_app(Settings(database_url=database_url, **options), clock=clock, run_worker=True)
    with Receiver(Reply(500)) as receiver, Client(app) as client:
        worker = app.ctx.webhooks.worker
        assert worker is not None
        worker.poll_interval = 60  # only a wake-up can deliver in time

        def settled(count: int) -> Callable[[], Any]:
            async def wait() -> None:
                for _ in range(1000):  # up to 10 s of real work; typically milliseconds
                    if worker.logged >= count:
                        return
                    await asyncio.sleep(0.01)
                raise AssertionError(f"{worker.logged} attempts settled, not {count}")

            return wait

        partner = onboard(client, receiver.url())
        for index in range(3):
            publish(client, room_claimed(f"room-{index}"))
        client.run(settled(3)())
        assert client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json["circuit"] == "open"
        for index in range(3, 6):
            publish(client, room_claimed(f"room-{index}"))  # held: nothing is sent
        held = deliveries(client)
        assert [(d["status"], d.get("heldBy")) for d in held] == [("pending", "circuit")] * 6
        assert len(receiver.requests) == 3

        receiver.default = Reply()  # the partner fixed its endpoint
        answer = client.post(f"/admin/partners/{partner['id']}/resume", headers=AUTH)
        assert answer.status == 200
        assert (answer.json["status"], answer.json["circuit"]) == ("active", "half-open")
        client.run(settled(3 + 6)())
        shown = client.get(f"/admin/partners/{partner['id']}", headers=AUTH).json
        listed = deliveries(client)
    assert (shown["circuit"], shown["consecutiveFailures"], shown["failingSince"]) == ("closed", 0, None)
    assert [(d["status"], d.get("heldBy")) for d in listed] == [("delivered", None)] * 6
    assert len(receiver.requests) == 3 + 6
    # Nothing waited for the clock: every delivery went out at the moment of the resume.
    assert {d["deliveredAt"] for d in listed} == {"2026-06-29T12:00:00.000000Z"}


def test_a_failed_resume_probe_reopens_without_doubling(make_client: Any, database_url: str, clock: Any) -> None:
    """A probe the operator asked for that fails re-opens the circuit for the cool-down it had
    (60 s here, after one failed probe doubled 30 s), where a timed probe's failure doubles it."""
    options = settings(
        webhook_breaker_failures=1, webhook_breaker_cooldown=30, webhook_retry_schedule=(10,) * 10
    )
    with Receiver(Reply(500)) as receiver, make_client(database_url=database_url, **options) as client:
        partner = onboard(client, receiver.url())
        path = f"/admin/partners/{partner['id']}"
        publish(client, room_claimed())
        assert drain(client) == 1  # the circuit opens for 30 s
        clock.advance(30)
        assert drain(client) == 1  # the timed probe fails: open for 60 s
        clock.advance(5)
        assert client.post(f"{path}/resume", headers=AUTH).json["circuit"] == "half-open"
        assert drain(client) == 1  # the probe goes at once, and fails
        assert client.get(path, headers=AUTH).json["circuit"] == "open"
        clock.advance(59)
        assert drain(client) == 0
        assert client.get(path, headers=AUTH).json["circuit"] == "open"
        clock.advance(1)  # 60 s after the resumed probe, not 120
        assert client.get(path, headers=AUTH).json["circuit"] == "half-open"
        assert drain(client) == 1
        clock.advance(119)  # this timed probe's failure doubled it: 120 s
        assert drain(client) == 0
        clock.advance(1)
        assert drain(client) == 1
    assert len(receiver.requests) == 5
