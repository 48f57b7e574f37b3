"""Crash drill: a server killed with SIGKILL mid-backlog delivers every event after a restart."""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from processes import free_port, kill, start_server, stop
from webhook_helpers import ADMIN_TOKEN, AUTH, Receiver, Reply, room_claimed

EVENTS = 200
# The receiver answers slowly so the backlog is still draining when the server dies; the timeout
# stays well above that delay (a pause of the test process, where the receiver runs, must not turn
# an answer into a timeout), and the lease (2 x 2 s + 5 s) bounds how late in-flight claims return.
RECEIVER_DELAY = 0.5
TIMEOUT = 2


def _statuses(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM deliveries GROUP BY status").fetchall())


def _event_ids(requests: list[Any]) -> set[str]:
    return {json.loads(request.body)["eventId"] for request in requests}


@pytest.mark.slow
def test_sigkill_mid_backlog_loses_nothing(tmp_path: Path) -> None:
    """SIGKILL while 200 deliveries drain; after a restart every event reaches the receiver."""
    database = tmp_path / "drill.db"
    env = {
        "SERVICE_DATABASE_URL": f"sqlite:///{database}",
        "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
        "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
        "SERVICE_WEBHOOK_TIMEOUT": str(TIMEOUT),
    }
    log = tmp_path / "server.log"
    with Receiver(default=Reply(delay=RECEIVER_DELAY)) as receiver:
        port = free_port()  # picked once the receiver holds its own: nothing binds between pick and use
        first = start_server(port, env, log=log)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH) as client:
                response = client.post("/admin/partners", json={"name": "P", "url": receiver.url()})
                assert response.status_code == 201
                published = set()
                for index in range(EVENTS):
                    answer = client.post("/admin/events", json=room_claimed(f"room-{index}"))
                    assert answer.status_code == 202
                    published.add(answer.json()["eventId"])
            assert receiver.wait_for(lambda requests: len(requests) >= 40, timeout=20)
        finally:
            kill(first)  # SIGKILL to the whole process group: no shutdown hook runs

        at_kill = _statuses(database)
        assert at_kill.get("delivering", 0) > 0, at_kill  # attempts really were cut off in flight
        assert len(_event_ids(receiver.requests)) < EVENTS, "the backlog drained before the kill"

        second = start_server(port, env, log=log)
        try:
            arrived = receiver.wait_for(lambda requests: _event_ids(requests) >= published, timeout=40)
            assert arrived, log.read_text()[-2000:]
            deadline = time.monotonic() + 15
            while _statuses(database) != {"delivered": EVENTS} and time.monotonic() < deadline:
                time.sleep(0.05)  # the last answers are being logged
            assert _statuses(database) == {"delivered": EVENTS}
        finally:
            stop(second)
    # At least once: deliveries cut off in flight may arrive twice, with the same delivery id.
    repeats = Counter(request.headers["x-service-delivery"] for request in receiver.requests)
    assert len(repeats) == EVENTS
    assert max(repeats.values()) <= 2
