"""The roster of running workers: each writes its row as it starts and beats, deletes it as it
stops; the admin API, the command and the console list it, live or silent."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from conftest import Client
from webhook_helpers import ADMIN_TOKEN, Receiver, onboard, publish, room_claimed, settings

from service.app import create_app
from service.clock import ManualClock, format_timestamp
from service.db.engine import create_engine
from service.settings import Settings
from service.webhooks import roster, runtime
from service.webhooks.roster import FORGET_AFTER, HEARTBEAT, SILENT_AFTER, Presence

T = TypeVar("T")
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}


def presence(clock: ManualClock, worker_id: str = "w-1", **changes: Any) -> Presence:
    now = clock()
    found = Presence(
        id=worker_id,
        host="edge-1",
        pid=4242,
        role="worker",
        loop="uvloop",
        concurrency=512,
        attempts=0,
        started_at=now,
        seen_at=now,
    )
    return replace(found, **changes)


def on_database(database_url: str, work: Callable[[Any], Awaitable[T]]) -> T:
    async def run() -> T:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as conn:
                return await work(conn)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_a_beat_writes_the_row_then_moves_only_the_count_and_the_moment(
    database_url: str, clock: ManualClock
) -> None:
    first = presence(clock)
    on_database(database_url, lambda conn: roster.beat(conn, first))
    clock.advance(HEARTBEAT.total_seconds())
    later = replace(first, attempts=120, seen_at=clock(), host="renamed", role="serve")
    on_database(database_url, lambda conn: roster.beat(conn, later))

    (found,) = on_database(database_url, roster.roster)
    # What a worker is does not change while it runs: only its count and its last beat move.
    assert found == replace(first, attempts=120, seen_at=clock())


def test_leaving_deletes_only_the_workers_own_row(database_url: str, clock: ManualClock) -> None:
    for worker_id in ("w-1", "w-2"):
        on_database(
            database_url, lambda conn, worker_id=worker_id: roster.beat(conn, presence(clock, worker_id))
        )
    on_database(database_url, lambda conn: roster.leave(conn, "w-1"))
    assert [found.id for found in on_database(database_url, roster.roster)] == ["w-2"]


def test_a_beat_forgets_workers_unseen_for_a_day_and_keeps_the_silent(
    database_url: str, clock: ManualClock
) -> None:
    dead = presence(clock, "dead")
    on_database(database_url, lambda conn: roster.beat(conn, dead))
    clock.advance(60)
    silent = presence(clock, "silent")
    on_database(database_url, lambda conn: roster.beat(conn, silent))
    clock.advance(FORGET_AFTER.total_seconds())  # dead: unseen a day and a minute; silent: a day
    on_database(database_url, lambda conn: roster.beat(conn, presence(clock, "live")))

    found = on_database(database_url, roster.roster)
    assert [worker.id for worker in found] == ["silent", "live"]  # the longest-running first


@pytest.mark.parametrize(
    ("unseen", "state"),
    [(0, "live"), (SILENT_AFTER.total_seconds(), "live"), (SILENT_AFTER.total_seconds() + 0.001, "silent")],
)
def test_a_worker_is_silent_once_three_beats_are_missed(
    clock: ManualClock, unseen: float, state: str
) -> None:
    seen = presence(clock, attempts=7)
    clock.advance(unseen)
    assert seen.public(clock()) == {
        "id": "w-1",
        "host": "edge-1",
        "pid": 4242,
        "role": "worker",
        "loop": "uvloop",
        "concurrency": 512,
        "attemptsLogged": 7,
        "startedAt": format_timestamp(seen.started_at),
        "seenAt": format_timestamp(seen.seen_at),
        "state": state,
    }


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """Until ``check`` holds, looking between the worker's steps (bounded: 5 s)."""
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def test_a_running_worker_is_listed_beats_by_the_clock_and_leaves_on_stop(
    make_client: Any, clock: ManualClock
) -> None:
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())

        async def scenario() -> None:
            worker = runtime.worker_for(client.app, poll_interval=0.01)
            operations = client.app.ctx.operations

            async def listed() -> list[dict[str, Any]]:
                found: list[dict[str, Any]] = (await operations.list_workers())["workers"]
                return found

            await worker.start()
            try:
                await until(lambda: _has(listed, lambda rows: len(rows) == 1))
                (row,) = await listed()
                assert row == {
                    "id": worker.holder,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "role": "worker",
                    "loop": "asyncio",  # the test's own loop
                    "concurrency": worker.concurrency,
                    "attemptsLogged": 0,
                    "startedAt": format_timestamp(clock()),
                    "seenAt": format_timestamp(clock()),
                    "state": "live",
                }
                await operations.publish(room_claimed("moonfrog"))  # wakes the app's worker
                await until(lambda: _true(worker.logged == 1))
                clock.advance(HEARTBEAT.total_seconds())  # the next beat is due, by the clock alone
                await until(lambda: _has(listed, lambda rows: rows[0]["seenAt"] == format_timestamp(clock())))
                assert (await listed())[0]["attemptsLogged"] == 1
            finally:
                await worker.stop()
            assert await listed() == []

        client.run(scenario())


def test_the_servers_own_worker_is_listed_as_inside_serve(sqlite_url: str, clock: ManualClock) -> None:
    app = create_app(Settings(database_url=sqlite_url, **settings()), clock=clock, run_worker=True)
    with Client(app) as client:

        async def scenario() -> list[dict[str, Any]]:
            operations = client.app.ctx.operations
            await until(lambda: _has(lambda: operations.list_workers(), lambda found: bool(found["workers"])))
            found: list[dict[str, Any]] = (await operations.list_workers())["workers"]
            return found

        (row,) = client.run(scenario())
        assert row["role"] == "serve"
        assert row["id"] == client.app.ctx.webhooks.worker.holder


