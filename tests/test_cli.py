"""`python -m service`: what serve tells the operator before it starts, every help screen, and how a
command ends when the database or its output fails it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import ROOT, free_port, start_server, stop
from sqlalchemy.engine import make_url

from service import commands
from service.cli import main, serve_settings, serve_warnings
from service.db import engine
from service.db.registrations import email_key
from service.settings import Settings
from service.webhooks import partners

EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 - an argument under test, nothing binds to it


@pytest.mark.parametrize(
    ("workers", "storage", "warned"),
    [(1, "memory://", False), (2, "memory://", True), (2, "redis://127.0.0.1:6379/0", False)],
)
def test_serve_warns_when_processes_would_each_count_the_limit(
    workers: int, storage: str, warned: bool
) -> None:
    found = serve_warnings(Settings(rate_limit_storage=storage), workers)
    assert bool(found) is warned
    assert all(f"up to {workers} times" in warning and "redis://" in warning for warning in found)


@pytest.mark.parametrize(("workers", "token", "warned"), [(1, "t" * 32, False), (2, "t" * 32, True), (2, None, False)])
def test_serve_warns_that_processes_sharing_a_port_cannot_be_scraped_each(
    workers: int, token: str | None, warned: bool
) -> None:
    """With the admin API on (its /admin/metrics), N processes on one port show N sets of
    counters, one a scrape: ``serve`` says so, and how to run them for monitoring."""
    found = serve_warnings(Settings(admin_token=token, rate_limit_storage="redis://127.0.0.1:6379/0"), workers)
    assert bool(found) is warned
    assert all("one process per port" in warning for warning in found)


def _help(capsys: pytest.CaptureFixture[str], *path: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def _screens(capsys: pytest.CaptureFixture[str], *path: str) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every help screen under ``path``: the screen, then its commands' screens, depth first."""
    text = _help(capsys, *path)
    yield path, text
    for name in re.findall(r"^    (\S+)", text, re.M):  # the command list, indented four spaces
        yield from _screens(capsys, *path, name)


def _named_settings(text: str) -> list[str]:
    return re.findall(r"^  (SERVICE_[A-Z0-9_]+)$", text.split("settings (environment variables):\n", 1)[-1], re.M)


def _options_without_help(text: str) -> list[str]:
    lines = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [
        line.split()[0]
        for line, following in zip(lines, [*lines[1:], ""], strict=True)
        if line.startswith("  -") and len(line.strip().split("  ")) == 1 and not following.startswith(" " * 8)
    ]


EXPECTED = {
    (): set(commands.EVERY_SETTING),
    ("serve",): set(commands.EVERY_SETTING),
    ("migrate",): {"database_url", "secrets_key"},
    ("waitlist", "erase"): {"database_url"},
    ("partners", "add"): {"database_url", "secrets_key", "webhook_allow_private_urls"},
    ("partners", "test"): {"database_url", "secrets_key", "webhook_allow_private_urls", "webhook_timeout", "webhook_connect_timeout"},
    ("partners", "rotate-secret"): {"database_url", "secrets_key", "secret_rotation_overlap"},
    ("secrets", "re-encrypt"): {"database_url", "secrets_key"},
    ("secrets", "discard-unreadable"): {"database_url", "secrets_key"},
    ("partners", "update"): {"database_url", "webhook_allow_private_urls"},
    ("partners", "delete"): {"database_url"},
    ("deliveries", "list"): {"database_url"},
    ("deliveries", "replay"): {"database_url"},
    ("deliveries", "resend"): {"database_url"},
    ("worker",): {
        "database_url", "secrets_key", "webhook_allow_private_urls", "webhook_timeout", "webhook_retry_schedule",
        "webhook_connect_timeout", "webhook_max_in_flight", "webhook_breaker_failures",
        "webhook_breaker_cooldown", "webhook_disable_after", "retention_days",
    },
    ("prune",): {"database_url", "retention_days"},
}


def test_every_help_screen_reads_well_and_names_its_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """Each command and subcommand has a description, help for every option, no backticks, and
    the SERVICE_* variables it reads with their meaning and default."""
    screens = dict(_screens(capsys))
    assert {("waitlist", "export"), ("waitlist", "erase"), ("partners", "retry"), ("events", "publish"), ("worker",)} <= set(screens)
    for path, text in screens.items():
        assert "`" not in text, path
        assert _options_without_help(text) == [], path
        description = text.split("\n\n", 2)[1]
        assert description[:1].isupper() and description.rstrip().endswith("."), path
        named = _named_settings(text)
        assert "SERVICE_DATABASE_URL" in named, path
        assert len(named) == len(set(named)), (path, "a setting listed twice")
        for name in named:
            field = Settings.model_fields[name.removeprefix("SERVICE_").lower()]
            assert field.description is not None and field.description.split()[0] in text, (path, name)
    for path, expected in EXPECTED.items():
        assert set(_named_settings(screens[path])) == {commands.variable(name) for name in expected}, path


