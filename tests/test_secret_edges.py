"""Secrets at their edges: a partner left with no secret (after ``secrets discard-unreadable``) is
refused a test send in the error shape, counts no live secret, and its deliveries wait ``pending``
until ``rotate-secret``; a key file that cannot be read or holds no key stops a start as a
configuration error naming the file."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import delete, select, text, update
from webhook_helpers import (
    ADMIN_TOKEN,
    AUTH,
    Receiver,
    deliveries,
    drain,
    onboard,
    publish,
    room_claimed,
    settings,
)

from service.cli import main
from service.clock import format_timestamp
from service.db.tables import partner_secrets, secret_digests
from service.keyring import KeyringError, key_file, load_keyring, parse_keys
from service.settings import Settings
from service.webhooks import partners
from service.webhooks.operations import UNSIGNABLE
from service.webhooks.signing import secret_digest, verify
from service.webhooks.worker import lease_for

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
CONFLICT = {"ok": False, "message": UNSIGNABLE}


def trending(number: int) -> dict[str, Any]:
    """A room.trending event, a kind partners may batch."""
    slug = f"room-{number}"
    return {
        "event": "room.trending",
        "slug": slug,
        "roomUrl": f"https://launchrooms.example/rooms/{slug}",
        "metric": "visits",
        "value": 1000 + number,
        "window": "24h",
    }


def _discard(client: Any, partner_id: str) -> None:
    """Leave the partner without a secret as ``secrets discard-unreadable`` does once every key that
    sealed it is lost: its secret sealed under a key the app does not hold, then discarded."""

    async def go() -> None:
        now = client.app.ctx.clock()
        async with client.app.ctx.engine.begin() as conn:
            await partners.delete_expired_secrets(conn, now=now)  # as the command does first
            await conn.execute(
                update(partner_secrets)
                .where(partner_secrets.c.partner_id == partner_id)
                .values(secret=parse_keys(KEY_B).seal("whsec_" + "l" * 43))
            )
            assert await partners.discard_unreadable(conn, client.app.ctx.keyring, now=now) == 1
            assert await partners.without_secret(conn) == [partner_id]

    client.run(go())


# --- a test send ------------------------------------------------------------------------------


def test_a_test_send_to_a_partner_without_a_secret_is_a_conflict(make_client: Any, database_url: str) -> None:
    """POST /admin/partners/<id>/test: 409 in the error shape, saying to rotate; nothing is sent."""
    with (
        Receiver() as receiver,
        make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client,
    ):
        partner = onboard(client, receiver.url())
        _discard(client, partner["id"])
        answer = client.post(f"/admin/partners/{partner['id']}/test", headers=AUTH)
        unknown = client.post("/admin/partners/ptn_none/test", headers=AUTH)
    assert (answer.status, answer.json) == (409, CONFLICT)
    assert (unknown.status, unknown.json) == (404, {"ok": False, "message": "No partner has this id."})
    assert receiver.requests == []


def test_the_consoles_send_test_says_why_it_was_not_done(make_client: Any) -> None:
    """The console's "Send test" for such a partner: the refusal page (409) with the reason."""
    with make_client(**settings(secrets_key=KEY_A)) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook")
        _discard(client, partner["id"])
        origin = {"origin": "http://127.0.0.1:8000"}  # the settings' default base URL
        signed_in = client.post(
            "/console/login", data={"token": ADMIN_TOKEN, "next": "/console/partners"}, headers=origin
        )
        cookies = {"console_session": signed_in.cookies["console_session"]}
        page = client.get(f"/console/partners/{partner['id']}", cookies=cookies).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        answer = client.post(
            f"/console/partners/{partner['id']}/test",
            data={"csrf": csrf.group(1)},
            headers=origin,
            cookies=cookies,
        )
    assert answer.status_code == 409
    assert UNSIGNABLE in answer.text


