"""Advisory locks a client cut off cannot hold for ever (service.db.locks), on the real PostgreSQL.

The holder in these tests is a session stopped between Execute and Sync (tests.pgwire): PostgreSQL
counts it active, so none of its timeouts end it; only a waiter that recognises it does.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text
from webhook_helpers import fixed_keyring, room_claimed

from service.clock import ManualClock
from service.db import locks
from service.db.engine import APPLICATION_NAME, create_engine
from service.events import parse_event
from service.webhooks import outbox, partners
from service.webhooks.claim import CLAIM_LOCK, claim_due
from service.webhooks.partners import NewPartner
from tests.pgwire import StuckSession

_WAITING_ON_THE_LOCK = text(
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"
    " AND application_name = :name"
)


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    return postgres_database


def test_a_session_stuck_holding_the_claim_lock_is_ended_and_the_claim_goes_on(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker's session was cut off mid-turn with the claim lock held. The next claim ends that
    session (it is the service's, and has waited on its client past the bound: 0 here) and claims."""
    monkeypatch.setattr(locks, "STUCK_AFTER_MS", 0)
    clock = ManualClock()
    name = f"stuck-{secrets.token_hex(3)}"

    async def scenario(stuck: StuckSession) -> list[str]:
        engine = create_engine(postgres_url, bounded=True)
        try:
            async with engine.begin() as conn:
                partner = await partners.create_partner(
                    conn, NewPartner(name, "https://partner.example/hook", None, None), now=clock(), keyring=fixed_keyring()
                )
            for index in range(3):
                event = parse_event(room_claimed(f"{name}-{index}"), now=clock())
                await outbox.publish_event(engine, event, now=clock())
            async with engine.begin() as conn:
                jobs = await claim_due(
                    conn, now=clock(), limit=10, lease=timedelta(seconds=30), default_cap=8, keyring=fixed_keyring()
                )
            # Only this partner's: the database may hold other tests' deliveries, due too.
            return [job.partner_id for job in jobs if job.partner_id == partner.id]
        finally:
            await engine.dispose()

    with caplog.at_level(logging.WARNING, logger="service.db.locks"), StuckSession(
        postgres_url, CLAIM_LOCK, APPLICATION_NAME
    ) as stuck:
        claimed = asyncio.run(scenario(stuck))
        assert stuck.ended(), "the stuck session is still open"
    assert len(claimed) == 3
    [warning] = [record.getMessage() for record in caplog.records]
    assert f"ended PostgreSQL session {stuck.pid}:" in warning
    assert f"{CLAIM_LOCK:#x}" in warning


@pytest.mark.parametrize(
    ("holder", "stuck_after_ms"),
    [("psql", 0), (APPLICATION_NAME, 60_000)],
    ids=["another-application", "within-the-bound"],
)
def test_a_holder_not_both_ours_and_stuck_past_the_bound_is_waited_for(
    postgres_url: str, holder: str, stuck_after_ms: int
) -> None:
    """The waiter ends nothing: it waits until the holder finishes its exchange and rolls back."""
    key = 0x7E57_0000 + secrets.randbelow(0xFFFF)

    async def scenario(stuck: StuckSession) -> list[int]:
        engine = create_engine(postgres_url, bounded=True)
        watcher = create_engine(postgres_url)
        try:

            async def waiter() -> list[int]:
                async with engine.begin() as conn:
                    return await locks.take(conn, key, stuck_after_ms=stuck_after_ms)

            task = asyncio.create_task(waiter())
            async with watcher.connect() as watching:
                while not await watching.scalar(_WAITING_ON_THE_LOCK, {"name": APPLICATION_NAME}):
                    # pg_stat_activity holds still within a transaction (PostgreSQL reads it once
                    # per transaction): each look is a transaction of its own, or a first look
                    # before the waiter began to wait would be the only one.
                    await watching.rollback()
                    assert not task.done(), f"took a lock that was held: {task.result()}"
                    await asyncio.sleep(0.02)  # polling a condition, not waiting for time to pass
            await asyncio.to_thread(stuck.release)
            return await asyncio.wait_for(task, 10)
        finally:
            await engine.dispose()
            await watcher.dispose()

    with StuckSession(postgres_url, key, holder) as stuck:
        ended: Any = asyncio.run(scenario(stuck))
    assert ended == []


def test_a_holder_that_passes_the_bound_while_the_claim_waits_is_ended_then(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder is not yet past the bound (0.3 s here) when the waiter first looks, so the waiter
    waits; it waits a bound at a time and looks again, ends the holder, and takes the lock, long
    before its command timeout (3 s here, which one long wait would have run into). The
    transaction's lock_timeout is as it was."""
    monkeypatch.setattr(locks, "STUCK_AFTER_MS", 300)
    key = 0x7E58_0000 + secrets.randbelow(0xFFFF)

    async def scenario() -> tuple[list[int], str]:
        engine = create_engine(postgres_url, bounded=True, connect_args={"command_timeout": 3})
        try:
            async with engine.begin() as conn:
                ended = await locks.take(conn, key)
                return ended, str(await conn.scalar(text("SELECT current_setting('lock_timeout')")))
        finally:
            await engine.dispose()

    with StuckSession(postgres_url, key, APPLICATION_NAME) as stuck:
        ended, lock_timeout = asyncio.run(scenario())
        assert stuck.ended()
    assert ended == [stuck.pid]
    assert lock_timeout == "0"


def test_a_lock_held_past_the_longest_wait_is_a_timeout_and_the_transaction_goes_on(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder the waiter must not end (another application's) keeps the lock past
    ``WAIT_AT_MOST_S`` (0.5 s here): the waiter gives up with a TimeoutError, as one long wait did
    at the command timeout, and its transaction is still usable."""
    monkeypatch.setattr(locks, "WAIT_AT_MOST_S", 0.5)
    key = 0x7E59_0000 + secrets.randbelow(0xFFFF)

    async def scenario() -> int:
        engine = create_engine(postgres_url, bounded=True)
        try:
            async with engine.begin() as conn:
                with pytest.raises(TimeoutError):
                    await locks.take(conn, key, stuck_after_ms=0)
                return int(await conn.scalar(text("SELECT 1")))
        finally:
            await engine.dispose()

    with StuckSession(postgres_url, key, "psql") as stuck:
        assert asyncio.run(scenario()) == 1
        stuck.release()  # still its own: nothing ended it
