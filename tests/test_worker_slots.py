"""Partners hanging at their cap do not hold up a healthy one: with 50 partners that never answer
(each at its in-flight cap, 400 attempts hanging), a healthy partner's deliveries still go out
without waiting for a timeout. The server delivers from its own process (``serve``)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from service.db.engine import migrate
from tests.processes import free_port, kill, start_server
from tests.webhook_helpers import ADMIN_TOKEN, AUTH, Receiver, Reply, milestone

HANGING = 50
CAP = 8  # SERVICE_WEBHOOK_MAX_IN_FLIGHT's default: each hanging partner holds this many attempts
TIMEOUT = 10.0  # SERVICE_WEBHOOK_TIMEOUT here
HANG = 9.0  # seconds a hanging partner holds each attempt: nearly the whole timeout


def test_fifty_hanging_partners_leave_room_for_a_healthy_one(tmp_path: Path) -> None:
    """A healthy partner gets all its deliveries in less than half an attempt timeout while 50
    partners hang at their caps."""
    url = f"sqlite:///{tmp_path / 'service.db'}"
    migrate(url)
    env = {
        "SERVICE_DATABASE_URL": url,
        "SERVICE_ADMIN_TOKEN": ADMIN_TOKEN,
        "SERVICE_WEBHOOK_ALLOW_PRIVATE_URLS": "1",
        "SERVICE_WEBHOOK_TIMEOUT": str(TIMEOUT),
        "SERVICE_WEBHOOK_MAX_IN_FLIGHT": str(CAP),
        "SERVICE_WEBHOOK_RETRY_SCHEDULE": "600",
    }
    with Receiver(Reply(delay=HANG)) as hanging, Receiver() as healthy:
        port = free_port()  # picked once the receivers hold theirs: nothing binds between pick and use
        server = start_server(port, env)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH, timeout=30) as admin:
                for number in range(HANGING):
                    body = {"name": f"Hanging {number}", "url": hanging.url(f"/hang/{number}")}
                    assert admin.post("/admin/partners", json=body).status_code == 201
                assert admin.post("/admin/partners", json={"name": "Healthy", "url": healthy.url()}).status_code == 201
                began = time.monotonic()
                for number in range(CAP):  # every partner gets CAP deliveries: the hanging ones fill their caps
                    assert admin.post("/admin/events", json=milestone(value=number)).status_code == 202
                arrived = healthy.wait_for(lambda requests: len(requests) >= CAP, timeout=TIMEOUT / 2)
                took = time.monotonic() - began
                # Meanwhile the hanging partners really held more attempts than the worker's old
                # concurrency (256), which left the healthy partner waiting a whole timeout.
                held = hanging.wait_for(lambda requests: len(requests) >= 256, timeout=HANG / 2)
            assert arrived, f"the healthy partner got {len(healthy.requests)} of {CAP} within {TIMEOUT / 2} s"
            assert took < TIMEOUT / 2
            assert held
        finally:
            kill(server)


def test_the_threat_model_names_the_workers_own_default_of_attempts_in_flight() -> None:
    """docs/threat-model.md tells operators how many attempts a worker has in flight by default: the
    figure is the worker's own (``CONCURRENCY``), for ``serve`` and ``python -m service worker``."""
    import re

    from service.webhooks.worker import CONCURRENCY

    text = (Path(__file__).resolve().parents[1] / "docs" / "threat-model.md").read_text()
    stated = re.search(r"flight \((\d+) by default, as in `serve`; `worker --concurrency`\)", text)
    assert stated is not None, "the threat model no longer states the default"
    assert int(stated.group(1)) == CONCURRENCY
