"""The in-process service harness: a clock that moves only when told, partner endpoints on
loopback, and a real signed delivery captured for the signature notebook."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from analytics import live
from service.events import EVENT_MODELS
from service.webhooks import signing

START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def test_clock_moves_only_forward() -> None:
    """set and advance move the clock; going back is refused."""
    clock = live.Clock(START)
    clock.advance(90)
    assert clock() == START + timedelta(seconds=90)
    clock.set(START + timedelta(hours=1))
    with pytest.raises(ValueError, match="cannot go back"):
        clock.set(START)


def test_clock_needs_an_aware_start() -> None:
    """A naive start would be a guess about the zone, so it is refused."""
    with pytest.raises(ValueError, match="aware"):
        live.Clock(datetime(2026, 6, 1))


async def test_receiver_answers_from_its_script_and_refuses_while_stopped() -> None:
    """Requests are answered by the script and recorded; a stopped receiver refuses connections."""
    clock = live.Clock(START)
    receiver = live.Receiver(clock, lambda received: live.Reply(503, "busy", {"Retry-After": "9"}))
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


def test_capture_signed_deliveries(tmp_path: Path) -> None:
    """The real service delivers both events; the second, after a rotation, carries two signatures."""
    claimed = dict(EVENT_MODELS["room.claimed"].EXAMPLE)
    upgraded = dict(EVENT_MODELS["room.upgraded"].EXAMPLE)
    capture = live.capture_signed_deliveries(f"sqlite:///{tmp_path / 'service.db'}", (claimed, upgraded))
    first, second = capture.first, capture.second
    assert [json.loads(first.body), json.loads(second.body)] == [claimed, upgraded]
    assert first.at == live.CAPTURE_START
    assert second.at == live.CAPTURE_START + live.ROTATION_GAP
    assert first.headers[signing.SIGNATURE_HEADER].count("v1=") == 1
    assert second.headers[signing.SIGNATURE_HEADER].count("v1=") == 2
    signing.verify(first.headers, first.body, capture.old_secret, now=first.at.timestamp())
    for secret in (capture.old_secret, capture.new_secret):
        signing.verify(second.headers, second.body, secret, now=second.at.timestamp())
    with pytest.raises(signing.BadSignature):
        signing.verify(first.headers, first.body, capture.new_secret, now=first.at.timestamp())
