"""deploy/Procfile under honcho: nginx in front of two servers and a worker, on PostgreSQL and Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.cluster import (
    Ports,
    call,
    clean_environment,
    honcho,
    scratch_backends,
    service_pid,
    stop_group,
    wait_answering,
    wait_gone,
)
from tests.processes import ROOT
from tests.tools import require_tool
from tests.webhook_helpers import ADMIN_TOKEN, AUTH, TEST_SECRETS_KEY, Receiver, room_claimed

ALLOWANCE = 2  # registrations per client in the rehearsal (SERVICE_WAITLIST_RATE_LIMIT)


def register(port: int, client: str, email: str) -> int:
    """A registration through nginx from ``client`` (the address the trusted front says it is)."""
    body = {"email": email, "intent": "claim"}
    return call(port, "POST", "/api/waitlist", body, {"X-Forwarded-For": client})[0]


def test_the_procfile_topology_limits_delivers_and_survives_a_killed_server(tmp_path: Path) -> None:
    """Limits count each real client across both servers, a publish on one server is delivered by the worker,
    and with one server killed the other answers every request through nginx."""
    require_tool("nginx", "the rehearsal puts nginx in front of the servers")
    runner = honcho()
    with scratch_backends() as backends, Receiver() as receiver:
        ports = Ports.free()  # picked once the receiver holds its own port
        env = {
            **clean_environment(),
            "SERVICE_DATABASE_URL": backends.database_url,
            "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY,
            "SERVICE_RATE_LIMIT_STORAGE": backends.redis_url,
            "SERVICE_RATE_LIMIT_KEY_PREFIX": backends.key_prefix,
            "SERVICE_WAITLIST_RATE_LIMIT": f"{ALLOWANCE}/minute",
            "SERVICE_BASE_URL": f"http://127.0.0.1:{ports.proxy}",
            "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
            "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",  # the partner is a receiver on loopback
            "CLUSTER_DIR": str(tmp_path / "nginx"),
            "CLUSTER_PORT": str(ports.proxy),
            "SERVER_1_PORT": str(ports.server_1),
            "SERVER_2_PORT": str(ports.server_2),
            "WORKER_PORT": str(ports.worker),
        }
        migrate = subprocess.run(
            [sys.executable, "-m", "service", "migrate"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert migrate.returncode == 0, migrate.stderr
        log = tmp_path / "honcho.log"
        with open(log, "wb") as out:
            topology = subprocess.Popen(
                [runner, "-f", "deploy/Procfile", "-d", str(ROOT), "start"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            alive = lambda: topology.poll() is None  # noqa: E731 - a one-line probe
            wait_answering([ports.server_1, ports.server_2, ports.worker], "/healthz", alive)
            wait_answering([ports.proxy], "/readyz", alive)

            # Each client has its own allowance, counted across both servers (nginx alternates them).
            first = [register(ports.proxy, "203.0.113.10", f"a{n}@example.com") for n in range(ALLOWANCE + 1)]
            second = [
                register(ports.proxy, "203.0.113.20", f"b{n}@example.com") for n in range(ALLOWANCE + 1)
            ]
            assert first == [200] * ALLOWANCE + [429]
            assert second == [200] * ALLOWANCE + [429]

            # A publish on server 1 (which does not deliver) is delivered by the worker.
            status, partner = call(
                ports.server_1, "POST", "/admin/partners", {"name": "Rehearsal", "url": receiver.url()}, AUTH
            )
            assert status == 201, partner
            status, published = call(ports.server_1, "POST", "/admin/events", room_claimed(), AUTH)
            assert (status, published["deliveries"]) == (202, 1)
            assert receiver.wait_for(lambda seen: len(seen) == 1, timeout=30), log.read_text()[-3000:]
            assert receiver.requests[0].headers["webhook-id"]
            # The roster, read through either server, lists the one worker: the servers deliver nothing.
            status, listed = call(ports.server_2, "GET", "/admin/workers", None, AUTH)
            assert status == 200, listed
            assert [(row["role"], row["state"]) for row in listed["workers"]] == [("worker", "live")]

            # Server 1 killed: every request through nginx is still answered, by server 2.
            pid = service_pid("serve", ports.server_1)
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid)
            answers = [call(ports.proxy, "GET", "/readyz")[0] for _ in range(6)]
            answers.append(register(ports.proxy, "203.0.113.30", "c@example.com"))
            assert answers == [200] * 7, log.read_text()[-3000:]
        finally:
            # honcho stops its processes (each in a group of its own) on SIGTERM, then ends.
            stop_group(topology)
