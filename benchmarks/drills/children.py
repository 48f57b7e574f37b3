"""The drills' child processes: servers, delivery workers and CLI commands.

Every child runs in a session of its own (``tests.processes`` kills a whole process group, which
reaches Sanic's worker processes too), is registered the moment it is spawned, and is killed when
the ``Children`` block ends, however it ends. Children get a clean environment: the drill's own
settings on top of this process's environment with every ``SERVICE_*`` and ``SANIC_*`` variable
removed, so an operator's shell cannot change what a drill proves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from tests.processes import ROOT, kill, stop, wait_ready

CLI_TIMEOUT = 60.0  # seconds: a CLI command migrates and opens an engine, then does one thing
READY_TIMEOUT = 30.0  # seconds for a child to come up (migrations, imports) on a slow machine
WORKER_READY = b"delivering webhooks"  # what `python -m service worker` logs once it is delivering


class Children:
    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self._processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Children:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for process in self._processes:
            kill(process)  # SIGKILL to the group; a no-op for one already gone
        self._processes.clear()

    @staticmethod
    def environment(settings: dict[str, str]) -> dict[str, str]:
        inherited = {
            name: value for name, value in os.environ.items() if not name.startswith(("SERVICE_", "SANIC_"))
        }
        return {**inherited, **settings}

    def spawn(self, name: str, args: list[str], settings: dict[str, str]) -> subprocess.Popen[bytes]:
        """``python -m service ARGS`` in its own session, its output appended to ``logs/NAME.log``."""
        with open(self.logs / f"{name}.log", "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "service", *args],
                cwd=ROOT,
                env=self.environment(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._processes.append(process)
        return process

    def server(self, name: str, port: int, settings: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        """Start ``serve`` on loopback; returns once /healthz answers."""
        process = self.start_server(name, port, settings, *args)
        self.wait_server(port, process)
        return process

    def start_server(
        self, name: str, port: int, settings: dict[str, str], *args: str
    ) -> subprocess.Popen[bytes]:
        """Spawn ``serve`` without waiting (start several, then ``wait_server`` each)."""
        command = ["serve", "--host", "127.0.0.1", "--port", str(port), *args]
        return self.spawn(name, command, settings)

    @staticmethod
    def wait_server(port: int, process: subprocess.Popen[bytes]) -> None:
        wait_ready(f"http://127.0.0.1:{port}/healthz", process)

    def worker(self, name: str, settings: dict[str, str], *, wait: bool = True) -> subprocess.Popen[bytes]:
        """``python -m service worker``; with ``wait``, returns once it says it is delivering."""
        log = self.logs / f"{name}.log"
        starts = log.read_bytes().count(WORKER_READY) if log.exists() else 0
        # Each on a port of its own for its probes, which the kernel picks as it binds (port 0):
        # a port picked here beforehand could be the one a server started beside it is about to
        # bind, and the probes' /healthz would then answer for that server.
        process = self.spawn(name, ["worker", "--port", "0"], settings)
        if wait:
            self.wait_worker(name, process, starts + 1)
        return process

    def wait_worker(self, name: str, process: subprocess.Popen[bytes], starts: int = 1) -> None:
        """Wait until the worker's log holds its ``starts``-th ready line (it has no port to poll)."""
        log = self.logs / f"{name}.log"
        deadline = time.monotonic() + READY_TIMEOUT
        while log.read_bytes().count(WORKER_READY) < starts:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start within {READY_TIMEOUT:.0f} s")
            time.sleep(0.05)  # polling a child's start-up

    def cli(self, settings: dict[str, str], *args: str, stdin: bytes | None = None) -> Any:
        """Run one operator command to completion; its JSON answer, or RuntimeError with stderr."""
        done = subprocess.run(
            [sys.executable, "-m", "service", *args],
            cwd=ROOT,
            env=self.environment(settings),
            input=stdin,
            capture_output=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip()[-1000:]
            raise RuntimeError(f"python -m service {' '.join(args)} exited {done.returncode}: {message}")
        return json.loads(done.stdout)

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        """SIGKILL the child's whole process group: nothing is flushed, no shutdown hook runs."""
        kill(process)

    @staticmethod
    def stop(process: subprocess.Popen[bytes]) -> None:
        """SIGTERM and wait (a clean shutdown), SIGKILL if it takes too long."""
        stop(process)

    def log_tail(self, name: str, chars: int = 1500) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""


class Kills(Protocol):
    kills: int  # SIGKILLs the plan asks for


class KillsDeliverers:
    """For a drill that SIGKILLs what delivers: on SQLite the server and its in-process worker, on
    PostgreSQL two ``worker`` processes in turn, the last kill taking both at once."""

    kind: str
    plan: Kills
    children: Children
    port: int
    settings: dict[str, str]
    server_args: tuple[str, ...]
    server: subprocess.Popen[bytes] | None
    workers: list[subprocess.Popen[bytes]]
    kills: int
    restarts: int

    def kill(self, number: int) -> str:
        """SIGKILL delivery processes and start them again; which ones."""
        if self.kind == "sqlite":
            assert self.server is not None
            self.children.kill(self.server)
            self.kills += 1
            self.server = self.children.server("server", self.port, self.settings, *self.server_args)
            self.restarts += 1
            return "the server and its in-process worker"
        chosen = [0, 1] if number == self.plan.kills and self.plan.kills > 1 else [number % 2]
        for index in chosen:
            self.children.kill(self.workers[index])
            self.kills += 1
        for index in chosen:
            self.workers[index] = self.children.worker(f"worker-{index}", self.settings)
            self.restarts += 1
        return " and ".join(f"worker {index}" for index in chosen)
