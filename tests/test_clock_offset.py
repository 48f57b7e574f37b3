"""This machine's clock against the database server's: measured on PostgreSQL, a start refused past
what the delivery leases absorb (``worker``, and ``serve`` with its worker), and measured again at
every roster heartbeat of a running worker (a gauge, and one warning line).

Skewed clocks are injected: real time plus a number of seconds the test sets. Nothing sleeps for
time to pass; the running worker's heartbeats are made due by moving its clock."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service import logs
from service.cli import main
from service.clock import utc_now
from service.db import clockcheck
from service.db.engine import create_engine
from service.metrics import Metrics
from service.settings import Settings
from service.webhooks import roster, wiring
from tests.processes import ROOT
from tests.webhook_helpers import TEST_SECRETS_KEY

SKEW = 40.0  # what the audit's second machine ran ahead by
NEAR = 0.25  # how close a measurement on loopback comes to the skew injected (it is a few µs)


class Skewed:
    """The system clock, ``seconds`` ahead (behind, when negative); the test moves ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self) -> datetime:
        return utc_now() + timedelta(seconds=self.seconds)


async def _measure(url: str, clock: Callable[[], datetime]) -> clockcheck.Offset | None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await clockcheck.measure(conn, clock)
    finally:
        await engine.dispose()


# --- measuring ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("skew", "direction"), [(SKEW, "ahead of"), (-SKEW, "behind"), (0.0, "")])
def test_the_offset_against_postgresql_is_the_clocks_skew(
    empty_postgres: str, skew: float, direction: str
) -> None:
    """With this machine's clock 40 s ahead the offset is about 40, 40 s behind about -40, and the
    system clock itself about 0 (the database runs on this machine); each reading's round trip on
    loopback is well under the bound."""
    offset = asyncio.run(_measure(empty_postgres, Skewed(skew) if skew else utc_now))
    assert offset is not None
    assert offset.seconds == pytest.approx(skew, abs=NEAR)
    assert 0 <= offset.within < clockcheck.BOUND
    assert offset.past_bound is bool(skew)
    if direction:
        assert offset.describe() == f"{SKEW:.3f} s {direction} the database server's"


def test_on_sqlite_there_is_nothing_to_measure(sqlite_url: str) -> None:
    """One machine, one clock: no reading, and no start is refused whatever the clock says."""
    assert asyncio.run(_measure(sqlite_url, Skewed(SKEW))) is None
    assert clockcheck.check_clock(sqlite_url, clock=Skewed(SKEW)) is None


def test_the_bound_is_half_the_second_an_attempt_leaves_in_its_lease(sqlite_url: str) -> None:
    """An attempt starts by its lease's end less one timeout and a second (worker._start_by), so it
    ends at least 1 s inside its lease; two machines each within the bound of the database's clock
    are within that second of each other."""
    settings = Settings(database_url=sqlite_url)
    worker = wiring.worker(create_engine(sqlite_url), settings, clock=utc_now)
    assert worker._start_margin - settings.webhook_timeout == 1
    assert worker._start_margin - settings.webhook_timeout >= 2 * clockcheck.BOUND


# --- refusing a start ---------------------------------------------------------------------------


def test_the_start_check_refuses_a_clock_past_the_bound(empty_postgres: str) -> None:
    """40 s ahead: refused, the reason a DatabaseUnusable that passes (exit 1 through main: NTP may
    bring the clock in, and the units restart it) naming the offset, its
    direction and the fix; within the bound it passes and says by how much."""
    with pytest.raises(clockcheck.ClockSkewed) as refused:
        clockcheck.check_clock(empty_postgres, clock=Skewed(SKEW))
    message = str(refused.value)
    assert message.startswith(f"this machine's clock is {SKEW:.3f} s ahead of the database server's")
    assert "chrony or systemd-timesyncd" in message and "\n" not in message
    with pytest.raises(clockcheck.ClockSkewed, match="s behind the database server's"):
        clockcheck.check_clock(empty_postgres, clock=Skewed(-2 * clockcheck.BOUND))
    passed = clockcheck.check_clock(empty_postgres, clock=Skewed(clockcheck.BOUND / 2))
    assert passed is not None and passed.seconds == pytest.approx(clockcheck.BOUND / 2, abs=0.1)


class Started(Exception):
    """The command went on past its start checks (it would have served)."""


