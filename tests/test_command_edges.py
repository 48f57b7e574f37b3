"""The edges of the operator commands: storage faults that will not pass on their own, a SQLite
file that cannot be kept where it is configured, refusals in the admin API's error shape (capped as
it caps them), and every onboarding option the admin API takes."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import os
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from service.cli import main
from service.db import engine as db_engine
from service.db.engine import create_engine
from service.db.faults import lasting, unavailable
from service.errors import FIELD_ERRORS_SHOWN
from service.webhooks.partners import MAX_IN_FLIGHT_LIMIT
from tests.conftest import POSTGRES_URL, RUN_ID
from tests.scratch import admin_execute, migrated_database
from tests.test_webhook_cli import run
from tests.webhook_helpers import AUTH, TEST_SECRETS_KEY, settings


def _only(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    """The environment of a command: these ``SERVICE_*`` variables and no others."""
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def scratch_postgres() -> Iterator[str]:
    """A migrated database of this test's own on the machine's PostgreSQL, free to be damaged."""
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    with migrated_database(POSTGRES_URL, f"service_edges_{RUN_ID}_{uuid.uuid4().hex[:6]}") as url:
        yield url


def _damage(url: str, statement: str) -> None:
    """Run ``statement`` on the database behind the service's back."""
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(str(make_url(url).database))) as conn, conn:
            conn.execute(statement)
        return
    asyncio.run(admin_execute(url, statement))


# --- storage faults that will not pass ----------------------------------------------------------


async def _raised(url: str, *statements: str) -> Exception:
    """What the service's own engine raises running ``statements`` in one transaction on ``url``."""
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
    except Exception as error:
        return error
    finally:
        await engine.dispose()
    raise AssertionError(f"{statements} raised nothing")


