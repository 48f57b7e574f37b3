"""The demo database's fingerprint follows the scenario, the seed and the schema, and a current
file is reused."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from service.db.engine import migrate
from service.demo import files, scenario
from service.demo.__main__ import main

SEED = 7
SIZES = {"registrations": 500, "events": 80}
PROJECT_ROOT = Path(__file__).resolve().parents[1]


def stamped(path: Path, version: int) -> Path:
    """An empty SQLite file whose user_version is ``version``."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version={version}")
    return path


CHANGES: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "format": lambda patch: patch.setattr(scenario, "FORMAT", scenario.FORMAT + 1),
    "partners": lambda patch: patch.setattr(scenario, "PARTNERS", scenario.PARTNERS[:-1]),
    "retry schedule": lambda patch: patch.setattr(scenario, "RETRY_SCHEDULE", (1.0,)),
    "webhook timeout": lambda patch: patch.setattr(scenario, "WEBHOOK_TIMEOUT", 1.0),
    "schema head": lambda patch: patch.setattr(files, "schema_head", lambda: "9999"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_fingerprint_changes_with_what_made_the_database(
    monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Another scenario, delivery setting or schema head gives another fingerprint."""
    before = files.fingerprint(SEED, **SIZES)
    CHANGES[change](monkeypatch)
    assert files.fingerprint(SEED, **SIZES) != before


def test_fingerprint_changes_with_the_seed_and_sizes() -> None:
    """The seed and the sizes are part of it; the same arguments give the same number."""
    fingerprint = files.fingerprint(SEED, **SIZES)
    assert fingerprint == files.fingerprint(SEED, **SIZES)
    assert fingerprint != files.fingerprint(SEED + 1, **SIZES)
    assert fingerprint != files.fingerprint(SEED, registrations=400, events=80)
    assert 0 <= fingerprint < 2**31  # fits SQLite's signed 32-bit user_version


def test_fingerprint_is_the_same_in_another_process() -> None:
    """Nothing in it depends on the process (string hashing is randomised per process)."""
    code = f"from service.demo import files; print(files.fingerprint({SEED}, **{SIZES!r}))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert int(done.stdout) == files.fingerprint(SEED, **SIZES)


def test_schema_head_is_the_revision_migrations_reach(tmp_path: Path) -> None:
    """The head read from the migration scripts is what a migrated database records."""
    path = tmp_path / "migrated.db"
    migrate(f"sqlite:///{path}")
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert files.schema_head() == revision


def test_ensure_reuses_a_current_database(tmp_path: Path) -> None:
    """A file stamped with the current fingerprint is returned as it is, not made again."""
    path = stamped(tmp_path / "demo.db", files.fingerprint(SEED))
    assert files.ensure(path, SEED) == path
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)  # still empty


def test_command_leaves_a_current_database_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """python -m service.demo says a current file is up to date and leaves it."""
    path = stamped(tmp_path / "demo.db", files.fingerprint(SEED))
    assert main(["--out", str(path), "--seed", str(SEED)]) == 0
    assert capsys.readouterr().out == f"{path} is up to date (seed {SEED})\n"
    assert files.user_version(path) == files.fingerprint(SEED)


def test_user_version_of_a_missing_file_is_none(tmp_path: Path) -> None:
    """No file, no stamp: ensure() then makes it."""
    assert files.user_version(tmp_path / "absent.db") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("../var/service.db", "../var/service.db"),
        ("postgresql://reader@db/service", "postgresql://reader@db/service"),
        (None, None),
    ],
)
def test_source_passes_anything_but_demo_through(value: str | None, expected: str | None) -> None:
    """A notebook's SOURCE other than "demo" goes to the loaders untouched."""
    assert files.source(value) == expected
