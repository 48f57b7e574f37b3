"""The migrations build exactly the schema `service.db.tables` declares, and undo themselves."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import time
import unicodedata
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from webhook_helpers import TEST_SECRETS_KEY

from service.cli import main
from service.db.engine import alembic_config, create_engine, migrate
from service.db.tables import declared_on, metadata
from service.keyring import SEALED, parse_keys
from tests.conftest import POSTGRES_URL, RUN_ID
from tests.scratch import admin_execute

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with nothing in it; on PostgreSQL one of this test's own, dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrations.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    name = f"service_test_{RUN_ID}_migrations"
    asyncio.run(admin_execute(POSTGRES_URL, f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    asyncio.run(admin_execute(POSTGRES_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _differences(url: str) -> list[Any]:
    async def compare() -> list[Any]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: compare_metadata(
                        MigrationContext.configure(
                            sync,
                            opts={"include_object": lambda item, *_: declared_on(sync.dialect.name, item)},
                        ),
                        metadata,
                    )
                )
        finally:
            await engine.dispose()

    return asyncio.run(compare())


def _tables(url: str) -> set[str]:
    async def names() -> set[str]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return set(await conn.run_sync(lambda sync: sync.dialect.get_table_names(sync)))
        finally:
            await engine.dispose()

    return asyncio.run(names())


def test_the_migrated_schema_is_the_declared_one(empty_database: str) -> None:
    migrate(empty_database)
    assert _differences(empty_database) == []


def test_every_migration_downgrades_and_upgrades_again(empty_database: str) -> None:
    migrate(empty_database)
    command.downgrade(alembic_config(empty_database), "base")
    assert _tables(empty_database) <= {"alembic_version"}
    migrate(empty_database)
    assert _tables(empty_database) >= {table.name for table in metadata.sorted_tables}
    assert _differences(empty_database) == []


def _execute(url: str, *statements: tuple[str, dict[str, Any]]) -> list[Any]:
    async def run() -> list[Any]:
        engine = create_engine(url)
        try:
            async with engine.begin() as conn:
                results = []
                for statement, values in statements:
                    result = await conn.execute(text(statement), values)
                    results.append(result.all() if result.returns_rows else None)
                return results
        finally:
            await engine.dispose()

    return asyncio.run(run())


NFC = unicodedata.normalize("NFC", "José@Bücher.example")
NFD = unicodedata.normalize("NFD", "jose\u0301@xn--bcher-kva.example")
ROW = (
    "INSERT INTO registrations (email, email_key, intent, project, message, created_at, updated_at) "
    "VALUES (:email, :key, :intent, :project, NULL, :at, :at)"
)
PARTNER = (
    "INSERT INTO partners (id, name, url, events, status, secret, previous_secret, "
    "previous_secret_expires_at, created_at, updated_at, consecutive_failures) VALUES "
    "(:id, 'P', 'https://partner.example/', NULL, 'active', :secret, :previous, :expires, :at, :at, 0)"
)


def test_0005_moves_plaintext_secrets_and_merges_registrations_of_one_address(
    empty_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Secrets move to partner_secrets as they were (an ended previous secret is dropped), and the
    first start seals them; registrations whose addresses are one under the new identity merge
    into the earliest row for each intent, keeping the latest project."""
    migrate(empty_database, "0004")
    _execute(
        empty_database,
        (PARTNER, {"id": "ptn_a", "secret": "whsec_current", "previous": "whsec_old",
                   "expires": datetime(2999, 1, 1), "at": datetime(2026, 1, 1)}),
        (PARTNER, {"id": "ptn_b", "secret": "whsec_only", "previous": "whsec_ended",
                   "expires": datetime(2000, 1, 1), "at": datetime(2026, 1, 1)}),
        (ROW, {"email": NFC, "key": NFC.lower(), "intent": "claim", "project": "A",
               "at": datetime(2026, 1, 1)}),
        (ROW, {"email": NFD, "key": NFD.lower(), "intent": "claim", "project": "B",
               "at": datetime(2026, 1, 2)}),
        (ROW, {"email": NFD, "key": NFD.lower(), "intent": "member", "project": None,
               "at": datetime(2026, 1, 3)}),
    )  # fmt: skip
    migrate(empty_database)
    [secrets, rows] = _execute(
        empty_database,
        ("SELECT partner_id, secret, expires_at IS NULL FROM partner_secrets ORDER BY id", {}),
        ("SELECT email, email_key, intent, project FROM registrations ORDER BY id", {}),
    )
    assert [tuple(row) for row in secrets] == [
        ("ptn_a", "whsec_old", False), ("ptn_a", "whsec_current", True), ("ptn_b", "whsec_only", True)
    ]  # fmt: skip
    key = "josé@xn--bcher-kva.example"
    assert [tuple(row) for row in rows] == [(NFC, key, "claim", "B"), (NFD, key, "member", None)]

    monkeypatch.setenv("SERVICE_SECRETS_KEY", TEST_SECRETS_KEY)
    monkeypatch.setenv("SERVICE_DATABASE_URL", empty_database)
    assert main(["migrate"]) == 0
    [sealed] = _execute(empty_database, ("SELECT secret FROM partner_secrets ORDER BY id", {}))
    keyring = parse_keys(TEST_SECRETS_KEY)
    assert all(value.startswith(SEALED) for (value,) in sealed)
    assert [keyring.open(value) for (value,) in sealed] == ["whsec_old", "whsec_current", "whsec_only"]