@pytest.fixture
def cli_env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS", "1")
    monkeypatch.delenv("SERVICE_SECRETS_KEY", raising=False)
    return sqlite_url


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_test_command_for_a_partner_without_a_secret_exits_1_with_the_error_shape(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit's repro: added under the key file, every secret discarded under another key, then
    ``partners test``: the error document on stderr and exit status 1, no traceback; ``partners
    show`` counts no live secret until ``rotate-secret`` gives it one."""
    with Receiver() as receiver:
        code, out, _ = _run(capsys, "partners", "add", "--name", "A", "--url", receiver.url())
        assert code == 0
        partner_id = json.loads(out)["id"]
        monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_B)
        code, out, _ = _run(capsys, "secrets", "discard-unreadable")
        assert (code, json.loads(out)["partnersWithoutSecret"]) == (0, [partner_id])
        monkeypatch.delenv("SERVICE_SECRETS_KEY")

        code, out, err = _run(capsys, "partners", "test", partner_id)
        assert (code, out) == (1, "")
        assert json.loads(err[err.index("{\n") :]) == CONFLICT
        assert "Traceback" not in err
        code, out, _ = _run(capsys, "partners", "show", partner_id)
        assert (code, json.loads(out)["liveSecrets"]) == (0, 0)

        code, out, _ = _run(capsys, "partners", "rotate-secret", partner_id)
        assert (code, json.loads(out)["liveSecrets"]) == (0, 1)
        code, out, _ = _run(capsys, "partners", "test", partner_id)
        assert (code, json.loads(out)["ok"]) == (0, True)
    assert len(receiver.requests) == 1


# --- liveSecrets ------------------------------------------------------------------------------


def test_live_secrets_counts_the_rows_stored(make_client: Any, database_url: str, clock: Any) -> None:
    """liveSecrets is what signs: 1 after onboarding, 2 in a rotation's overlap, 1 once it ends,
    0 once discarded, in the listing and the partner alike."""
    with make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook")
        path = f"/admin/partners/{partner['id']}"

        def counted() -> tuple[int, int]:
            listed = client.get("/admin/partners", headers=AUTH).json["partners"]
            return client.get(path, headers=AUTH).json["liveSecrets"], listed[0]["liveSecrets"]

        assert counted() == (1, 1)
        client.post(f"{path}/rotate-secret", json={"overlapSeconds": 60}, headers=AUTH)
        assert counted() == (2, 2)
        clock.advance(61)
        assert counted() == (1, 1)
        _discard(client, partner["id"])
        assert counted() == (0, 0)


def test_the_digests_of_secrets_stored_before_they_were_kept_are_written_at_start(
    make_client: Any, database_url: str
) -> None:
    """Onboarding and rotation keep each secret's digest; a secret stored without one (before
    migration 0016) gets it when a process next starts and opens the secrets (``wiring.seal``)."""

    async def kept(client: Any, partner_id: str) -> frozenset[str]:
        async with client.app.ctx.engine.connect() as conn:
            return await partners.digests(conn, partner_id)

    async def forget(client: Any) -> None:
        async with client.app.ctx.engine.begin() as conn:
            await conn.execute(delete(secret_digests))

    with make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client:
        partner = onboard(client, "http://127.0.0.1:9/hook")
        rotated = client.post(f"/admin/partners/{partner['id']}/rotate-secret", headers=AUTH).json["secret"]
        issued = {secret_digest(partner["secret"]), secret_digest(rotated)}
        assert client.run(kept(client, partner["id"])) == issued
        client.run(forget(client))
        assert client.run(kept(client, partner["id"])) == frozenset()
    with make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client:
        assert client.run(kept(client, partner["id"])) == issued


def test_processes_starting_together_each_keep_the_missing_digests_once(
    empty_postgres: str, clock: Any
) -> None:
    """Servers and workers started together after an upgrade each find the old secrets' digests
    missing; the second to write one waits for the first and goes on, its start not failed."""
    from service.db.engine import create_engine

    keyring = parse_keys(KEY_A)

    async def race() -> tuple[int, int, int]:
        engine = create_engine(empty_postgres)
        try:
            async with engine.begin() as conn:
                new = partners.NewPartner("Old", "http://127.0.0.1:9/hook", None, None)
                await partners.create_partner(conn, new, now=clock(), keyring=keyring)
                await conn.execute(delete(secret_digests))
            first = await engine.connect()
            second = await engine.connect()
            try:
                await first.begin()
                await second.begin()
                written = await partners.record_digests(first, keyring, now=clock())
                waiting = asyncio.ensure_future(partners.record_digests(second, keyring, now=clock()))
                await _blocked_on_a_lock(engine)  # the second has reached its write, behind the first
                await first.commit()
                also = await waiting
                await second.commit()
            finally:
                await first.close()
                await second.close()
            async with engine.connect() as conn:
                kept = len((await conn.execute(select(secret_digests))).all())
        finally:
            await engine.dispose()
        return written, also, kept

    assert asyncio.run(race()) == (1, 0, 1)


async def _blocked_on_a_lock(engine: Any) -> None:
    """Return once a session of this database waits on a lock (at most 10 s)."""
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    async with engine.connect() as conn:
        for _ in range(1000):
            if await conn.scalar(waiting):
                return
            await conn.rollback()  # pg_stat_activity holds still within a transaction: look anew
            await asyncio.sleep(0.01)
    raise AssertionError("no session waited on a lock")


# --- the worker -------------------------------------------------------------------------------


def test_deliveries_of_a_partner_without_a_secret_wait_pending_and_go_once_it_is_rotated(
    make_client: Any, database_url: str, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker hands them back unclaimed: pending, no attempt, due again a lease later (not at
    every turn), never holding up another partner; resend and replay leave them waiting the same
    way; rotate-secret sends them at once, signed with the new secret."""
    with (
        Receiver() as receiver,
        make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client,
    ):
        started = clock()
        lost = onboard(client, receiver.url("/lost"))
        onboard(client, receiver.url("/kept"))
        publish(client, room_claimed("before"))
        assert drain(client) == 2
        _discard(client, lost["id"])
        clock.advance(1)
        publish(client, room_claimed("after"))
        assert drain(client) == 1
        # The first two go out at once, from two senders, in either order.
        paths = [request.path for request in receiver.requests]
        assert (sorted(paths[:2]), paths[2:]) == (["/kept", "/lost"], ["/kept"])
        lease = lease_for(client.app.ctx.settings)
        waiting, delivered = deliveries(client, partner=lost["id"])  # newest first
        assert (waiting["status"], waiting["attempts"], waiting["nextAttemptAt"]) == (
            "pending",
            [],
            format_timestamp(clock() + lease),
        )
        assert any(
            record.message.startswith("partner has no secret to sign with") and record.partner == lost["id"]
            for record in caplog.records
        )

        assert drain(client) == 0  # not due again before the lease would have ended
        assert deliveries(client, partner=lost["id"]) == [waiting, delivered]

        resent = client.post(f"/admin/deliveries/{waiting['id']}/resend", headers=AUTH)
        assert resent.status == 202, resent.json
        replay = {"partner": lost["id"], "since": format_timestamp(started), "status": "delivered"}
        replayed = client.post("/admin/deliveries/replay", json=replay, headers=AUTH)
        assert (replayed.status, replayed.json) == (202, {"deliveries": 1})
        assert drain(client) == 0
        found = deliveries(client, partner=lost["id"])
        assert [(delivery["status"], len(delivery["attempts"])) for delivery in found] == [
            ("pending", 0),
            ("pending", 1),  # its first delivery's attempt, none since
        ]
        assert len(receiver.requests) == 3

        rotated = client.post(f"/admin/partners/{lost['id']}/rotate-secret", headers=AUTH).json
        assert drain(client) == 2  # at once: the clock has not moved
        for sent in receiver.to("/lost")[1:]:
            verify(sent.headers, sent.body, rotated["secret"], now=clock().timestamp())
        assert {delivery["status"] for delivery in deliveries(client, partner=lost["id"])} == {"delivered"}


