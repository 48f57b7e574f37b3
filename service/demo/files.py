"""The demo database on disk: written in one step, stamped with what made it, made again when stale.

The stamp (SQLite's ``user_version``) is a fingerprint of the scenario (``scenario.digest``), the
seed and the schema's head revision. Edits to the service that change neither leave the file as
it is; ``python -m service.demo --force`` (or ``python -m analytics.render``) makes it afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from service.db.engine import alembic_config
from service.demo import scenario
from service.demo.driver import Summary, generate
from service.keyring import KEY_FILE_SUFFIX

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_PATH = PROJECT_ROOT / "var" / "demo.db"
DEMO = "demo"  # the notebooks' SOURCE value that means "the seeded demo database"


def schema_head() -> str:
    """The newest migration's revision id: the schema every new database is migrated to."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:
        raise RuntimeError("the migration scripts have no head revision")
    return head


def fingerprint(
    seed: int = scenario.DEFAULT_SEED,
    registrations: int = scenario.REGISTRATIONS,
    events: int = scenario.EVENTS,
) -> int:
    """What a demo database is made from: the scenario, the seed and the schema head.

    Kept in SQLite's ``user_version`` so a database made from another scenario or schema is made
    again, not read.
    """
    made_from = f"{scenario.digest(seed, registrations, events)}/{seed}/{schema_head()}"
    digest = hashlib.sha256(made_from.encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF  # user_version is signed 32-bit


def user_version(path: Path) -> int | None:
    """The stamp of the database at ``path``; None when there is no file."""
    if not path.is_file():
        return None
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def write(
    out: Path,
    seed: int = scenario.DEFAULT_SEED,
    *,
    registrations: int = scenario.REGISTRATIONS,
    events: int = scenario.EVENTS,
) -> Summary:
    """Generate into a temporary file beside ``out``, then move it into place in one step."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"{out.name}.{os.getpid()}.partial")
    # The key file beside the database (service.keyring) goes with it: the partners' secrets in the
    # demo database are encrypted under it.
    partial_key, out_key = (path.with_name(path.name + KEY_FILE_SUFFIX) for path in (partial, out))
    for leftover in (partial, partial_key, *(partial.with_name(partial.name + s) for s in ("-wal", "-shm"))):
        leftover.unlink(missing_ok=True)
    try:
        summary = asyncio.run(generate(partial, seed, registrations=registrations, events=events))
        with contextlib.closing(sqlite3.connect(partial)) as conn:
            # One self-contained file (no -wal beside it), stamped with what made it.
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute(f"PRAGMA user_version={fingerprint(seed, registrations, events)}")
        if partial_key.exists():
            os.replace(partial_key, out_key)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
        partial_key.unlink(missing_ok=True)
    return summary


def ensure(path: Path = DEMO_PATH, seed: int = scenario.DEFAULT_SEED) -> Path:
    """The demo database at ``path``, generated first if it is missing or stale.

    Generation runs in a child process (``python -m service.demo``), so a notebook kernel keeps
    none of the server's state and shows none of its output unless it fails.
    """
    if user_version(path) == fingerprint(seed):
        return path
    command = [sys.executable, "-m", "service.demo", "--out", str(path), "--seed", str(seed), "--force"]
    done = subprocess.run(  # noqa: S603 - our own module, run with our own interpreter
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"generating the demo database failed:\n{done.stdout}{done.stderr}")
    return path


def source(value: str | os.PathLike[str] | None = DEMO) -> str | os.PathLike[str] | None:
    """What a notebook's ``SOURCE`` names: ``"demo"`` is the demo database (made on first use);
    anything else is passed to ``analytics.load`` as it is (a path, a URL, or None for
    ``$SERVICE_DATABASE_URL``)."""
    if value == DEMO:
        return ensure()
    return value
