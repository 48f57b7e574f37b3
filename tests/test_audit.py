"""The audit trail: one JSON line per admin operation, from the admin API and from the commands."""

from __future__ import annotations

import asyncio
import getpass
import inspect
import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import AUTH, Receiver, drain, onboard, publish, room_claimed, settings

from service import audit
from service.cli import main
from service.clock import ManualClock
from service.logs import JSONFormatter
from service.registrations_ops import RegistrationOperations
from service.webhooks.operations import Operations

SUBJECT_KEYS = ("partner", "delivery", "event", "registration")


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The audit records so far, each as the JSON object the log line holds."""
    formatter = JSONFormatter()
    return [json.loads(formatter.format(record)) for record in caplog.records if record.name == "service.audit"]


def trail(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each line says, without its time."""
    return [{key: value for key, value in line.items() if key != "time"} for line in lines]


@pytest.fixture
def audit_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="service.audit")
    return caplog


def test_admin_routes_write_one_line_per_operation(make_client: Any, audit_log: pytest.LogCaptureFixture) -> None:
    """Onboard, rotate-secret, publish, retry and erase over HTTP: one line each, with the client
    address, the operation, what it acted on and its outcome; never a secret, never a whole address."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url())
        rotated = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH).json
        published = publish(client, room_claimed())
        client.post(f"/admin/partners/{partner['id']}/retry", headers=AUTH)
        client.post("/api/waitlist", json={"email": "ada@example.com", "intent": "claim"})
        client.request("delete", "/admin/waitlist?email=Ada@Example.com", headers=AUTH)
        missing = client.post("/admin/partners/ptn_missing/retry", headers=AUTH)
    assert missing.status_code == 404
    line = {"level": "info", "logger": "service.audit", "message": "admin action", "actor": "127.0.0.1"}
    assert trail(audit_lines(audit_log)) == [
        {**line, "operation": "onboard", "partner": partner["id"], "outcome": "ok"},
        {**line, "operation": "rotate_secret", "partner": partner["id"], "outcome": "ok"},
        {**line, "operation": "publish", "event": published["eventId"], "outcome": "ok"},
        {**line, "operation": "retry", "partner": partner["id"], "requeued": 0, "outcome": "ok"},
        {**line, "operation": "erase_registrations", "registration": "A***@Example.com", "outcome": "ok"},
        {**line, "operation": "retry", "partner": "ptn_missing", "outcome": "error", "status": 404},
    ]
    text = audit_log.text + "".join(json.dumps(line) for line in audit_lines(audit_log))
    assert partner["secret"] not in text and rotated["secret"] not in text
    assert "ada@example.com" not in text.lower()


def test_a_replay_names_its_partner_and_how_many_it_requeued(
    make_client: Any, clock: ManualClock, audit_log: pytest.LogCaptureFixture
) -> None:
    """The partner a replay's filter names is in its line (it comes in the body, not as an
    argument), with the count of deliveries it requeued; across partners the line names none, and
    a replay for an unknown partner names it with its 404. Nothing else of the body is written."""
    with Receiver() as receiver, make_client(**settings()) as client:
        partner = onboard(client, receiver.url("/a"))
        onboard(client, receiver.url("/b"))
        publish(client, room_claimed())
        assert drain(client) == 2
        clock.advance(60)  # the window ends now, before which the deliveries were made
        window = {"since": "2020-01-01T00:00:00Z", "status": "delivered"}
        replays = [{**window, "partner": partner["id"]}, window, {**window, "partner": "ptn_nobody"}]
        answers = [client.post("/admin/deliveries/replay", json=body, headers=AUTH) for body in replays]
    assert [(answer.status, answer.json) for answer in answers[:2]] == [
        (202, {"deliveries": 1}),
        (202, {"deliveries": 1}),  # the other partner's: the first is pending already
    ]
    assert answers[2].status == 404
    line = {"level": "info", "logger": "service.audit", "message": "admin action", "actor": "127.0.0.1"}
    assert [line for line in trail(audit_lines(audit_log)) if line["operation"] == "replay"] == [
        {**line, "operation": "replay", "partner": partner["id"], "requeued": 1, "outcome": "ok"},
        {**line, "operation": "replay", "requeued": 1, "outcome": "ok"},
        {**line, "operation": "replay", "partner": "ptn_nobody", "outcome": "error", "status": 404},
    ]
    assert partner["secret"] not in audit_log.text + json.dumps(audit_lines(audit_log))


def test_commands_write_one_line_as_the_os_user(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    audit_log: pytest.LogCaptureFixture,
) -> None:
    """The same operations run as commands act for `cli:` and the user running them."""
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS", "1")
    with Receiver() as receiver:
        assert main(["partners", "add", "--name", "Acme", "--url", receiver.url()]) == 0
        added = json.loads(capsys.readouterr().out)
        assert main(["partners", "rotate-secret", added["id"]]) == 0
        secret = json.loads(capsys.readouterr().out)["secret"]
        event = tmp_path / "event.json"
        event.write_text(json.dumps(room_claimed()))
        assert main(["events", "publish", str(event)]) == 0
        published = json.loads(capsys.readouterr().out)
        assert main(["partners", "retry", added["id"]]) == 0
        assert main(["deliveries", "replay", "--since", "2020-01-01T00:00:00Z", "--partner", added["id"]]) == 0
        assert main(["waitlist", "erase", "--email", "bob@example.org"]) == 0
        assert main(["waitlist", "erase", "--email", "bob"]) == 1
    actor = f"cli:{getpass.getuser()}"
    assert [
        (line["actor"], line["operation"], {key: line[key] for key in SUBJECT_KEYS if key in line}, line["outcome"])
        for line in audit_lines(audit_log)
    ] == [
        (actor, "onboard", {"partner": added["id"]}, "ok"),
        (actor, "rotate_secret", {"partner": added["id"]}, "ok"),
        (actor, "publish", {"event": published["eventId"]}, "ok"),
        (actor, "retry", {"partner": added["id"]}, "ok"),
        (actor, "replay", {"partner": added["id"]}, "ok"),
        (actor, "erase_registrations", {"registration": "b***@example.org"}, "ok"),
        (actor, "erase_registrations", {"registration": "[address]"}, "error"),
    ]
    assert audit_lines(audit_log)[-1]["status"] == 400
    assert added["secret"] not in audit_log.text and secret not in audit_log.text


async def test_an_operation_calling_another_is_one_action(audit_log: pytest.LogCaptureFixture) -> None:
    """Only the outermost operation is logged, with what an inner one notes, and outside any adapter
    the actor is `unknown`; a note outside any operation goes nowhere."""

    @audit.audited
    class Example:
        async def outer(self, partner_id: str) -> dict[str, str]:
            return await self.inner(partner_id)

        async def inner(self, partner_id: str) -> dict[str, str]:
            audit.note(event="evt_1", registration=None)
            return {"deliveryId": "dlv_1"}

        @audit.unaudited
        async def scrape(self) -> int:
            return 1

    audit.note(partner="ptn_nowhere")
    assert await Example().outer("ptn_1") == {"deliveryId": "dlv_1"}
    assert await Example().scrape() == 1
    said = [{key: line.get(key) for key in ("actor", "operation", *SUBJECT_KEYS)} for line in audit_lines(audit_log)]
    assert said == [
        {
            "actor": "unknown",
            "operation": "outer",
            "partner": "ptn_1",
            "delivery": "dlv_1",
            "event": "evt_1",
            "registration": None,
        }
    ]


def test_a_name_a_client_gave_is_cut_to_an_ordinary_length(
    make_client: Any, audit_log: pytest.LogCaptureFixture
) -> None:
    """A refused replay naming a 30,000-character partner writes a line of ordinary length."""
    with make_client(**settings()) as client:
        body = {"since": "2026-01-01T00:00:00Z", "partner": "p" * 30_000}
        answer = client.post("/admin/deliveries/replay", json=body, headers=AUTH)
    assert answer.status_code == 404, answer.text
    [line] = audit_lines(audit_log)
    assert line["partner"] == "p" * (audit.NAME_MAX - 1) + "\N{HORIZONTAL ELLIPSIS}"
    assert len(json.dumps(line)) < 500


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ConnectionRefusedError(111, "Connect call failed"), 503),  # the storage cannot do it now
        (sqlite3.OperationalError("disk I/O error"), 503),
        (RuntimeError("a bug"), 500),
    ],
)
async def test_a_failed_operation_logs_the_status_its_client_is_answered(
    audit_log: pytest.LogCaptureFixture, error: Exception, status: int
) -> None:
    """As ``service.handlers`` answers: 503 while the storage is unavailable, 500 for the rest."""

    @audit.audited
    class Example:
        async def act(self, partner_id: str) -> None:
            raise error

    with pytest.raises(type(error)):
        await Example().act("ptn_1")
    [line] = audit_lines(audit_log)
    assert (line["outcome"], line["status"]) == ("error", status)


async def test_an_operation_cancelled_part_way_is_on_the_trail(audit_log: pytest.LogCaptureFixture) -> None:
    """A client that goes away mid-operation cancels it (Sanic cancels the handler): what it had
    committed stays, so the trail says it ran and was cut short, never nothing."""
    started = asyncio.Event()

    @audit.audited
    class Example:
        async def erase_registrations(self, email: str) -> None:
            started.set()
            await asyncio.Event().wait()  # the commit the client did not wait for

    call = asyncio.ensure_future(Example().erase_registrations("ada@example.com"))
    await started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    [line] = audit_lines(audit_log)
    assert {key: line.get(key) for key in ("operation", "registration", "outcome", "status")} == {
        "operation": "erase_registrations",
        "registration": "a***@example.com",
        "outcome": "cancelled",
        "status": None,
    }


@pytest.mark.parametrize("operations", [Operations, RegistrationOperations])
def test_every_public_operation_is_audited(operations: type) -> None:
    """Each public coroutine of the operations classes is wrapped, but the marked metrics read."""
    found = {
        name: hasattr(method, "__wrapped__")
        for name, method in vars(operations).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(method)
    }
    assert found and all(wrapped or name == "outbox_stats" for name, wrapped in found.items())


def test_the_program_writes_the_trail_on_stderr(sqlite_url: str) -> None:
    """`python -m service ...` writes its audit line as JSON on stderr, the answer alone on stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "service", "waitlist", "erase", "--email", "ada@example.com"],
        env={**os.environ, "SERVICE_DATABASE_URL": sqlite_url},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == {"erased": 0}
    [line] = [json.loads(text) for text in done.stderr.splitlines()]
    assert {key: line[key] for key in ("logger", "actor", "operation", "registration", "outcome")} == {
        "logger": "service.audit",
        "actor": f"cli:{getpass.getuser()}",
        "operation": "erase_registrations",
        "registration": "a***@example.com",
        "outcome": "ok",
    }