def test_a_partner_without_a_secret_is_claimed_once_a_lease_however_much_waits(
    make_client: Any, database_url: str, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim that takes one of its deliveries (its cap is 1) puts off the rest with it: one claim
    and one warning a lease, not one claim a turn for each delivery; a lease later, one more."""
    with make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client:
        lost = onboard(client, "http://127.0.0.1:9/lost", maxInFlight=1)
        _discard(client, lost["id"])
        for number in range(3):
            publish(client, room_claimed(f"room-{number}"))

        def warned() -> int:
            return sum(record.message.startswith("partner has no secret") for record in caplog.records)

        lease = lease_for(client.app.ctx.settings)
        assert (drain(client), warned()) == (0, 1)
        found = deliveries(client, partner=lost["id"])
        assert {(d["status"], d["nextAttemptAt"]) for d in found} == {
            ("pending", format_timestamp(clock() + lease))
        }
        clock.advance(lease.total_seconds())
        assert (drain(client), warned()) == (0, 2)


def test_a_batch_of_a_partner_without_a_secret_waits_pending_too(
    make_client: Any, database_url: str, clock: Any
) -> None:
    """A batch formed for such a partner is handed back like any delivery: pending, its members
    batched in it; after rotate-secret it goes out whole."""
    with (
        Receiver() as receiver,
        make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client,
    ):
        batching = {"events": ["room.trending"], "maxEvents": 2, "maxWaitSeconds": 60}
        lost = onboard(client, receiver.url("/lost"), batch=batching)
        _discard(client, lost["id"])
        for number in (1, 2):
            publish(client, trending(number))
        assert drain(client) == 0
        found = deliveries(client, partner=lost["id"])
        assert sorted(delivery["status"] for delivery in found) == ["batched", "batched", "pending"]
        assert all(delivery["attempts"] == [] for delivery in found)

        client.post(f"/admin/partners/{lost['id']}/rotate-secret", headers=AUTH)
        assert drain(client) == 1
        assert len(receiver.to("/lost")) == 1
        assert {delivery["status"] for delivery in deliveries(client, partner=lost["id"])} == {"delivered"}


def test_a_secret_under_a_dropped_key_leaves_its_deliveries_pending_until_the_key_is_back(
    make_client: Any, database_url: str, clock: Any
) -> None:
    """The other way to have nothing to sign with: pending, not delivering, until the key is listed
    again and the lease's time has passed."""
    with (
        Receiver() as receiver,
        make_client(**settings(secrets_key=KEY_A), database_url=database_url) as client,
    ):
        lost = onboard(client, receiver.url("/lost"))

        async def reseal_under_b() -> None:
            async with client.app.ctx.engine.begin() as conn:
                await conn.execute(
                    update(partner_secrets)
                    .where(partner_secrets.c.partner_id == lost["id"])
                    .values(secret=parse_keys(KEY_B).seal(lost["secret"]))
                )

        client.run(reseal_under_b())
        publish(client, room_claimed())
        assert drain(client) == 0
        (waiting,) = deliveries(client, partner=lost["id"])
        assert (waiting["status"], waiting["attempts"]) == ("pending", [])
        client.app.ctx.keyring = parse_keys(f"{KEY_A},{KEY_B}")
        clock.advance(lease_for(client.app.ctx.settings).total_seconds())
        assert drain(client) == 1
        assert len(receiver.to("/lost")) == 1


# --- the key file -----------------------------------------------------------------------------


def _non_ascii(path: Path) -> None:
    path.write_bytes(b"caf\xc3\xa9")


def _garbage(path: Path) -> None:
    path.write_text("garbage\n")


def _commas(path: Path) -> None:
    path.write_text(",\n")


def _directory(path: Path) -> None:
    path.mkdir()


BAD_FILES = [
    pytest.param(_non_ascii, "does not hold a Fernet key", id="not-ascii"),
    pytest.param(_garbage, "does not hold a Fernet key", id="not-a-key"),
    pytest.param(_commas, "does not hold a Fernet key", id="no-key"),
    pytest.param(_directory, "cannot be read or made: Is a directory", id="a-directory"),
]


@pytest.mark.parametrize(("spoil", "reason"), BAD_FILES)
def test_a_bad_key_file_is_a_keyring_error_naming_the_file(tmp_path: Path, spoil: Any, reason: str) -> None:
    """Not ASCII, not a key, no key at all, a directory: KeyringError naming the file and what is
    wrong, never SERVICE_SECRETS_KEY (unset), never a byte of the file."""
    config = Settings(database_url=f"sqlite:///{tmp_path / 'service.db'}")
    path = key_file(config.database_url)
    assert path is not None
    spoil(path)
    with pytest.raises(KeyringError) as refused:
        load_keyring(config)
    message = str(refused.value)
    assert message.startswith(f"the key file {path} ") and reason in message
    assert "SERVICE_SECRETS_KEY key" not in message
    assert "garbage" not in message and "caf" not in message


@pytest.mark.parametrize(
    "command", [["serve", "--port", "0"], ["worker", "--port", "0"], ["migrate"]], ids=lambda c: c[0]
)
@pytest.mark.parametrize(("spoil", "reason"), BAD_FILES)
def test_every_start_with_a_bad_key_file_is_one_configuration_line_and_exit_2(
    cli_env: str,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    spoil: Any,
    reason: str,
) -> None:
    """serve, worker and migrate: ``configuration error: the key file ...``, exit status 2, never
    the database blamed."""
    path = key_file(cli_env)
    assert path is not None
    spoil(path)
    code, out, err = _run(capsys, *command)
    assert (code, out) == (2, "")
    assert err.splitlines() == [err.strip()]
    assert err.startswith(f"configuration error: the key file {path} ") and reason in err


def test_an_unreadable_key_file_is_a_configuration_error(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key file this user may not read (as ``chmod 000`` leaves it for anyone but root, met here
    as the error reading it raises, which root never gets): one line naming it, exit status 2."""
    path = key_file(cli_env)
    assert path is not None
    _garbage(path)
    read_text = Path.read_text

    def refuse(self: Path, *args: Any, **kwargs: Any) -> str:
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    code, out, err = _run(capsys, "worker", "--port", "0")
    assert (code, out) == (2, "")
    assert err == f"configuration error: the key file {path} cannot be read or made: Permission denied\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_a_key_file_of_mode_000_is_a_configuration_error(tmp_path: Path) -> None:
    """The real thing where the tests do not run as root."""
    config = Settings(database_url=f"sqlite:///{tmp_path / 'service.db'}")
    load_keyring(config)
    path = key_file(config.database_url)
    assert path is not None
    path.chmod(0)
    with pytest.raises(KeyringError, match="cannot be read or made: Permission denied"):
        load_keyring(config)


def test_the_real_worker_with_a_non_ascii_key_file_says_so_in_one_line(cli_env: str) -> None:
    """``python -m service worker`` in a child process: one line, exit status 2, no traceback."""
    path = key_file(cli_env)
    assert path is not None
    _non_ascii(path)
    env = {name: value for name, value in os.environ.items() if name != "SERVICE_SECRETS_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "service", "worker", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"configuration error: the key file {path} does not hold a Fernet key (32 url-safe base64-encoded "
        "bytes): restore it from a backup, or set SERVICE_SECRETS_KEY to the key that sealed the partner "
        "secrets (with none stored yet, delete it and a new one is made)"
    ]
