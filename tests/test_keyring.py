"""Partner secrets at rest: sealed in the database, opened only to sign, keys that rotate, files
only their owner reads, and no start on a shared database without a key."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import insert, select
from webhook_helpers import AUTH, TEST_SECRETS_KEY, Receiver, onboard, settings

from service.app import create_app
from service.cli import main
from service.clock import utc_now
from service.db.engine import create_engine, migrate
from service.db.tables import partner_secrets
from service.keyring import SEALED, KeyringError, key_file, load_keyring, parse_keys
from service.settings import Settings
from service.webhooks.signing import verify

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _stored(database_url: str) -> list[str]:
    async def read() -> list[str]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as conn:
                return list((await conn.execute(select(partner_secrets.c.secret))).scalars())
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_the_secret_is_in_no_byte_of_the_sqlite_file_or_its_wal(make_client: Any, tmp_path: Path) -> None:
    """Onboarding and rotating leave neither secret, nor the 32 bytes behind it, in service.db or
    service.db-wal (read while the server still holds them open)."""
    with make_client(**settings()) as client:
        first = onboard(client, "https://partner.example/hook")
        rotated = client.post(f"/admin/partners/{first['id']}/rotate-secret", headers=AUTH).json
        files = [tmp_path / "service.db", tmp_path / "service.db-wal"]
        assert all(path.exists() for path in files)
        data = b"".join(path.read_bytes() for path in files)
    for secret in (first["secret"], rotated["secret"]):
        assert secret.encode() not in data
        assert secret.removeprefix("whsec_").encode() not in data
    assert data.count(SEALED.encode()) >= 2  # the sealed forms are there instead


def test_the_secret_is_not_in_the_postgresql_table(make_client: Any, database_url: str) -> None:
    """Every stored secret is a Fernet token under the configured key; none is the secret."""
    with make_client(database_url=database_url, **settings()) as client:
        created = onboard(client, "https://partner.example/hook")
        keyring = client.app.ctx.keyring
    stored = _stored(database_url)
    assert len(stored) == 1
    assert stored[0].startswith(SEALED) and created["secret"] not in stored[0]
    assert keyring.open(stored[0]) == created["secret"]


@pytest.fixture
def cli_env(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS", "1")
    return sqlite_url


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def test_signing_is_unchanged_after_a_key_rotation_and_re_encryption(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under key A, onboard and rotate; list B before A and re-encrypt; with B alone the partner's
    secrets still sign exactly as before; with A alone nothing opens them any more."""
    monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_A)
    with Receiver() as receiver:
        code, added, _ = _run(capsys, "partners", "add", "--name", "P", "--url", receiver.url())
        assert code == 0
        code, rotated, _ = _run(capsys, "partners", "rotate-secret", added["id"], "--overlap", "3600")
        assert code == 0
        before = _stored(cli_env)

        monkeypatch.setenv("SERVICE_SECRETS_KEY", f"{KEY_B},{KEY_A}")
        code, answer, _ = _run(capsys, "secrets", "re-encrypt")
        assert (code, answer) == (0, {"reencrypted": 2, "expiredDeleted": 0, "keys": 2})
        after = _stored(cli_env)
        assert set(after).isdisjoint(before)
        assert all(parse_keys(KEY_B).open(value) in (added["secret"], rotated["secret"]) for value in after)

        monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_B)
        code, tested, _ = _run(capsys, "partners", "test", added["id"])
        assert code == 0 and tested["ok"] is True
        request = receiver.requests[-1]
        now = float(request.headers["x-service-timestamp"])
        verify(request.headers, request.body, [rotated["secret"]], now=now)
        verify(request.headers, request.body, [added["secret"]], now=now)

        monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_A)
        for argv in (("partners", "test", added["id"]), ("secrets", "re-encrypt")):
            code, _, err = _run(capsys, *argv)
            assert code == 2 and "SERVICE_SECRETS_KEY opens none of the 2 partner secrets" in err
            for value in (added["secret"], rotated["secret"]):
                assert value not in err