SMALL, CAPITALS = "\u03c3\u03b1\u03c3@example.com", "\u03a3\u0391\u03a3@example.com"  # one Greek word


def test_0018_keys_a_final_sigma_as_any_other_and_merges_the_spellings_it_made_one(empty_database: str) -> None:
    """A key holding a final sigma (the capitals of a Greek word, lower-cased) is keyed again as
    its small letters: the two registrations of one intent become one, the earliest row with the
    latest project; another intent, and every other key, stay as they were."""
    migrate(empty_database, "0017")
    _execute(
        empty_database,
        (ROW, {"email": SMALL, "key": SMALL, "intent": "claim", "project": "A", "at": datetime(2026, 1, 1)}),
        (ROW, {"email": CAPITALS, "key": CAPITALS.lower(), "intent": "claim", "project": "B",
               "at": datetime(2026, 1, 2)}),
        (ROW, {"email": CAPITALS, "key": CAPITALS.lower(), "intent": "member", "project": None,
               "at": datetime(2026, 1, 3)}),
        (ROW, {"email": "Ann@Example.com", "key": "ann@example.com", "intent": "claim", "project": None,
               "at": datetime(2026, 1, 4)}),
    )  # fmt: skip
    assert CAPITALS.lower() != SMALL  # what the key was: "σας"
    migrate(empty_database)
    [rows] = _execute(empty_database, ("SELECT email, email_key, intent, project FROM registrations ORDER BY id", {}))
    assert [tuple(row) for row in rows] == [
        (SMALL, SMALL, "claim", "B"),
        (CAPITALS, SMALL, "member", None),
        ("Ann@Example.com", "ann@example.com", "claim", None),
    ]


def test_0018_looks_keys_up_a_thousand_at_a_time_and_merges_across_them(empty_database: str) -> None:
    """More keys to look up than one statement takes (1,000 here; a driver's bound of parameters,
    32,767 for asyncpg, on a larger table): each Greek capital address still finds the small
    letters it merges with, whichever statement read them."""
    migrate(empty_database, "0017")
    count = 1200
    # sigma, alpha, n, alpha, sigma; in capitals, whose last sigma lower-cases as a final sigma
    small = [f"\u03c3\u03b1{n}\u03b1\u03c3@example.com" for n in range(count)]
    capitals = [f"\u03a3\u0391{n}\u0391\u03a3@example.com" for n in range(count)]
    rows = [{"email": email, "key": email, "intent": "claim", "project": None, "at": datetime(2026, 1, 1)}
            for email in small[::2]]  # fmt: skip
    rows += [{"email": email, "key": email.lower(), "intent": "claim", "project": "P", "at": datetime(2026, 1, 2)}
             for email in capitals]  # fmt: skip
    _execute(empty_database, (ROW, rows))  # type: ignore[arg-type]
    migrate(empty_database)
    [found] = _execute(empty_database, ("SELECT email, email_key, project FROM registrations", {}))
    by_key = {key: (email, project) for email, key, project in found}
    assert len(found) == count and set(by_key) == set(small)
    assert by_key[small[0]] == (small[0], "P") and by_key[small[1]] == (capitals[1], "P")


A_PARTNER = (
    "INSERT INTO partners (id, name, url, events, status, created_at, updated_at) "
    "VALUES (:id, 'P', 'https://partner.example/', NULL, 'active', :at, :at)"
)
EVENT = (
    "INSERT INTO events (id, kind, dedupe_key, payload, occurred_at, created_at) "
    "VALUES (:id, 'room.trending', :id, '{}', :at, :at)"
)
DELIVERY = (
    "INSERT INTO deliveries (id, event_id, partner_id, status, attempts, next_attempt_at, created_at, "
    "updated_at) VALUES (:id, :event, :partner, 'delivered', 1, :at, :at, :at)"
)
ATTEMPT = (
    "INSERT INTO delivery_attempts (delivery_id, event_id, event, partner_id, attempt, started_at, "
    "duration_ms, outcome) VALUES (:id, :event, 'room.trending', :partner, 1, :at, 3, 'delivered')"
)


