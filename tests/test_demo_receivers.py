"""Partners' endpoints on loopback: a clock that moves only when told, receivers that answer from a
script, and the scenario's endpoints, which check signatures before they answer."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from service.clock import ManualClock as Clock
from service.demo import scenario
from service.demo.driver import demo_settings
from service.demo.receivers import Endpoint, Received, Receiver, Reply, Stopwatch
from service.settings import Settings
from service.webhooks import signing, wiring

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SECRET = "whsec_dGhpcyBpcyBub3QgYSByZWFsIHNlY3JldCwganVzdCBhIHRlc3Q="
PARTNERS = {spec.name: spec for spec in scenario.PARTNERS}


def test_clock_moves_only_forward() -> None:
    """set and advance move the clock; going back is refused."""
    clock = Clock(START)
    clock.advance(90)
    assert clock() == START + timedelta(seconds=90)
    clock.set(START + timedelta(hours=1))
    with pytest.raises(ValueError, match="cannot go back"):
        clock.set(START)


def test_clock_needs_an_aware_start() -> None:
    """A naive start would be a guess about the zone, so it is refused."""
    with pytest.raises(ValueError, match="aware"):
        Clock(datetime(2026, 6, 1))


async def test_receiver_answers_from_its_script_and_refuses_while_stopped() -> None:
    """Requests are answered by the script and recorded; a stopped receiver refuses connections."""
    clock = Clock(START)
    receiver = Receiver(clock, lambda received: Reply(503, "busy", {"Retry-After": "9"}))
    async with receiver, aiohttp.ClientSession() as session:
        async with session.post(receiver.url, data=b"{}", headers={"X-Test": "1"}) as response:
            assert (response.status, await response.text()) == (503, "busy")
            assert response.headers["Retry-After"] == "9"
        assert [(r.body, r.headers["x-test"], r.at) for r in receiver.received] == [(b"{}", "1", START)]
        await receiver.stop()
        with pytest.raises(aiohttp.ClientConnectorError):
            await session.post(receiver.url, data=b"{}")
        await receiver.start()  # the same port again
        async with session.post(receiver.url, data=b"{}") as response:
            assert response.status == 503


def signed(at: datetime, secret: str = SECRET) -> Received:
    """A delivery of one event as the service signs it, arriving at ``at``."""
    body = json.dumps({"event": "room.claimed", "eventId": "evt_1"}).encode()
    headers = signing.signature_headers(
        event="room.claimed", delivery_id="dlv_1", body=body, secrets=[secret], timestamp=int(at.timestamp())
    )
    return Received({name.lower(): value for name, value in headers.items()}, body, at)


def test_endpoint_refuses_a_delivery_signed_with_another_secret() -> None:
    """A signature that does not verify gets 401 and is counted, so the generator can fail on it."""
    endpoint = Endpoint(PARTNERS[scenario.HEALTHY], seed=1, secret=SECRET)
    reply = endpoint(signed(START, secret="whsec_b3RoZXI="))
    assert reply.status == 401
    assert endpoint.refused == 1


@pytest.mark.parametrize("partner", sorted(PARTNERS))
def test_endpoint_answers_a_genuine_delivery_as_its_partner_would(partner: str) -> None:
    """A verified delivery is answered as the partner's rules say, the same for the same attempt."""
    endpoint = Endpoint(PARTNERS[partner], seed=1, secret=SECRET)
    for at in (START, scenario.GONE_AT + timedelta(hours=1)):
        reply, *again = [endpoint(signed(at)) for _ in range(3)]
        assert again == [reply, reply]
        assert reply.status in {200, 410, 500, 503}
        assert (reply.status == 410) == (partner == scenario.GONE and at >= scenario.GONE_AT)
    assert endpoint.refused == 0