def test_without_a_key_postgresql_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve, worker and every command that handles secrets stop with the reason; the app factory
    refuses too. Listing partners, which needs no secret, still works."""
    url = "postgresql://nobody@127.0.0.1:1/never"  # refused before any connection is tried
    monkeypatch.setenv("SERVICE_DATABASE_URL", url)
    monkeypatch.delenv("SERVICE_SECRETS_KEY", raising=False)
    for argv in (
        ["serve"],
        ["worker"],
        ["partners", "add", "--name", "P", "--url", "https://partner.example/"],
        ["partners", "rotate-secret", "ptn_x"],
        ["partners", "test", "ptn_x"],
        ["secrets", "re-encrypt"],
    ):
        assert main(argv) == 2, argv
        _, err = capsys.readouterr()
        assert "configuration error: SERVICE_SECRETS_KEY is not set" in err, argv
    with pytest.raises(KeyringError, match="SERVICE_SECRETS_KEY is not set"):
        create_app(Settings(database_url=url))


@pytest.mark.parametrize("value", ["not-a-key", "short", f"{TEST_SECRETS_KEY},x"])
def test_a_malformed_key_is_refused_with_the_reason(value: str) -> None:
    """A key that is not 32 url-safe base64 bytes names its position, never its value."""
    with pytest.raises(KeyringError, match="is not a Fernet key") as refused:
        load_keyring(Settings(database_url="postgresql://u@h/db", secrets_key=value))
    assert value.split(",")[-1] not in str(refused.value)


def test_the_embedded_key_file_is_private_and_reused(tmp_path: Path) -> None:
    """Without SERVICE_SECRETS_KEY, SQLite gets a key file beside the database: 0600, made once."""
    config = Settings(database_url=f"sqlite:///{tmp_path / 'var' / 'service.db'}")
    first = load_keyring(config)
    path = key_file(config.database_url)
    assert path is not None and path == tmp_path / "var" / "service.db.key"
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    sealed = first.seal("whsec_example")
    assert load_keyring(config).open(sealed) == "whsec_example"  # the same key, read back
    path.chmod(0o644)
    load_keyring(config)
    assert _mode(path) == 0o600


def test_the_database_files_are_private(tmp_path: Path) -> None:
    """var/ is made 0700; service.db, its -wal and -shm, the key file and the migration lock are
    0600 while the server writes them."""
    database = tmp_path / "var" / "service.db"
    url = f"sqlite:///{database}"
    migrate(url)
    app = create_app(Settings(database_url=url, **settings()))
    from tests.conftest import Client

    with Client(app) as client:
        onboard(client, "https://partner.example/hook")
        modes = {path.name: _mode(path) for path in database.parent.iterdir()}
    assert _mode(database.parent) == 0o700
    assert modes == {
        "service.db": 0o600,
        "service.db-wal": 0o600,
        "service.db-shm": 0o600,
        "service.db.key": 0o600,
        "service.db-migrate.lock": 0o600,
    }


def test_files_left_readable_are_made_private_at_start(tmp_path: Path) -> None:
    """A var/ and database files an earlier release left 0755/0644 are private after a start."""
    database = tmp_path / "var" / "service.db"
    url = f"sqlite:///{database}"
    migrate(url)
    load_keyring(Settings(database_url=url))
    (database.parent / "service.db-wal").touch()  # as a server killed mid-run leaves it (empty is valid)
    database.parent.chmod(0o755)
    for path in database.parent.iterdir():
        path.chmod(0o644)
    migrate(url)
    load_keyring(Settings(database_url=url))
    assert _mode(database.parent) == 0o700
    modes = {path.name: _mode(path) for path in database.parent.iterdir()}
    assert {"service.db", "service.db.key"} <= set(modes)
    assert set(modes.values()) == {0o600}


def test_a_directory_shared_with_other_files_keeps_its_mode(tmp_path: Path) -> None:
    """A database put in a directory holding other things leaves that directory's mode alone
    (it is the operator's); the database's own files are still private."""
    (tmp_path / "notes.txt").write_text("the operator's")
    tmp_path.chmod(0o755)
    migrate(f"sqlite:///{tmp_path / 'service.db'}")
    assert _mode(tmp_path) == 0o755
    assert _mode(tmp_path / "service.db") == 0o600


def test_a_partner_whose_secret_no_key_opens_waits_and_the_others_are_delivered(
    make_client: Any, clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A secret sealed under a key since dropped holds back its own partner's deliveries (an error
    line names the partner), never anyone else's; with the key back, they go out."""
    from webhook_helpers import drain, publish, room_claimed

    with Receiver() as receiver, make_client(**settings(secrets_key=KEY_A)) as client:
        lost = onboard(client, receiver.url("/lost"))
        kept = onboard(client, receiver.url("/kept"))

        async def reseal_lost_under_b() -> None:
            from sqlalchemy import update

            other = parse_keys(KEY_B)
            async with client.app.ctx.engine.begin() as conn:
                await conn.execute(
                    update(partner_secrets)
                    .where(partner_secrets.c.partner_id == lost["id"])
                    .values(secret=other.seal(lost["secret"]))
                )

        client.run(reseal_lost_under_b())
        publish(client, room_claimed())
        drain(client)
        assert [request.path for request in receiver.requests] == ["/kept"]
        assert any(
            record.message.startswith("partner secret unreadable") and record.partner == lost["id"]
            for record in caplog.records
        )
        client.app.ctx.keyring = parse_keys(f"{KEY_A},{KEY_B}")
        clock.advance(60)  # past the lease of the claim that could not sign
        drain(client)
        assert sorted(request.path for request in receiver.requests) == ["/kept", "/lost"]
        verify(
            receiver.to("/lost")[0].headers,
            receiver.to("/lost")[0].body,
            lost["secret"],
            now=clock().timestamp(),
        )
        assert kept["secret"] not in caplog.text and lost["secret"] not in caplog.text


def test_processes_starting_together_agree_on_one_key_file(tmp_path: Path) -> None:
    """Eight callers making the key file at once end with one key, whole, and no draft left."""
    from concurrent.futures import ThreadPoolExecutor

    config = Settings(database_url=f"sqlite:///{tmp_path / 'service.db'}")
    with ThreadPoolExecutor(8) as pool:
        keyrings = list(pool.map(lambda _: load_keyring(config), range(8)))
    sealed = keyrings[0].seal("whsec_example")
    assert all(keyring.open(sealed) == "whsec_example" for keyring in keyrings)
    assert [path.name for path in tmp_path.iterdir()] == ["service.db.key"]


def _store(database_url: str, partner_id: str, value: str) -> None:
    """Store ``value`` as one of the partner's secrets, as it is: sealed under a key of another
    deployment, or plaintext as migration 0005 moved an earlier release's."""

    async def write() -> None:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as conn:
                await conn.execute(
                    insert(partner_secrets).values(partner_id=partner_id, secret=value, created_at=utc_now())
                )
        finally:
            await engine.dispose()

    asyncio.run(write())


def test_a_key_that_opens_none_of_the_stored_secrets_is_refused_before_anything_changes(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another deployment's key, or a key file made afresh beside a restored database: serve,
    worker, migrate and every command that seals or opens a secret stop with the reason and the
    way back, and nothing is sealed under that key, not even a secret stored in plaintext."""
    monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_A)
    with Receiver() as receiver:
        code, added, _ = _run(capsys, "partners", "add", "--name", "P", "--url", receiver.url())
        assert code == 0
    _store(cli_env, added["id"], parse_keys(KEY_A).seal("whsec_" + "p" * 32))
    _store(cli_env, added["id"], "whsec_" + "q" * 32)  # plaintext, from an earlier release
    before = sorted(_stored(cli_env))

    monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_B)
    assert main(["migrate"]) == 2  # the schema is moved first: the check reads today's tables
    out, err = capsys.readouterr()
    assert out.startswith("database is at the latest schema")
    assert err.startswith("configuration error: SERVICE_SECRETS_KEY opens none of the 2 partner secrets")
    for argv in (
        ("partners", "add", "--name", "Q", "--url", "https://partner.example/"),
        ("partners", "rotate-secret", added["id"]),
        ("partners", "test", added["id"]),
        ("secrets", "re-encrypt"),
    ):
        code, out, err = _run(capsys, *argv)
        assert (code, out) == (2, None), argv
        assert err.startswith("configuration error: SERVICE_SECRETS_KEY opens none of the 2 partner secrets")
        assert "secrets discard-unreadable" in err
        assert added["secret"] not in err
    assert sorted(_stored(cli_env)) == before  # the plaintext one too: nothing sealed under B
    for argv in (["serve", "--port", "0"], ["worker", "--port", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "service", *argv],
            env={**os.environ, "SERVICE_DATABASE_URL": cli_env, "SERVICE_SECRETS_KEY": KEY_B},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, (argv, done.stderr)
        assert "SERVICE_SECRETS_KEY opens none of the 2 partner secrets" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_key_that_opens_some_stored_secrets_starts_and_says_how_many_it_does_not(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A key dropped too soon: the partners whose secrets it opens carry on, a warning counts the
    rest."""
    monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_A)
    code, added, _ = _run(capsys, "partners", "add", "--name", "P", "--url", "https://partner.example/")
    assert code == 0
    _store(cli_env, added["id"], parse_keys(KEY_B).seal("whsec_" + "b" * 32))
    code, rotated, _ = _run(capsys, "partners", "rotate-secret", added["id"], "--overlap", "60")
    assert code == 0 and rotated["liveSecrets"] == 3
    assert "1 of 2 partner secrets were sealed with a key SERVICE_SECRETS_KEY no longer lists" in caplog.text


def test_discarding_what_no_key_opens_is_the_way_back_when_every_key_is_lost(
    cli_env: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every key lost: discard-unreadable deletes the secrets no key opens and lists the partners
    left without one; a rotation then gives each a secret that signs, under the new key."""
    monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_A)
    with Receiver() as receiver:
        code, lost, _ = _run(capsys, "partners", "add", "--name", "Lost", "--url", receiver.url("/lost"))
        assert code == 0
        code, other, _ = _run(capsys, "partners", "add", "--name", "Other", "--url", receiver.url("/other"))
        assert code == 0

        monkeypatch.setenv("SERVICE_SECRETS_KEY", KEY_B)
        code, answer, err = _run(capsys, "secrets", "discard-unreadable")
        assert code == 0, err
        assert answer == {
            "discarded": 2,
            "expiredDeleted": 0,
            "partnersWithoutSecret": sorted([lost["id"], other["id"]]),
        }
        assert _stored(cli_env) == []
        code, again, _ = _run(capsys, "secrets", "discard-unreadable")
        assert (code, again["discarded"]) == (0, 0)

        code, rotated, err = _run(capsys, "partners", "rotate-secret", lost["id"])
        assert code == 0, err
        code, tested, _ = _run(capsys, "partners", "test", lost["id"])
        assert code == 0 and tested["ok"] is True
        request = receiver.requests[-1]
        verify(request.headers, request.body, [rotated["secret"]], now=float(request.headers["x-service-timestamp"]))
        code, answer, _ = _run(capsys, "secrets", "discard-unreadable")
        assert answer["partnersWithoutSecret"] == [other["id"]]
        assert all(parse_keys(KEY_B).opens(value) for value in _stored(cli_env))