def _primary_key(url: str) -> list[str]:
    async def read() -> list[str]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                return list(
                    await conn.run_sync(
                        lambda sync: sync.dialect.get_pk_constraint(sync, "deliveries")["constrained_columns"]
                    )
                )
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_0013_keys_sqlite_deliveries_by_partner_and_keeps_every_row(empty_database: str) -> None:
    """On SQLite the deliveries table loses its rowid and is keyed by (partner_id, id), its rows
    and the attempts referring to them kept, and back again on downgrade; PostgreSQL keeps (id)."""
    sqlite = empty_database.startswith("sqlite")
    migrate(empty_database, "0012")
    at = datetime(2026, 1, 1)
    rows: list[tuple[str, dict[str, Any]]] = []
    for partner in ("ptn_a", "ptn_b"):
        rows.append((A_PARTNER, {"id": partner, "at": at}))
    for n in range(3):
        rows.append((EVENT, {"id": f"evt_{n}", "at": at}))
        for partner in ("ptn_a", "ptn_b"):
            ids = {"id": f"dlv_{n}_{partner}", "event": f"evt_{n}", "partner": partner, "at": at}
            rows += [(DELIVERY, ids), (ATTEMPT, ids)]
    _execute(empty_database, *rows)
    everything = "SELECT d.id, d.partner_id, a.attempt FROM deliveries d JOIN delivery_attempts a ON a.delivery_id = d.id ORDER BY d.id"
    [before] = _execute(empty_database, (everything, {}))

    migrate(empty_database)
    assert _primary_key(empty_database) == (["partner_id", "id"] if sqlite else ["id"])
    [after] = _execute(empty_database, (everything, {}))
    assert after == before and len(after) == 6
    if sqlite:
        [[(ddl,)], problems] = _execute(
            empty_database,
            ("SELECT sql FROM sqlite_master WHERE name = 'deliveries'", {}),
            ("PRAGMA foreign_key_check", {}),
        )
        assert ddl.rstrip().endswith("WITHOUT ROWID") and problems == []
        with pytest.raises(IntegrityError, match="UNIQUE"):  # an id stays unique across partners
            _execute(
                empty_database,
                (DELIVERY, {"id": "dlv_0_ptn_a", "event": "evt_0", "partner": "ptn_b", "at": at}),
            )

    command.downgrade(alembic_config(empty_database), "0012")
    assert _primary_key(empty_database) == ["id"]
    [downgraded] = _execute(empty_database, (everything, {}))
    assert downgraded == before


def _flock_waiters(lock: Path) -> int:
    """How many processes wait for an ``flock`` of ``lock`` (the kernel's ``/proc/locks`` lists
    each waiter as ``->``, with the file's inode)."""
    inode = f":{lock.stat().st_ino} "
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and "FLOCK" in line and inode in line)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads Linux's /proc/locks")
def test_processes_migrating_one_new_sqlite_file_at_once_take_turns(tmp_path: Path) -> None:
    """Four `python -m service migrate` on a new SQLite file, started while its migration lock is
    held, all wait for it; let go, they migrate one after another and every one exits 0 (without
    the lock, all but one could die of "table already exists")."""
    database = tmp_path / "var" / "service.db"
    lock = database.with_name("service.db-migrate.lock")
    database.parent.mkdir()
    env = {
        **os.environ,
        "SERVICE_DATABASE_URL": f"sqlite:///{database}",
        "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY,
    }
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    started: list[subprocess.Popen[bytes]] = []
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        started = [
            subprocess.Popen(
                [sys.executable, "-m", "service", "migrate"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(4)
        ]
        # Waits for a state, not a time: each look is at once after the last.
        deadline = time.monotonic() + 60
        while _flock_waiters(lock) < 4:
            exited = [process.returncode for process in started if process.poll() is not None]
            assert not exited, f"a migration ended without waiting for the lock: {exited}"
            assert time.monotonic() < deadline, "four migrations did not wait for the lock within 60 s"
            time.sleep(0.01)
    finally:
        os.close(holder)  # lets the lock go
        finished = [(process, *process.communicate(timeout=120)) for process in started]
    assert [(process.returncode, err.count(b"Traceback")) for process, _, err in finished] == [(0, 0)] * 4, [
        err.decode()[-2000:] for _, _, err in finished
    ]
    assert all(b"database is at the latest schema" in out for _, out, _ in finished)
    assert oct(lock.stat().st_mode & 0o777) == oct(0o600)