def test_the_host_and_port_options_say_what_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    """serve and worker explain --host and --port and show their defaults."""
    serve, worker = (" ".join(_help(capsys, command).split()) for command in ("serve", "worker"))
    assert "--host HOST address to listen on (default: 127.0.0.1)" in serve
    assert "--port PORT port to listen on (default: 8000)" in serve
    assert "--host HOST address of /healthz, /readyz, /metrics (default: 127.0.0.1)" in worker
    assert "--port PORT their port, 0 for any free one (default: 8001)" in worker


def test_serve_says_its_base_url_follows_host_and_port(capsys: pytest.CaptureFixture[str]) -> None:
    """Unset, serve's base URL is the address it serves (serve_settings), not the setting's own
    default, which the other commands use."""
    serve, worker = (" ".join(_help(capsys, *command).split()) for command in (("serve",), ("worker",)))
    base = "SERVICE_BASE_URL The public base URL; every absolute URL the service writes starts with it."
    assert f"{base} Default: http://HOST:PORT, as --host and --port give them." in serve
    assert "SERVICE_BASE_URL" not in worker
    everything = " ".join(_help(capsys).split())
    assert f"{base} Default: http://127.0.0.1:8000." in everything


def test_every_setting_has_a_description() -> None:
    """The help screens' settings list is built from the Settings model; each field says what it is."""
    text = commands.settings_help(commands.EVERY_SETTING)
    for name, field in Settings.model_fields.items():
        assert field.description, name
        assert commands.variable(name) in text


@pytest.mark.parametrize(
    ("host", "port", "base_url"),
    [
        ("127.0.0.1", 8000, "http://127.0.0.1:8000"),
        ("127.0.0.1", 9000, "http://127.0.0.1:9000"),
        ("localhost", 8080, "http://localhost:8080"),
        (EVERY_INTERFACE, 9000, "http://127.0.0.1:9000"),
        ("::", 9000, "http://[::1]:9000"),
        ("::1", 9000, "http://[::1]:9000"),
        ("192.0.2.7", 80, "http://192.0.2.7:80"),
    ],
)
def test_an_unset_base_url_follows_what_serve_listens_on(host: str, port: int, base_url: str) -> None:
    """Without SERVICE_BASE_URL, serve's documents name its own host and port (loopback for every interface)."""
    settings = serve_settings(Settings(), host, port)
    assert settings.base_url == base_url
    assert settings.database_url == Settings().database_url  # nothing else changes


def test_a_set_base_url_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """SERVICE_BASE_URL, when set, wins over the host and port, from the environment or a caller."""
    monkeypatch.setenv("SERVICE_BASE_URL", "https://launchrooms.example/")
    assert serve_settings(Settings(), "127.0.0.1", 9000).base_url == "https://launchrooms.example"
    monkeypatch.delenv("SERVICE_BASE_URL")
    given = Settings(base_url="http://127.0.0.1:8000")
    assert serve_settings(given, "127.0.0.1", 9000).base_url == "http://127.0.0.1:8000"


def test_serving_every_interface_without_a_base_url_is_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.0.0.0 with SERVICE_BASE_URL unset gets a warning naming the variable; set, or on loopback, none."""
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)
    [warning] = serve_warnings(Settings(), 1, EVERY_INTERFACE)
    assert "SERVICE_BASE_URL" in warning
    assert serve_warnings(Settings(), 1, "127.0.0.1") == []
    monkeypatch.setenv("SERVICE_BASE_URL", "https://launchrooms.example")
    assert serve_warnings(Settings(), 1, EVERY_INTERFACE) == []


@pytest.mark.slow
def test_serve_on_another_port_links_to_that_port(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`python -m service serve --port P` with SERVICE_BASE_URL unset (as `make serve PORT=P` runs it):
    /api/v1 and the catalog link to port P, not to the default 8000."""
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)
    port = free_port()
    env = {"SERVICE_DATABASE_URL": f"sqlite:///{tmp_path / 'service.db'}"}
    server = start_server(port, env, "--no-worker", log=tmp_path / "server.log")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1", timeout=10) as response:
            index = json.load(response)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/webhooks/events", timeout=10) as response:
            catalog = json.load(response)
    finally:
        stop(server)
    base = f"http://127.0.0.1:{port}"
    assert index["publicApi"] == f"{base}/api/v1"
    assert all(link.startswith(base + "/") for link in index["links"].values()), index["links"]
    assert catalog["publicApi"] == f"{base}/api/v1"
    assert all(entry["schemaUrl"].startswith(base + "/") for entry in catalog["events"])


