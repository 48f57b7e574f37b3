"""Start the real server as a child process, for drills that kill it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


_GIVEN: set[int] = set()


def free_port() -> int:
    """A port free now on loopback, never one this process was given before: the port is only
    reserved once a child binds it, and two picks made before either child starts could otherwise
    be the same port."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def start_server(port: int, env: dict[str, str], *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """`python -m service serve` on loopback; returns once /healthz answers (or raises)."""
    full_env = {**os.environ, **env}
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
        cwd=ROOT,
        env=full_env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so a SIGKILL reaches Sanic's worker processes too
    )
    wait_ready(f"http://127.0.0.1:{port}/healthz", process)
    return process


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - loopback only
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)  # polling a child process's start-up, not waiting for a clock
    kill(process)
    raise RuntimeError(f"server did not answer {url} within {timeout} s")


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole process group: no shutdown hook runs, nothing is flushed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        kill(process)