def test_a_failed_beat_is_logged_and_delivery_goes_on(
    make_client: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused(conn: Any, presence: Presence) -> None:
        raise ConnectionRefusedError("database gone")

    monkeypatch.setattr(roster, "beat", refused)
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        publish(client, room_claimed("moonfrog"))

        async def scenario() -> int:
            worker = runtime.worker_for(client.app, poll_interval=0.01)
            await worker.start()
            try:
                await until(lambda: _true(worker.logged == 1))
            finally:
                await worker.stop()
            return worker.logged

        assert client.run(scenario()) == 1
    assert "the worker roster could not be written: ConnectionRefusedError" in caplog.text
    assert "database gone" not in caplog.text  # the error's class, never its text


async def _has(read: Callable[[], Awaitable[T]], holds: Callable[[T], bool]) -> bool:
    return holds(await read())


async def _true(value: bool) -> bool:
    return value


# --- where operators read it ------------------------------------------------------------------


def console_page(client: Client, path: str = "/console") -> str:
    """A console page, signed in with the admin token."""
    signed = client.post(
        "/console/login",
        data={"token": ADMIN_TOKEN, "next": "/console"},
        headers={"origin": "http://127.0.0.1:8000"},
    )
    page: str = client.get(path, cookies={"console_session": signed.cookies["console_session"]}).text
    return page


def _seed(database_url: str, clock: ManualClock) -> None:
    live = presence(clock, "live-1", host="edge-live", attempts=31)
    dead = presence(clock, "dead-1", host="edge-dead", pid=77)
    on_database(database_url, lambda conn: roster.beat(conn, dead))
    clock.advance(SILENT_AFTER.total_seconds() + 1)
    on_database(database_url, lambda conn: roster.beat(conn, replace(live, seen_at=clock())))


def test_the_admin_api_lists_the_roster(make_client: Any, sqlite_url: str, clock: ManualClock) -> None:
    _seed(sqlite_url, clock)
    with make_client(**settings()) as client:
        assert client.get("/admin/workers").status == 401
        response = client.get("/admin/workers", headers=ADMIN)
    assert response.status == 200
    assert [(row["host"], row["state"]) for row in response.json["workers"]] == [
        ("edge-dead", "silent"),
        ("edge-live", "live"),
    ]


def test_the_workers_command_prints_the_roster(
    sqlite_url: str, clock: ManualClock, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.cli import main

    on_database(sqlite_url, lambda conn: roster.beat(conn, presence(clock, host="edge-cli")))
    monkeypatch.setenv("SERVICE_DATABASE_URL", sqlite_url)
    assert main(["workers"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["workers"]
    assert (row["host"], row["pid"], row["role"]) == ("edge-cli", 4242, "worker")


def test_the_console_overview_shows_the_roster_and_warns_of_silence(
    make_client: Any, sqlite_url: str, clock: ManualClock
) -> None:
    _seed(sqlite_url, clock)
    with make_client(**settings()) as client:
        page = console_page(client)
    assert "Worker silent: edge-dead, process 77" in page
    assert '<th scope="row">edge-live</th><td>4242</td>' in page
    assert "alone, uvloop, 512 at once" in page
    assert "No live worker" not in page  # one is live


def test_the_console_warns_when_work_waits_and_no_worker_is_live(
    make_client: Any, sqlite_url: str, clock: ManualClock
) -> None:
    on_database(sqlite_url, lambda conn: roster.beat(conn, presence(clock, host="edge-dead")))
    clock.advance(timedelta(minutes=5).total_seconds())
    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        publish(client, room_claimed("moonfrog"))
        page = console_page(client)
    assert "No live worker: nothing delivers the 1 waiting" in page


def test_the_metrics_count_live_and_silent_workers(
    make_client: Any, sqlite_url: str, clock: ManualClock
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    _seed(sqlite_url, clock)
    with make_client(**settings()) as client:
        scraped = client.get("/admin/metrics", headers=ADMIN).text
    (family,) = [
        found for found in text_string_to_metric_families(scraped) if found.name == "service_webhook_workers"
    ]
    assert {sample.labels["state"]: sample.value for sample in family.samples} == {"live": 1.0, "silent": 1.0}


@pytest.mark.parametrize(
    ("in_roster", "shown"),
    [
        (True, "Claimed by</dt><dd>edge-claim, process 4242, last seen 2026-06-29T12:00:00.000000Z"),
        (False, "Claimed by</dt><dd>a worker no longer in the roster"),
    ],
)
def test_a_delivery_being_attempted_names_the_worker_holding_it(
    make_client: Any, clock: ManualClock, in_roster: bool, shown: str
) -> None:
    from service.webhooks.claim import claim_due

    with Receiver() as receiver, make_client(**settings()) as client:
        onboard(client, receiver.url())
        publish(client, room_claimed("moonfrog"))
        app = client.app

        async def claim() -> str:
            async with app.ctx.engine.begin() as conn:
                (job,) = await claim_due(
                    conn,
                    now=clock(),
                    limit=10,
                    lease=timedelta(seconds=60),
                    default_cap=8,
                    keyring=app.ctx.keyring,
                    holder="w-claim",
                )
                if in_roster:
                    await roster.beat(conn, presence(clock, "w-claim", host="edge-claim"))
            return job.delivery_id

        page = console_page(client, f"/console/deliveries/{client.run(claim())}")
    assert "<dd>delivering</dd>" in page
    assert shown in page