def test_a_stopwatch_moves_only_when_told_and_never_past_the_timeout() -> None:
    """Each advance counts at most the timeout, as no attempt outlasts it; going back is refused."""
    stopwatch = Stopwatch(timeout=0.3)
    assert stopwatch() == 0.0
    stopwatch.advance(0.1)
    stopwatch.advance(5.0)  # an answer held far past the timeout
    assert stopwatch() == pytest.approx(0.4)
    with pytest.raises(ValueError, match="cannot go back"):
        stopwatch.advance(-0.1)


@pytest.mark.parametrize(("delay", "held"), [(0.0, 0.0), (0.2, 0.0), (0.3, 0.3), (0.6, 0.6)])
def test_an_endpoint_tells_the_stopwatch_what_its_answer_takes(delay: float, held: float) -> None:
    """The designed delay plus a transit in TRANSIT goes on the stopwatch; only an answer that must
    miss the timeout is really held back."""
    spec = scenario.PartnerSpec("Delayed", None, answers=((1.0, scenario.Answer(delay=delay)),))
    stopwatch = Stopwatch(timeout=0.3)
    endpoint = Endpoint(spec, seed=1, secret=SECRET, stopwatch=stopwatch)
    reply = endpoint(signed(START))
    assert reply.delay == held
    low, high = scenario.TRANSIT
    assert min(delay, 0.3) <= stopwatch() <= min(delay + high, 0.3)
    if delay < 0.3:
        assert stopwatch() - delay >= low
    again = Stopwatch(timeout=0.3)
    Endpoint(spec, seed=1, secret=SECRET, stopwatch=again)(signed(START))
    assert again() == stopwatch()  # the transit is seeded by what the attempt carries


@pytest.mark.parametrize(("delay", "held"), [(0.0, 0.0), (0.2, 0.0), (0.6, scenario.REAL_HOLD), (5.0, 5.0)])
def test_an_answer_designed_to_miss_the_timeout_is_held_past_the_workers_real_one(
    delay: float, held: float
) -> None:
    """The demo's worker really waits REAL_TIMEOUT, so a loaded machine has that long to carry an
    answer designed to come in time (sent at once); one designed to miss the designed timeout is
    held REAL_HOLD, past the real one, and the stopwatch still reads the designed timeout."""
    assert scenario.WEBHOOK_TIMEOUT < scenario.REAL_TIMEOUT < scenario.REAL_HOLD
    assert demo_settings("sqlite:///demo.db").webhook_timeout == scenario.REAL_TIMEOUT
    spec = scenario.PartnerSpec("Delayed", None, answers=((1.0, scenario.Answer(delay=delay)),))
    stopwatch = Stopwatch(timeout=scenario.WEBHOOK_TIMEOUT, hold=scenario.REAL_HOLD)
    reply = Endpoint(spec, seed=1, secret=SECRET, stopwatch=stopwatch)(signed(START))
    assert reply.delay == held
    assert stopwatch() <= scenario.WEBHOOK_TIMEOUT


async def test_the_sender_reads_attempt_durations_from_its_timer() -> None:
    """The demo's worker times attempts by the stopwatch its endpoints move, not by real time."""
    clock = Clock(START)
    stopwatch = Stopwatch(timeout=0.3)
    spec = scenario.PartnerSpec("Slow", None, answers=((1.0, scenario.Answer(delay=0.2)),))
    endpoint = Endpoint(spec, seed=1, secret=SECRET, stopwatch=stopwatch)
    # The designed timeout is the stopwatch's; the real one only has to outlast a loopback answer.
    settings = Settings(webhook_timeout=5, webhook_allow_private_urls=True)
    receiver = Receiver(clock, endpoint)
    async with receiver, wiring.sender(settings, clock=clock, timer=stopwatch) as sender:
        attempt = await sender.send(
            url=receiver.url,
            event="room.claimed",
            delivery_id="dlv_1",
            body=b'{"eventId":"evt_1"}',
            secrets=[SECRET],
        )
    assert attempt.status_code == 200
    assert attempt.duration_ms == round(stopwatch() * 1000)
    assert 200 + scenario.TRANSIT[0] * 1000 <= attempt.duration_ms <= 200 + scenario.TRANSIT[1] * 1000 + 1
