"""A server killed with SIGKILL while clients register loses no registration it answered 200."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import pytest

from tests.processes import free_port, kill, start_server
from tests.test_waitlist import stored_rows

pytestmark = pytest.mark.slow


async def _register_until_killed(port: int, answered: list[str], stop: threading.Event, concurrency: int = 16) -> None:
    url = f"http://127.0.0.1:{port}/api/waitlist"
    counter = iter(range(10**9))

    async def client(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            email = f"crash{next(counter)}@example.com"
            try:
                async with session.post(url, json={"email": email, "intent": "claim"}) as response:
                    if response.status == 200:
                        answered.append(email)
            except (TimeoutError, aiohttp.ClientError):
                if stop.is_set():
                    return
                await asyncio.sleep(0.01)

    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigkill_under_load_loses_no_answered_registration(database_url, tmp_path, workers):
    """Kill -9 the server mid-load; every email answered 200 is in the database afterwards."""
    port = free_port()
    env = {
        "SERVICE_DATABASE_URL": database_url,
        "SERVICE_WAITLIST_RATE_LIMIT": "1000000/minute",
    }
    server = start_server(port, env, "--workers", workers, "--no-worker", log=tmp_path / "server.log")
    answered: list[str] = []
    stop = threading.Event()
    load = threading.Thread(target=lambda: asyncio.run(_register_until_killed(port, answered, stop)))
    load.start()
    try:
        # Kill once a few hundred registrations have been acknowledged, whatever the machine's speed.
        for _ in range(2000):
            if len(answered) >= 300:
                break
            stop.wait(0.005)
        kill(server)
    finally:
        stop.set()
        load.join(timeout=30)
    assert len(answered) >= 300, "the load never got going"
    stored = {row["email"] for row in asyncio.run(stored_rows(database_url))}
    missing = [email for email in answered if email not in stored]
    assert missing == []
