"""What the rehearsal tests share: a fresh PostgreSQL database and Redis prefix, free ports, HTTP on loopback,
and finding one process of the topology to kill."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_URL, REDIS_URL
from tests.processes import free_port
from tests.scratch import admin_execute, redis_keys
from tests.tools import require_tool

VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Backends:
    database_url: str
    redis_url: str
    key_prefix: str


@contextmanager
def scratch_backends(*, create: bool = True) -> Iterator[Backends]:
    """A database of its own on the test PostgreSQL (made here unless the caller makes it) and a Redis
    key prefix of its own, both removed after."""
    if not POSTGRES_URL or not REDIS_URL:
        pytest.skip("SERVICE_TEST_POSTGRES_URL and SERVICE_TEST_REDIS_URL are needed for the rehearsal")
    name = f"service_cluster_{uuid.uuid4().hex[:12]}"
    prefix = f"service-cluster-{uuid.uuid4().hex[:12]}"
    if create:
        asyncio.run(admin_execute(POSTGRES_URL, f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield Backends(url, REDIS_URL, prefix)
    finally:
        asyncio.run(admin_execute(POSTGRES_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        asyncio.run(redis_keys(REDIS_URL, prefix, delete=True))


def honcho() -> str:
    """honcho from this environment (it is locked in the dev extra), else from PATH."""
    return shutil.which("honcho", path=str(VENV_BIN)) or require_tool("honcho", "it runs deploy/Procfile")


def clean_environment() -> dict[str, str]:
    """This process's environment without any SERVICE_ or SANIC_ setting, this venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "SANIC_"))}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


@dataclass(frozen=True)
class Ports:
    proxy: int
    server_1: int
    server_2: int
    worker: int

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port())


def call(
    port: int, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """One request on loopback; the JSON answer (or the text), whatever the status."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method, headers={**(headers or {})}
    )
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback only
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_answering(ports: list[int], path: str, alive: Any, timeout: float = 60.0) -> None:
    """Poll ``path`` on each port until it answers 200 (a start-up, not a clock); ``alive()`` must hold."""
    deadline = time.monotonic() + timeout
    waiting = list(ports)
    while waiting and time.monotonic() < deadline:
        assert alive(), "the topology stopped before it was ready"
        try:
            if call(waiting[0], "GET", path)[0] == 200:
                waiting.pop(0)
                continue
        except OSError:
            pass
        time.sleep(0.1)  # polling processes' start-up
    assert not waiting, f"ports {waiting} never answered {path} within {timeout} s"


def service_pid(command: str, port: int) -> int:
    """The Python process running ``python -m service COMMAND ... --port PORT`` (not its supervisor)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if "python" in Path(argv[0]).name and command in argv and f"{port}" in argv and "service" in argv:
            return int(entry.name)
    raise AssertionError(f"no `service {command}` process on port {port}")


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.02)  # polling the kernel for the process's end
    raise AssertionError(f"process {pid} still runs")


def stop_group(pgid: int, timeout: float = 30.0) -> None:
    """SIGTERM every process of the group, then wait for them all to end (SIGKILL past ``timeout``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)  # polling the processes' shutdown
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
