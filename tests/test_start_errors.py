"""A start that cannot work says why in one line on stderr and exits 2 (1 where the database may
answer in a moment): serve, worker and migrate alike."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from service.cli import main
from tests.cluster import call
from tests.conftest import POSTGRES_URL
from tests.pgwire import RefusingServer
from tests.processes import ROOT, free_port, kill, start_server
from tests.webhook_helpers import TEST_SECRETS_KEY

COMMANDS = (["serve", "--port", "0"], ["worker", "--port", "0"], ["migrate"])
PASSWORD = "pw-never-shown"


@dataclass(frozen=True)
class Case:
    name: str
    needs_postgres: bool
    expected: str  # what the one line must say
    status: int = 2  # 2: starting again will not help; 1: the database may answer in a moment

    def environment(self) -> dict[str, str]:
        """The SERVICE_* variables of this broken start."""
        base = make_url(POSTGRES_URL or "postgresql://postgres@127.0.0.1:5432/test")
        with_password = base.set(password=PASSWORD)
        key = {"SERVICE_SECRETS_KEY": TEST_SECRETS_KEY}
        if self.name == "malformed-url":
            return {"SERVICE_DATABASE_URL": f"postgresql://postgres:{PASSWORD}@127.0.0.1:port/db", **key}
        if self.name == "missing-database":
            missing = with_password.set(database=f"absent_{uuid.uuid4().hex[:8]}")
            return {"SERVICE_DATABASE_URL": missing.render_as_string(hide_password=False), **key}
        if self.name == "refused-role":
            refused = with_password.set(username=f"nobody_{uuid.uuid4().hex[:8]}")
            return {"SERVICE_DATABASE_URL": refused.render_as_string(hide_password=False), **key}
        if self.name == "unreachable":
            closed = with_password.set(host="127.0.0.1", port=free_port())
            return {"SERVICE_DATABASE_URL": closed.render_as_string(hide_password=False), **key}
        # The key is judged before any connection: the database named here is never reached.
        closed = with_password.set(host="127.0.0.1", port=free_port()).render_as_string(hide_password=False)
        if self.name == "unescaped-at":  # the rest of the password would be read as the host
            at = f"postgresql://postgres:{PASSWORD}@{PASSWORD}@127.0.0.1:{free_port()}/db"
            return {"SERVICE_DATABASE_URL": at, **key}
        if self.name == "unknown-query":  # asyncpg would refuse the keyword with a traceback
            return {"SERVICE_DATABASE_URL": closed + "?sslcert=x&application_name=y", **key}
        if self.name == "bad-sslmode":  # asyncpg would refuse the value with a traceback
            return {"SERVICE_DATABASE_URL": closed + "?sslmode=on", **key}
        if self.name == "bad-session-attrs":
            return {"SERVICE_DATABASE_URL": closed + "?target_session_attrs=master", **key}
        if self.name == "unverifiable-ssl":  # refused by the driver before anything is sent
            return {
                "SERVICE_DATABASE_URL": closed + "?sslmode=verify-full",
                "HOME": "/nonexistent",  # where asyncpg looks for the root certificate
                **key,
            }
        if self.name == "sqlite-with-a-host":  # two slashes: "x" would be read as a host
            return {"SERVICE_DATABASE_URL": "sqlite://x/service.db"}
        if self.name == "sqlite-in-memory":  # each connection would open an empty database
            return {"SERVICE_DATABASE_URL": "sqlite:///:memory:"}
        if self.name == "sqlite-without-a-file":  # SQLAlchemy reads it as :memory:
            return {"SERVICE_DATABASE_URL": "sqlite://"}
        if self.name == "sqlite-bad-timeout":  # the driver would fail to convert it, a traceback
            return {"SERVICE_DATABASE_URL": "sqlite:////dev/null/service.db?timeout=abc"}
        if self.name == "malformed-redis-url":
            redis = f"redis://:{PASSWORD}@127.0.0.1:port"
            return {"SERVICE_DATABASE_URL": closed, "SERVICE_RATE_LIMIT_STORAGE": redis, **key}
        if self.name == "missing-key":
            return {"SERVICE_DATABASE_URL": closed, "SERVICE_SECRETS_KEY": ""}
        assert self.name == "malformed-key"
        return {"SERVICE_DATABASE_URL": closed, "SERVICE_SECRETS_KEY": "not-a-fernet-key"}


CASES = [
    Case("malformed-url", False, "SERVICE_DATABASE_URL is not a valid URL"),
    Case("missing-database", True, 'database "absent_'),
    Case("refused-role", True, 'refused role "nobody_'),
    Case("unreachable", False, "cannot be reached (Connection refused)", status=1),
    Case("unescaped-at", False, "an @ in the user name or password is written %40"),
    Case("unknown-query", False, "unknown query parameter application_name, sslcert (accepted: ssl, sslmode"),
    Case("bad-sslmode", False, "sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full"),
    Case("bad-session-attrs", False, "target_session_attrs must be one of any, primary, standby"),
    Case("unverifiable-ssl", False, 'cannot be made as configured: root certificate file "/nonexistent/.postgresql'),
    Case("sqlite-with-a-host", False, "a SQLite URL names a file, sqlite:///relative/path.db"),
    Case("sqlite-in-memory", False, "a SQLite database in memory is not kept between connections"),
    Case("sqlite-without-a-file", False, "a SQLite database in memory is not kept between connections"),
    Case("sqlite-bad-timeout", False, "timeout must be a number of seconds greater than 0"),
    Case("malformed-redis-url", False, "SERVICE_RATE_LIMIT_STORAGE: its host or port cannot be read"),
    Case("missing-key", False, "SERVICE_SECRETS_KEY is not set"),
    Case("malformed-key", False, "SERVICE_SECRETS_KEY key 1 is not a Fernet key"),
]


def assert_one_line(err: str, case: Case) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert case.expected in lines[0]
    assert "Traceback" not in err
    assert PASSWORD not in err


def needs(case: Case) -> None:
    if case.needs_postgres and not POSTGRES_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL is not set: no PostgreSQL to refuse the start")


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_real_command_says_why_in_one_line(case: Case) -> None:
    """`python -m service` in a child process: one line naming the problem, exit 2 (1 for a database
    that does not answer now), no traceback."""
    needs(case)
    # Each case runs one command for real (serve, worker and migrate each twice); every command
    # meets every case in process below.
    command = COMMANDS[CASES.index(case) % len(COMMANDS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "SANIC_"))}
    result = subprocess.run(
        [sys.executable, "-m", "service", *command],
        cwd=ROOT,
        env={**env, **case.environment()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == case.status, result.stderr
    assert_one_line(result.stderr, case)
    assert result.stdout == ""


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command[0])
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_every_start_command_refuses_every_case(
    case: Case, command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve, worker and migrate each stop with the case's exit status and the one line, before
    serving anything."""
    needs(case)
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    for name, value in case.environment().items():
        monkeypatch.setenv(name, value)
    assert main(command) == case.status
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line(err, case)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"SERVICE_CONTENT_FILE": "/nonexistent/content.toml"}, "discovery content /nonexistent/content.toml cannot"),
        ({"SANIC_PROXIES_COUNT": "abc"}, "SANIC_PROXIES_COUNT must be a whole number of proxies"),
        ({"SANIC_PROXIES_COUNT": "-1"}, "SANIC_PROXIES_COUNT must be a whole number of proxies"),
    ],
    ids=["missing-content", "proxies-count-not-a-number", "negative-proxies-count"],
)
def test_serve_refuses_what_only_it_reads_in_one_line(
    variables: dict[str, str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The discovery content and Sanic's proxy count, read by serve alone: one line and exit 2,
    before the database is touched (no file is made)."""
    for name in list(os.environ):
        if name.startswith(("SERVICE_", "SANIC_")):
            monkeypatch.delenv(name)
    database = tmp_path / "service.db"
    monkeypatch.setenv("SERVICE_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("SERVICE_TRUSTED_PROXIES", "127.0.0.1")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--port", "0"]) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == ("", [f"configuration error: {err.removeprefix('configuration error: ').strip()}"])
    assert expected in err and "Traceback" not in err
    assert not database.exists()


NEWER_SCHEMA = (
    "error: the database is at schema revision 9999_future, which this release does not know "
    "(was it migrated by a newer release?)"
)


def _migrated_by_a_newer_release(url: str) -> None:
    with contextlib.closing(sqlite3.connect(str(make_url(url).database))) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_future'")


@pytest.mark.parametrize(
    "command",
    [["migrate"], ["workers"], ["waitlist", "erase", "--email", "ada@example.com"], ["partners", "list"]],
)
def test_a_schema_newer_than_this_release_stops_every_command_in_one_line(
    command: list[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rollback after a newer release migrated the database: exit 2, one line naming the
    revision, nothing done."""
    _migrated_by_a_newer_release(sqlite_url)
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    assert main(command) == 2
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == ("", [NEWER_SCHEMA])


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["worker", "--port", "0"]], ids=lambda c: c[0])
def test_a_schema_newer_than_this_release_stops_the_servers_for_good(
    command: list[str], sqlite_url: str
) -> None:
    """serve and worker exit 2, which their systemd units do not restart (RestartPreventExitStatus)."""
    _migrated_by_a_newer_release(sqlite_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "SANIC_"))}
    result = subprocess.run(
        [sys.executable, "-m", "service", *command],
        cwd=ROOT,
        env={**env, "SERVICE_DATABASE_URL": sqlite_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (2, "", [NEWER_SCHEMA])


def test_an_unreachable_redis_is_not_a_start_error(tmp_path: Path) -> None:
    """serve starts and serves the documents; registrations and /readyz answer 503 naming the store."""
    port = free_port()
    env = {
        "SERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'service.db'}",
        "SERVICE_RATE_LIMIT_STORAGE": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
    }
    server = start_server(port, env, "--no-worker")
    try:
        assert call(port, "GET", "/llms.txt")[0] == 200
        status, ready = call(port, "GET", "/readyz")
        assert (status, ready["database"], ready["rateLimitStore"]) == (503, "up", "down")
        status, refused = call(port, "POST", "/api/waitlist", {"email": "ada@example.com", "intent": "claim"})
        assert status == 503
        assert refused["ok"] is False
    finally:
        kill(server)


@pytest.mark.parametrize("checked", [True, False], ids=["at-the-check", "while-migrating"])
def test_a_database_held_by_another_process_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], checked: bool
) -> None:
    """A SQLite file another process holds past the busy timeout (a backup, a second migrate),
    found by the start's check or only once migrating: one line and exit status 1, which the units
    restart (the lock ends), where it was exit 2 (never restarted) or a traceback."""
    from service import cli
    from service.db import engine

    path = tmp_path / "held.db"
    for name in list(os.environ):
        if name.startswith("SERVICE_"):
            monkeypatch.delenv(name)
    # Both waits short: the driver's own before the service's pragmas, then the pragma's.
    monkeypatch.setenv("SERVICE_DATABASE_URL", f"sqlite:///{path}?timeout=0.05")
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    if not checked:
        monkeypatch.setattr(cli, "check_database", lambda url: None)  # the lock came just after it
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("CREATE TABLE held (x)")
        holder.execute("BEGIN EXCLUSIVE")
        status = main(["migrate"])
        holder.execute("ROLLBACK")
    out, err = capsys.readouterr()
    assert (status, out) == (1, "")
    [line] = err.splitlines()
    assert "locked" in line and "Traceback" not in err


@pytest.mark.parametrize(
    ("sqlstate", "message", "command"),
    [
        ("57P03", "the database system is starting up", ["serve", "--port", "0"]),
        ("57P03", "the database system is not accepting connections", ["worker", "--port", "0"]),
        ("53300", "sorry, too many clients already", ["migrate"]),
    ],
)
def test_a_database_not_taking_connections_yet_is_exit_1_so_the_units_start_again(
    sqlstate: str, message: str, command: list[str]
) -> None:
    """PostgreSQL starting up, in recovery, a standby not yet promoted, or out of connection slots
    takes the connection and refuses the session: that passes, so one line and exit 1 (the units
    restart on it), not exit 2, which they never restart."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "SANIC_"))}
    with RefusingServer(sqlstate, message) as port:
        url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/service"
        result = subprocess.run(
            [sys.executable, "-m", "service", *command],
            cwd=ROOT,
            env={**env, "SERVICE_DATABASE_URL": url, "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    assert_one_line(result.stderr, Case("not-yet", False, f"takes no connection now: {message}", status=1))
