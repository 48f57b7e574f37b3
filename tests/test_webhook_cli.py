"""The operator's commands: partners, events publish, and the standalone worker."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import Receiver, milestone, room_claimed

from service.cli import main
from service.webhooks.signing import verify


@pytest.fixture
def env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {"SERVICE_DATABASE_URL": sqlite_url, "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, Any]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, json.loads(err) if err.strip().startswith("{") else err


def test_partner_commands(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """add prints the secret once; list, pause, resume, test, rotate-secret and retry work by id."""
    with Receiver() as receiver:
        code, added, _ = run(capsys, "partners", "add", "--name", "Acme", "--url", receiver.url(),
                             "--events", "room.claimed, platform.milestone")  # fmt: skip
        assert code == 0
        secret = added.pop("secret")
        assert added["events"] == ["room.claimed", "platform.milestone"]
        assert added["status"] == "active"
        partner_id = added["id"]

        code, listing, _ = run(capsys, "partners", "list")
        assert listing == {"partners": [added]}
        assert secret not in json.dumps(listing)

        assert run(capsys, "partners", "pause", partner_id)[1]["status"] == "paused"
        assert run(capsys, "partners", "resume", partner_id)[1]["status"] == "active"

        code, tested, _ = run(capsys, "partners", "test", partner_id)
        assert code == 0 and tested["ok"] is True
        [request] = receiver.requests
        verify(request.headers, request.body, secret)

        code, rotated, _ = run(capsys, "partners", "rotate-secret", partner_id)
        assert rotated["secret"] not in (secret, None)
        assert rotated["previousSecretExpiresAt"] is not None

        assert run(capsys, "partners", "retry", partner_id)[1] == {"partnerId": partner_id, "requeued": 0}


@pytest.mark.parametrize("command", ["pause", "resume", "test", "rotate-secret", "retry"])
def test_unknown_partner_id(env: dict[str, str], capsys: pytest.CaptureFixture[str], command: str) -> None:
    """An unknown id exits 1 with the 404 error document on stderr."""
    code, out, err = run(capsys, "partners", command, "ptn_missing")
    assert code == 1 and out is None
    assert err == {"ok": False, "message": 'No partner has the id "ptn_missing".'}


def test_add_refuses_bad_input(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """Field errors come back as the service's JSON error shape."""
    code, _, err = run(capsys, "partners", "add", "--name", "P", "--url", "ftp://x/", "--events", "room.sold")
    assert code == 1
    assert [(e["field"], e["code"]) for e in err["errors"]] == [("events.0", "unknown_event")]
    code, _, err = run(capsys, "partners", "add", "--name", "P", "--url", "ftp://x/")
    assert [(e["field"], e["code"]) for e in err["errors"]] == [("url", "insecure_scheme")]


def test_events_publish_from_a_file_and_stdin(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """publish FILE and publish - validate, store and fan out; a repeat creates nothing."""
    with Receiver() as receiver:
        run(capsys, "partners", "add", "--name", "P", "--url", receiver.url())
        event = tmp_path / "event.json"
        event.write_text(json.dumps(room_claimed(eventId="evt_cli_1")))
        assert run(capsys, "events", "publish", str(event))[1] == {"eventId": "evt_cli_1", "deliveries": 1}
        assert run(capsys, "events", "publish", str(event))[1] == {"eventId": "evt_cli_1", "deliveries": 0}

        stdin = io.TextIOWrapper(io.BytesIO(json.dumps(milestone()).encode()))
        monkeypatch.setattr(sys, "stdin", stdin)
        code, published, _ = run(capsys, "events", "publish", "-")
        assert code == 0 and published["deliveries"] == 1

        event.write_text(json.dumps(milestone(value="12")))
        code, _, err = run(capsys, "events", "publish", str(event))
        assert code == 1
        assert [(e["field"], e["code"]) for e in err["errors"]] == [("value", "invalid_type")]
        code, _, err = run(capsys, "events", "publish", str(tmp_path / "missing.json"))
        assert code == 1 and "cannot read" in err


def test_the_standalone_worker_delivers_and_stops_on_sigterm(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m service worker` picks up another process's publish at its poll, and exits cleanly."""
    with Receiver() as receiver:
        run(capsys, "partners", "add", "--name", "P", "--url", receiver.url())
        worker = subprocess.Popen(
            [sys.executable, "-m", "service", "worker", "--concurrency", "4"],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            event = Path(env["SERVICE_DATABASE_URL"].removeprefix("sqlite:///")).with_name("e.json")
            event.write_text(json.dumps(room_claimed()))
            code, published, _ = run(capsys, "events", "publish", str(event))
            assert code == 0
            assert receiver.wait_for(lambda requests: len(requests) == 1, timeout=15)
            assert json.loads(receiver.requests[0].body)["eventId"] == published["eventId"]
        finally:
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=15)
        assert worker.returncode == 0, stderr.decode()
