"""The operator's commands: partners, events publish, and the standalone worker."""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import Receiver, milestone, room_claimed

from service.cli import main
from service.connections import WORKER_OWN
from service.webhooks.signing import verify
from tests.processes import free_port, wait_ready


@pytest.fixture
def env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {"SERVICE_DATABASE_URL": sqlite_url, "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, Any]:
    """Exit status, stdout as JSON (or None) and stderr (as JSON when it is the error shape)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return (
        code,
        json.loads(out) if out.strip() else None,
        json.loads(err) if err.strip().startswith("{") else err,
    )


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
        assert run(capsys, "partners", "show", partner_id)[1] == added

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


@pytest.mark.parametrize("command", ["show", "pause", "resume", "test", "rotate-secret", "retry"])
def test_unknown_partner_id(env: dict[str, str], capsys: pytest.CaptureFixture[str], command: str) -> None:
    """An unknown id exits 1 with the 404 error document on stderr."""
    code, out, err = run(capsys, "partners", command, "ptn_missing")
    assert code == 1 and out is None
    assert err == {"ok": False, "message": "No partner has this id."}


def test_add_refuses_bad_input(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """Field errors come back as the service's JSON error shape."""
    code, _, err = run(capsys, "partners", "add", "--name", "P", "--url", "ftp://x/", "--events", "room.sold")
    assert code == 1
    assert [(e["field"], e["code"]) for e in err["errors"]] == [("events.0", "unknown_event")]
    code, _, err = run(capsys, "partners", "add", "--name", "P", "--url", "ftp://x/")
    assert [(e["field"], e["code"]) for e in err["errors"]] == [("url", "insecure_scheme")]


@pytest.mark.parametrize("option", ["--partner", "--event", "--status"])
def test_deliveries_list_refuses_a_blank_filter(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], option: str
) -> None:
    """`--partner ''` is refused as `?partner=` is, not answered with an empty listing."""
    code, out, err = run(capsys, "deliveries", "list", option, "")
    assert (code, out) == (1, None)
    assert [(e["field"], e["code"]) for e in err["errors"]] == [(option.removeprefix("--"), "invalid")]


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
        assert (code, err) == (1, {
            "ok": False,
            "message": "The request is not valid.",
            "errors": [{"field": "file", "code": "invalid", "message": "The file cannot be read: No such file or directory."}],
        })