@pytest.fixture
def skewed_start(empty_postgres: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """The environment of a start on this run's PostgreSQL, with the system clock the start check
    reads set ``seconds`` off; a start that gets past its checks raises ``Started`` where it would
    configure its logs (nothing is served, the test process's logging is left alone)."""
    for name in list(os.environ):
        if name.startswith(("SERVICE_", "SANIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("SERVICE_DATABASE_URL", empty_postgres)
    monkeypatch.setenv("SERVICE_SECRETS_KEY", TEST_SECRETS_KEY)

    def started(*args: Any, **kwargs: Any) -> None:
        raise Started

    monkeypatch.setattr(logs, "configure", started)

    def skew(seconds: float) -> None:
        monkeypatch.setattr(clockcheck, "utc_now", Skewed(seconds))

    return skew


@pytest.mark.parametrize(
    "command", [["worker", "--port", "0"], ["serve", "--port", "0"]], ids=lambda command: command[0]
)
def test_worker_and_serve_refuse_to_start_with_a_skewed_clock(
    command: list[str], skewed_start: Callable[[float], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """One line on stderr naming the offset, its direction and the fix; exit 1, which the units
    restart until NTP has brought the clock in (a machine just booted)."""
    skewed_start(SKEW)
    assert main(command) == 1
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"error: this machine's clock is {SKEW:.3f} s ahead of the database server's")
    assert "NTP (chrony or systemd-timesyncd)" in line


@pytest.mark.parametrize(
    "command",
    [["worker", "--port", "0"], ["serve", "--port", "0"], ["serve", "--port", "0", "--no-worker"]],
    ids=["worker", "serve", "serve-no-worker"],
)
def test_a_clock_within_the_bound_starts(command: list[str], skewed_start: Callable[[float], None]) -> None:
    """A clock within the bound passes the check; and serve without a worker claims nothing, so
    its clock is not checked at all."""
    skewed_start(clockcheck.BOUND / 2)
    with pytest.raises(Started):
        main(command)
    if "--no-worker" in command:
        skewed_start(SKEW)
        with pytest.raises(Started):
            main(command)


SKEWED_WORKER = """\
import sys
from datetime import timedelta
from service.clock import utc_now
from service.db import clockcheck
skew = timedelta(seconds=float(sys.argv[1]))
clockcheck.utc_now = lambda: utc_now() + skew
sys.argv = ["python -m service", "worker", "--port", "0"]
from service.cli import entry
entry()
"""


def test_the_real_worker_refuses_a_skewed_clock_in_one_line(empty_postgres: str) -> None:
    """``python -m service worker`` in a child process whose clock runs 40 s ahead: exit 1, one line,
    no traceback, nothing served."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVICE_", "SANIC_"))}
    env.update({"SERVICE_DATABASE_URL": empty_postgres, "SERVICE_SECRETS_KEY": TEST_SECRETS_KEY})
    result = subprocess.run(
        [sys.executable, "-c", SKEWED_WORKER, str(SKEW)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: this machine's clock is {SKEW:.3f} s ahead")
    assert "Traceback" not in result.stderr


# --- measuring while running --------------------------------------------------------------------


def _gauge(metrics: Metrics) -> float:
    for family in text_string_to_metric_families(metrics.render().decode()):
        if family.name == "service_clock_offset_seconds":
            (sample,) = family.samples
            return float(sample.value)
    raise AssertionError("no service_clock_offset_seconds in the metrics")


def test_the_gauge_is_nan_until_measured() -> None:
    """A process that has measured nothing (no worker, or SQLite) says so, rather than 0."""
    assert math.isnan(_gauge(Metrics()))


async def _until(holds: Callable[[], bool]) -> None:
    """Until ``holds()``, looking between the worker's steps (bounded: 5 s)."""
    for _ in range(500):
        if holds():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def _clock_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == "service.webhooks.worker" and "clock" in record.getMessage()
    ]


def test_each_heartbeat_measures_the_clock_and_warns_once(
    empty_postgres: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's first beat measures 45 s behind: the gauge says so and one warning is logged.
    Each later beat (made due by moving the clock a heartbeat on) sets the gauge again; still past
    the bound, it logs nothing more; back within it, one info line; past it again, one warning."""
    caplog.set_level(logging.INFO, logger="service.webhooks.worker")
    beat = roster.HEARTBEAT.total_seconds()
    clock = Skewed(-3 * beat)
    metrics = Metrics()

    async def scenario() -> list[tuple[float, list[tuple[int, str]]]]:
        engine = create_engine(empty_postgres, bounded=True)
        settings = Settings(database_url=empty_postgres, secrets_key=TEST_SECRETS_KEY)
        worker = wiring.worker(
            engine, settings, clock=clock, metrics=metrics, concurrency=2, poll_interval=0.01
        )
        seen = []
        await worker.start()
        try:
            for _ in range(5):
                await _until(lambda: abs(_gauge(metrics) - clock.seconds) < NEAR)
                assert worker.clock_offset == pytest.approx(clock.seconds, abs=NEAR)
                seen.append((clock.seconds, _clock_lines(caplog)))
                clock.seconds += beat  # the next beat is due, by the clock alone
        finally:
            await worker.stop()
            await engine.dispose()
        return seen

    seen = asyncio.run(scenario())
    assert [skew for skew, _ in seen] == [-45, -30, -15, 0, 15]
    assert [len(lines) for _, lines in seen] == [1, 1, 1, 2, 3]
    (first, back, again) = seen[-1][1]
    assert first[0] == logging.WARNING
    assert first[1].startswith("this machine's clock is 45.0")
    assert "s behind the database server's" in first[1] and "chrony or systemd-timesyncd" in first[1]
    assert back[0] == logging.INFO and "back within 0.5 s" in back[1]
    assert again[0] == logging.WARNING and "s ahead of the database server's" in again[1]


def test_on_sqlite_the_heartbeat_leaves_the_gauge_unmeasured(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One machine, one clock: the beat is written, no offset is reported or warned of."""
    metrics = Metrics()

    async def scenario() -> float | None:
        engine = create_engine(sqlite_url)
        settings = Settings(database_url=sqlite_url)
        worker = wiring.worker(
            engine, settings, clock=Skewed(SKEW), metrics=metrics, concurrency=2, poll_interval=0.01
        )
        await worker.start()
        try:

            async def listed() -> bool:
                async with engine.connect() as conn:
                    return bool(await roster.roster(conn))

            for _ in range(500):
                if await listed():
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the worker never beat")
        finally:
            await worker.stop()
            await engine.dispose()
        return worker.clock_offset

    assert asyncio.run(scenario()) is None
    assert math.isnan(_gauge(metrics))
    assert _clock_lines(caplog) == []
