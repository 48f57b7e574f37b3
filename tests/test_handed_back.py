"""What a worker hands back unsent is counted by why (``service_webhook_handed_back_total``), once
the turn that hands it back commits, and kept for the next turn should that one fail: parked jobs
of a partner whose circuit a turn opened (``stopped``), what a stopping worker held (``stopping``),
what its partner's change took back (``changed``); a claim that came back too late to start
(``late``) is counted in tests/test_worker_lease_start.py, a change through a real drain in
tests/test_claimed_ahead.py."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from typing import Any

import pytest

from service.clock import ManualClock
from service.db.engine import create_engine, migrate
from service.metrics import Metrics
from service.settings import Settings
from service.states import AttemptOutcome, CircuitChange, HandedBack
from service.webhooks import settle, wiring
from service.webhooks import worker as worker_module
from service.webhooks.claim import Job
from service.webhooks.settle import Settlement
from service.webhooks.worker import Worker

AT = datetime(2026, 11, 29, tzinfo=UTC)


def _job(number: int, partner: str) -> Job:
    return Job(
        f"d{number}", "e", "room.claimed", partner, "https://x.example/", b"{}", 1, ("s",), "t", AT, slots=1
    )


def _counted(metrics: Metrics) -> dict[str, float | None]:
    name = "service_webhook_handed_back_total"
    return {reason: metrics.registry.get_sample_value(name, {"reason": reason}) for reason in HandedBack}


def _worker(sqlite_url: str, clock: ManualClock) -> tuple[Worker, Metrics]:
    migrate(sqlite_url)
    metrics = Metrics()
    worker = wiring.worker(
        create_engine(sqlite_url), Settings(database_url=sqlite_url), clock=clock, metrics=metrics
    )
    return worker, metrics


def _parked(worker: Worker) -> None:
    """Three jobs of partner ``open`` and two of ``other``, one slot each: each partner's first is
    let out to the senders' queue, the rest parked in its lane."""
    partners = ["open", "open", "open", "other", "other"]
    worker.lanes.add([_job(number, partner) for number, partner in enumerate(partners)], start_by=1e12)


async def _close(worker: Worker) -> None:
    await worker.connection.release()
    await worker.engine.dispose()


def test_what_a_worker_hands_back_is_counted_by_reason_once_its_turn_commits(
    sqlite_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that fails after its partner's change took a parked job back keeps every reason for the
    next turn, which counts each once."""
    worker, metrics = _worker(sqlite_url, clock)
    assert _counted(metrics) == dict.fromkeys(HandedBack, 0.0)  # shown from 0
    _parked(worker)
    worker._hold_back([], [("open", CircuitChange.OPENED)])  # open's two parked jobs
    assert (len(worker._expired), worker._handing) == (2, {HandedBack.STOPPED: 2})
    release = worker_module.release

    async def changed(conn: Any) -> list[Job]:
        return list(worker.lanes.take_back("other"))

    async def fails(conn: Any, jobs: Any, *, now: datetime) -> None:
        raise ConnectionError("the database went away")

    async def turns() -> None:
        worker._changed_since_claim = changed  # type: ignore[method-assign]
        monkeypatch.setattr(worker_module, "release", fails)
        with pytest.raises(ConnectionError):
            await worker._turn(0)
        assert _counted(metrics) == dict.fromkeys(HandedBack, 0.0)  # nothing committed
        worker._hand_back(worker.lanes.take_all(), HandedBack.STOPPING)  # nothing left parked
        monkeypatch.setattr(worker_module, "release", release)
        await worker._turn(0)
        await _close(worker)

    asyncio.run(turns())
    assert _counted(metrics) == {
        **dict.fromkeys(HandedBack, 0.0),
        HandedBack.STOPPED: 2.0,
        HandedBack.CHANGED: 1.0,
    }
    assert (worker.handed_back, worker._expired, worker._handing) == (3, [], {})


def test_logging_attempt_by_attempt_that_fails_keeps_what_is_handed_back_and_what_is_left_to_log(
    sqlite_url: str, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch the database refuses is logged attempt by attempt; should the database then fail
    otherwise, the jobs to hand back and the records not yet logged wait for the next turn (the
    record whose commit failed marked uncertain: that turn looks whether it landed), nothing lost."""
    worker, metrics = _worker(sqlite_url, clock)
    _parked(worker)
    worker._hold_back([], [("open", CircuitChange.OPENED)])
    records = [Settlement(_job(9, "other"), AT, 5, 200, None, None, AttemptOutcome.DELIVERED, AT)]
    worker._records = list(records)
    calls = []

    async def refuses_then_fails(conn: Any, logged: Any, *, breaker: Any) -> Any:
        calls.append(len(logged))
        if len(calls) == 1:
            raise sqlite3.IntegrityError("refused")  # the batch: logged attempt by attempt
        raise ConnectionError("the database went away")

    monkeypatch.setattr(settle, "record", refuses_then_fails)

    async def turn() -> None:
        with pytest.raises(ConnectionError):
            await worker._turn(0)
        await _close(worker)

    asyncio.run(turn())
    assert calls == [1, 1]
    assert (worker._records, worker._uncertain) == (records, {"d9"})
    # ``other`` is no partner of the database: the turn took its parked job back as changed.
    assert (len(worker._expired), worker._handing) == (3, {HandedBack.STOPPED: 2, HandedBack.CHANGED: 1})
    assert _counted(metrics) == dict.fromkeys(HandedBack, 0.0)