STAMP = "2026-06-29 12:00:00.000000"
NO_SPACE = "error: the output cannot be written (No space left on device)"


def _register(url: str, count: int) -> None:
    """``count`` registrations written straight into the file (no command adds any)."""
    rows = [(f"u{n}@example.com", email_key(f"u{n}@example.com"), STAMP, STAMP) for n in range(count)]
    with contextlib.closing(sqlite3.connect(str(make_url(url).database))) as conn, conn:
        conn.executemany(
            "INSERT INTO registrations (email, email_key, intent, created_at, updated_at) "
            "VALUES (?, ?, 'claim', ?, ?)",
            rows,
        )


def _audit_lines(stderr: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [line for line in lines if line["logger"] == "service.audit"]


def test_a_database_locked_past_the_busy_timeout_is_one_line_and_exit_1(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another process holding the write lock past the busy timeout: one line, exit status 1, the
    registration kept, and the audit line says 503 as the admin API would answer."""
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    caplog.set_level(logging.INFO, logger="service.audit")
    _register(sqlite_url, 1)
    path = str(make_url(sqlite_url).database)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("BEGIN IMMEDIATE")
        code = main(["waitlist", "erase", "--email", "u0@example.com"])
        holder.execute("ROLLBACK")
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "error: the database cannot do this now (database is locked); try again shortly"
    ]
    audited = [record for record in caplog.records if record.name == "service.audit"]
    assert [getattr(record, "status", None) for record in audited] == [503]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM registrations").fetchone() == (1,)


def test_a_database_gone_in_the_middle_of_a_command_is_one_line_and_exit_1(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The connection refused once the command is under way (PostgreSQL restarting, say)."""
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)

    async def refused(*_: object, **__: object) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(partners, "list_partners", refused)
    assert main(["partners", "list"]) == 1
    out, err = capsys.readouterr()
    assert (out, err.splitlines()) == (
        "",
        ["error: the database cannot do this now ([Errno 111] Connection refused); try again shortly"],
    )


def _command(url: str, *argv: str, **options: Any) -> subprocess.Popen[bytes]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("SERVICE_")}
    return subprocess.Popen(
        [sys.executable, "-m", "service", *argv],
        cwd=ROOT,
        env={**env, "SERVICE_DATABASE_URL": url},
        stderr=subprocess.PIPE,
        **options,
    )


def test_output_to_a_reader_that_went_away_ends_quietly_with_exit_1(sqlite_url: str) -> None:
    """`waitlist export | head -2`: the export stops with exit status 1 and no traceback, and the
    audit line says the reader went away (cancelled), not that the database (503) or the service
    (500) failed."""
    _register(sqlite_url, 5000)  # far more than a pipe holds: the export is still writing
    command = _command(sqlite_url, "waitlist", "export", stdout=subprocess.PIPE)
    assert command.stdout is not None and command.stderr is not None
    first = [command.stdout.readline() for _ in range(2)]
    command.stdout.close()
    err = command.stderr.read().decode()
    assert command.wait(timeout=60) == 1
    assert first[0].startswith(b"email,intent,")
    assert "Traceback" not in err and "Exception ignored" not in err
    assert [line for line in err.splitlines() if not line.startswith("{")] == []
    [line] = _audit_lines(err)
    assert line["outcome"] == "cancelled" and "status" not in line


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full to write to")
@pytest.mark.parametrize(
    "argv", [["workers"], ["waitlist", "export"], ["waitlist", "export", "--format", "jsonl"]]
)
def test_output_to_a_full_disk_is_one_line_and_exit_1(sqlite_url: str, argv: list[str]) -> None:
    """`> /dev/full`: one line saying the output cannot be written, exit status 1, no traceback, and
    the audit line gives that reason, neither a storage fault (503) nor a service error (500)."""
    _register(sqlite_url, 3)
    with Path("/dev/full").open("wb") as full:
        command = _command(sqlite_url, *argv, stdout=full)
        _, err_bytes = command.communicate(timeout=60)
    err = err_bytes.decode()
    assert command.returncode == 1
    assert "Traceback" not in err and "Exception ignored" not in err
    assert [line for line in err.splitlines() if not line.startswith("{")] == [NO_SPACE]
    found = [(line["outcome"], line.get("status"), line.get("reason")) for line in _audit_lines(err)]
    if argv == ["workers"]:  # the answer is printed once the operation is done
        assert found == [("ok", None, None)]
    else:  # the export writes as it reads
        assert found == [("error", None, "No space left on device")]