def _start_worker(
    env: dict[str, str], concurrency: int = 4, open_files: int | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m service worker` on a free port, its soft open-file limit lowered to
    ``open_files``; returns once its /readyz answers 200."""
    port = free_port()

    def limit() -> None:
        if open_files is not None:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            )

    worker = subprocess.Popen(
        [sys.executable, "-m", "service", "worker", "--concurrency", str(concurrency), "--port", str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limit,  # the child sets its own limit, before exec
    )
    base = f"http://127.0.0.1:{port}"
    wait_ready(f"{base}/readyz", worker)
    return worker, base


def _listed(capsys: pytest.CaptureFixture[str], within: float = 10.0) -> list[dict[str, Any]]:
    """The workers command's rows once it lists one: a worker writes its row in the roster as its
    loop starts, which may come a moment after its /readyz first answers."""
    deadline = time.monotonic() + within
    while True:
        rows: list[dict[str, Any]] = run(capsys, "workers")[1]["workers"]
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def _stop_worker(worker: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """SIGTERM; the worker must exit 0. Its log lines, each a JSON object."""
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=15)
    assert worker.returncode == 0, stderr.decode()
    return [json.loads(line) for line in stderr.decode().splitlines()]


def _scraped(url: str, wanted: bytes, timeout: float) -> bool:
    """Whether ``wanted`` shows in the worker's metrics within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if wanted in _get(url)[1]:
            return True
        time.sleep(0.02)  # polling another process's bookkeeping, not waiting for a clock
    return False


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback only
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_standalone_worker_delivers_serves_its_port_and_stops_on_sigterm(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m service worker` picks up another process's publish at its poll, answers /readyz
    and /metrics on its own port, logs JSON lines, and exits cleanly."""
    with Receiver() as receiver:
        _, partner, _ = run(capsys, "partners", "add", "--name", "P", "--url", receiver.url())
        worker, base = _start_worker(env)
        try:
            event = Path(env["SERVICE_DATABASE_URL"].removeprefix("sqlite:///")).with_name("e.json")
            event.write_text(json.dumps(room_claimed()))
            code, published, _ = run(capsys, "events", "publish", str(event))
            assert code == 0
            assert receiver.wait_for(lambda requests: len(requests) == 1, timeout=15)
            assert json.loads(receiver.requests[0].body)["eventId"] == published["eventId"]
            assert _get(f"{base}/readyz") == (200, b'{"ok": true, "database": "up"}')
            status, text = _get(f"{base}/metrics")
            assert status == 200
            assert f'service_webhook_deliveries_waiting{{partner="{partner["id"]}"}}'.encode() in text
            # The attempt is counted once its row is committed, a moment after the receiver has it.
            delivered = f'service_webhook_attempts_total{{outcome="delivered",partner="{partner["id"]}"}} 1.0'
            assert _scraped(f"{base}/metrics", delivered.encode(), timeout=10)
            # It wrote its row in the roster as it started: the workers command lists it, live.
            code, listed, _ = run(capsys, "workers")
            assert code == 0
            [row] = listed["workers"]
            assert (row["pid"], row["role"], row["loop"], row["concurrency"], row["state"]) == (
                worker.pid,
                "worker",
                "uvloop",
                4,
                "live",
            )
        finally:
            lines = _stop_worker(worker)
        assert run(capsys, "workers")[1] == {"workers": []}  # and deleted it as it stopped
    [ready] = [line for line in lines if line["logger"] == "service.webhooks.cli"]
    assert (ready["level"], ready["message"], ready["health"]) == (
        "info",
        "delivering webhooks",
        f"{base}/healthz",
    )
    assert ready["loop"] == "uvloop"  # the loop Sanic runs serve (and its worker) on


def test_the_standalone_workers_healthz_follows_its_loop(env: dict[str, str]) -> None:
    """A running worker's loop turns every poll interval, so /healthz answers 200."""
    worker, base = _start_worker(env)
    try:
        status, body = _get(f"{base}/healthz")
    finally:
        _stop_worker(worker)
    assert status == 200 and json.loads(body)["ok"] is True


def test_a_worker_keeps_its_attempts_in_flight_within_its_open_file_limit(
    env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked for more attempts in flight than its descriptors allow, the worker runs with what they
    allow and says so: past it, connects to healthy partners would fail and count against them."""
    worker, _ = _start_worker(env, concurrency=5000, open_files=512)
    try:
        [row] = _listed(capsys)
    finally:
        lines = _stop_worker(worker)
    assert row["concurrency"] == 512 - WORKER_OWN
    [warning] = [line for line in lines if line["level"] == "warning"]
    assert warning["message"] == (
        f"the open-file limit allows {512 - WORKER_OWN} attempts in flight, not 5000; "
        "raise it (ulimit -n, LimitNOFILE)"
    )


def test_a_worker_whose_port_is_taken_says_so(env: dict[str, str]) -> None:
    """A second worker on a port in use exits 1 with the reason, instead of delivering unwatched."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "service", "worker", "--port", str(port)],
            env={**os.environ, **env},
            capture_output=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    [line] = [json.loads(text) for text in done.stderr.decode().splitlines()]
    assert line["level"] == "error" and line["message"].startswith(f"cannot listen on 127.0.0.1:{port}: ")


def test_partners_add_takes_a_batch_policy(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """--batch-events, --batch-max-events and --batch-max-wait make the partner's batch policy; a
    kind that may not be batched is refused naming the member."""
    code, added, _ = run(capsys, "partners", "add", "--name", "P", "--url", "http://127.0.0.1:9/h",
                         "--batch-events", "room.trending, room.arcade.high_score",
                         "--batch-max-events", "50", "--batch-max-wait", "2.5")  # fmt: skip
    assert code == 0
    assert added["batch"] == {
        "events": ["room.trending", "room.arcade.high_score"],
        "maxEvents": 50,
        "maxWaitSeconds": 2.5,
    }
    code, _, error = run(capsys, "partners", "add", "--name", "P", "--url", "http://127.0.0.1:9/h",
                         "--batch-max-events", "5")  # fmt: skip
    assert code != 0
    assert [item["field"] for item in error["errors"]] == ["batch.events"]
    code, _, error = run(capsys, "partners", "add", "--name", "P", "--url", "http://127.0.0.1:9/h",
                         "--batch-events", "room.claimed")  # fmt: skip
    assert code != 0
    assert [(item["field"], item["code"]) for item in error["errors"]] == [
        ("batch.events.0", "not_batchable")
    ]