def _sqlite_fault(case: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Exception:
    """A real SQLite error of the named kind, raised through the service's engine."""
    database = folder / "service.db"
    if case == "no such table":
        return asyncio.run(_raised(f"sqlite:///{database}", "SELECT * FROM workers"))
    if case == "file is not a database":
        database.write_bytes(b"not a database, only text " * 200)
        return asyncio.run(_raised(f"sqlite:///{database}", "SELECT 1"))
    if case == "attempt to write a readonly database":  # opened read-only: root may write any file
        with contextlib.closing(sqlite3.connect(database)) as conn:
            conn.execute("CREATE TABLE t (x)")
        url = f"sqlite:///file:{database}?mode=ro&uri=true"
        return asyncio.run(_raised(url, "INSERT INTO t VALUES (1)"))
    if case == "unable to open database file":  # the path names a directory that is not there
        # The driver's own error: aiosqlite's thread outlives a connection that never opened.
        try:
            sqlite3.connect(f"file:{folder / 'absent' / 'x.db'}?mode=rw", uri=True)
        except sqlite3.OperationalError as error:
            return error
        raise AssertionError("the database opened")
    if case == "database or disk is full":  # a database allowed no more pages than it has
        fill = "INSERT INTO t SELECT randomblob(100000) FROM (SELECT 1 UNION ALL SELECT 2)"
        return asyncio.run(_raised(f"sqlite:///{database}", "CREATE TABLE t (b)", "PRAGMA max_page_count=8", fill))
    assert case == "database is locked"
    monkeypatch.setattr(db_engine, "SQLITE_BUSY_TIMEOUT_MS", 0)
    with contextlib.closing(sqlite3.connect(database, isolation_level=None)) as holder:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        return asyncio.run(_raised(f"sqlite:///{database}?timeout=0", "INSERT INTO t VALUES (1)"))


@pytest.mark.parametrize(
    ("case", "passes"),
    [
        ("no such table", False),
        ("file is not a database", False),
        ("attempt to write a readonly database", False),
        ("unable to open database file", False),
        ("database or disk is full", True),
        ("database is locked", True),
    ],
)
def test_sqlite_faults_are_503_and_only_some_pass(
    case: str, passes: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every storage fault is one a request is answered 503 for; a damaged schema, a file that is
    not a database, one that may not be written or opened where it is configured will not pass."""
    error = _sqlite_fault(case, tmp_path, monkeypatch)
    assert case in str(error)
    assert (unavailable(error), lasting(error)) == (True, not passes)


@pytest.mark.parametrize(
    ("statement", "passes"),
    [
        ("SELECT * FROM no_such_table", False),  # 42P01 undefined_table
        ("SELECT no_such_column FROM alembic_version", False),  # 42703 undefined_column
        ("SET TRANSACTION READ ONLY; CREATE TABLE t (x int)", True),  # 25006: a standby after a failover
    ],
)
def test_postgresql_faults_are_503_and_only_some_pass(statement: str, passes: bool) -> None:
    """A table or column missing will not pass; a read-only transaction (a standby) does."""
    if not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to test against")
    error = asyncio.run(_raised(POSTGRES_URL, *statement.split("; ")))
    assert (unavailable(error), lasting(error)) == (True, not passes)


def test_a_refused_row_is_no_storage_fault(sqlite_url: str) -> None:
    """A row the database refuses is the request's fault, neither 503 nor lasting."""
    error = asyncio.run(
        _raised(sqlite_url, "INSERT INTO alembic_version VALUES ('x')", "INSERT INTO alembic_version VALUES ('x')")
    )
    assert (unavailable(error), lasting(error)) == (False, False)


WORKERS_GONE = {
    "sqlite": "error: the database cannot do this (no such table: workers); trying again will not help",
    "postgres": 'error: the database cannot do this (relation "workers" does not exist); trying again will not help',
}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_table_missing_is_one_line_and_exit_2(
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dropped table stops the command in one line with exit status 2, which the units do not
    restart, not exit 1 (restarted for ever) nor a traceback."""
    url: str = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "scratch_postgres")
    _damage(url, "DROP TABLE workers")
    _only(monkeypatch, SERVICE_DATABASE_URL=url, SERVICE_SECRETS_KEY=TEST_SECRETS_KEY)
    assert main(["workers"]) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == ("", [WORKERS_GONE[backend]])


def test_a_column_missing_is_one_line_and_exit_2(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A schema other than this release's (a column dropped) is as lasting as a table dropped."""
    _damage(sqlite_url, "ALTER TABLE workers DROP COLUMN loop")
    _only(monkeypatch, SERVICE_DATABASE_URL=sqlite_url)
    assert main(["workers"]) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == (
        "",
        ["error: the database cannot do this (no such column: workers.loop); trying again will not help"],
    )


def test_a_request_meeting_a_table_missing_on_postgresql_is_503(scratch_postgres: str, make_client: Any) -> None:
    """The server answers a request meeting a table dropped under it 503, as any storage fault, not
    500: nothing was accepted."""
    with make_client(database_url=scratch_postgres, secrets_key=TEST_SECRETS_KEY, **settings()) as client:
        _damage(scratch_postgres, "DROP TABLE workers")
        response = client.get("/admin/workers", headers=AUTH)
    assert (response.status, response.json, response.headers.get("retry-after")) == (
        503,
        {"ok": False, "message": "The service is briefly unavailable; try again shortly."},
        "5",
    )


# --- a SQLite file that cannot be kept where it is configured -----------------------------------

EVERY_KIND = [
    pytest.param(["partners", "add", "--name", "P", "--url", "https://x.example/"], id="partners-add"),  # key file
    pytest.param(["secrets", "re-encrypt"], id="secrets-re-encrypt"),
    pytest.param(["migrate"], id="migrate"),
    pytest.param(["workers"], id="workers"),
    pytest.param(["waitlist", "export"], id="waitlist-export"),
    pytest.param(["serve", "--port", "0"], id="serve"),
    pytest.param(["worker", "--port", "0"], id="worker"),
]


@pytest.mark.parametrize("argv", EVERY_KIND)
@pytest.mark.parametrize("depth", [1, 2], ids=["parent", "grandparent"])
def test_a_file_where_the_directory_must_be_is_one_line_and_exit_2(
    argv: list[str], depth: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sqlite:////etc/hostname/x.db`: every command, serve and worker alike, stops with one line
    naming the file in the way and exit status 2, a configuration error no restart mends."""
    blocker = tmp_path / "hostname"
    blocker.write_text("a file\n")
    database = blocker / "x.db" if depth == 1 else blocker / "below" / "x.db"
    _only(monkeypatch, SERVICE_DATABASE_URL=f"sqlite:///{database}")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == (
        "",
        [
            f"error: the SQLite database {database} cannot be kept there ({blocker} is not a directory); "
            "check SERVICE_DATABASE_URL"
        ],
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hostname"]


def _mkdir_failing(number: int) -> Any:
    def mkdir(self: Path, *args: Any, **kwargs: Any) -> None:
        raise OSError(number, os.strerror(number), str(self))

    return mkdir


@pytest.mark.parametrize("argv", EVERY_KIND)
def test_a_directory_that_may_not_be_made_is_one_line_and_exit_2(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Permission denied making the database's directory (the tests run as root, whom no mode
    stops, so the refusal is the kernel's answer played back): one line naming it, exit status 2."""
    directory = tmp_path / "private"
    _only(monkeypatch, SERVICE_DATABASE_URL=f"sqlite:///{directory / 'x.db'}")
    monkeypatch.setattr(Path, "mkdir", _mkdir_failing(errno.EACCES))
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == (
        "",
        [
            f"error: the SQLite database {directory / 'x.db'} cannot be kept there (Permission denied: "
            f"{directory}); check SERVICE_DATABASE_URL"
        ],
    )


@pytest.mark.parametrize("argv", [["workers"], ["waitlist", "export"]], ids=["workers", "waitlist-export"])
def test_a_full_disk_making_the_directory_may_pass_exit_1(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No space to make the directory is a moment's fault, as a full disk is anywhere: exit 1."""
    directory = tmp_path / "full"
    _only(monkeypatch, SERVICE_DATABASE_URL=f"sqlite:///{directory / 'x.db'}")
    monkeypatch.setattr(Path, "mkdir", _mkdir_failing(errno.ENOSPC))
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == (
        "",
        [f"error: the database cannot do this now ([Errno 28] No space left on device: '{directory}'); try again shortly"],
    )


# --- refusals in the admin API's error shape ----------------------------------------------------


def test_a_refusal_names_as_many_fields_as_the_admin_api_does(
    make_client: Any, sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`events publish -` with 500 unknown members prints what POST /admin/events answers: the
    first 20 field errors, then one saying how many more."""
    event = {"event": "room.claimed", **{f"x{number}": 1 for number in range(500)}}
    with make_client(**settings()) as client:
        answered = client.post("/admin/events", json=event, headers=AUTH)
    assert answered.status == 400
    _only(monkeypatch, SERVICE_DATABASE_URL=sqlite_url)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(json.dumps(event).encode())))
    code, out, err = run(capsys, "events", "publish", "-")
    assert (code, out, err) == (1, None, answered.json)
    assert len(err["errors"]) == FIELD_ERRORS_SHOWN + 1
    assert err["errors"][-1] == {"field": "body", "code": "more_errors", "message": "486 more fields are at fault."}


@pytest.mark.parametrize(
    ("name", "reason"), [("missing.json", "No such file or directory"), ("", "Is a directory")]
)
def test_a_file_that_cannot_be_read_is_refused_in_the_error_shape(
    name: str, reason: str, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`events publish /nonexistent` and `events publish /tmp`: the error shape naming the FILE
    argument, exit status 1, as any refusal of a command's input."""
    _only(monkeypatch, SERVICE_DATABASE_URL=sqlite_url)
    assert run(capsys, "events", "publish", str(tmp_path / name)) == (
        1,
        None,
        {
            "ok": False,
            "message": "The request is not valid.",
            "errors": [{"field": "file", "code": "invalid", "message": f"The file cannot be read: {reason}."}],
        },
    )


# --- partners add --max-in-flight ---------------------------------------------------------------


def test_partners_add_sets_the_partners_own_cap(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-in-flight N onboards the partner with its own cap, as maxInFlight does."""
    _only(monkeypatch, SERVICE_DATABASE_URL=sqlite_url, SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS="1")
    code, added, _ = run(
        capsys, "partners", "add", "--name", "P", "--url", "http://127.0.0.1:9/hook", "--max-in-flight", "3"
    )
    assert (code, added["maxInFlight"]) == (0, 3)
    assert run(capsys, "partners", "show", added["id"])[1]["maxInFlight"] == 3


@pytest.mark.parametrize(
    ("option", "member"),
    [("0", 0), (str(MAX_IN_FLIGHT_LIMIT + 1), MAX_IN_FLIGHT_LIMIT + 1), ("2.5", 2.5), ("lots", "lots"), ("", "")],
)
def test_partners_add_refuses_a_cap_as_the_admin_api_does(
    option: str, member: Any, make_client: Any, sqlite_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cap the admin API refuses as maxInFlight, the command refuses with the same body."""
    body = {"name": "P", "url": "http://127.0.0.1:9/hook", "maxInFlight": member}
    with make_client(**settings()) as client:
        answered = client.post("/admin/partners", json=body, headers=AUTH)
    assert answered.status == 400
    _only(monkeypatch, SERVICE_DATABASE_URL=sqlite_url, SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS="1")
    argv = ["partners", "add", "--name", "P", "--url", "http://127.0.0.1:9/hook", "--max-in-flight", option]
    assert run(capsys, *argv) == (1, None, answered.json)
    assert run(capsys, "partners", "list")[1] == {"partners": []}
