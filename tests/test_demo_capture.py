"""A real signed delivery, before and during a secret rotation, captured for the signature notebook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.demo import capture
from service.events import EVENT_MODELS
from service.webhooks import signing


def test_capture_signed_deliveries(tmp_path: Path) -> None:
    """The real service delivers both events; the second, after a rotation, carries two signatures."""
    claimed = dict(EVENT_MODELS["room.claimed"].EXAMPLE)
    upgraded = dict(EVENT_MODELS["room.upgraded"].EXAMPLE)
    captured = capture.capture_signed_deliveries(f"sqlite:///{tmp_path / 'service.db'}", (claimed, upgraded))
    first, second = captured.first, captured.second
    assert [json.loads(first.body), json.loads(second.body)] == [claimed, upgraded]
    assert first.at == capture.CAPTURE_START
    assert second.at == capture.CAPTURE_START + capture.ROTATION_GAP
    assert first.headers[signing.SIGNATURE_HEADER].count("v1=") == 1
    assert second.headers[signing.SIGNATURE_HEADER].count("v1=") == 2
    signing.verify(first.headers, first.body, captured.old_secret, now=first.at.timestamp())
    for secret in (captured.old_secret, captured.new_secret):
        signing.verify(second.headers, second.body, secret, now=second.at.timestamp())
    with pytest.raises(signing.BadSignature):
        signing.verify(first.headers, first.body, captured.new_secret, now=first.at.timestamp())
