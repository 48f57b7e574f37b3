"""The demo generator drives the real service, and the same seed gives the same analyses."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from analytics import deliveries, load, waitlist
from service.demo import driver, files, scenario
from service.demo.driver import Summary, generate
from service.webhooks.worker import Worker

SEED = 7
# Smaller than the notebooks' demo, with every scripted fault still in it (the outage, the 410).
SIZES = {"registrations": 500, "events": 80}
DESIGNED_ERRORS = {"http_500", "http_503", "connect", "timeout", "http_410"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Summary]]:
    """Two demo databases made from the same seed, in separate folders."""
    made = []
    for name in ("first", "second"):
        path = tmp_path_factory.mktemp(name) / "demo.db"
        made.append((path, files.write(path, SEED, **SIZES)))
    return made


def analyses(source: Path) -> dict[str, pd.DataFrame]:
    """Every table the notebooks show, plus the loaded rows less the service's random ids."""
    registrations = load.load_registrations(source)
    partners = load.load_partners(source)
    log = load.load_deliveries(source)
    attempts = load.load_attempts(source)
    resolution = scenario.LATENCY_RESOLUTION_MS
    return {
        "registrations": registrations,
        "intent_mix": waitlist.intent_mix(registrations),
        "over_time": waitlist.registrations_over_time(registrations),
        "repeats": waitlist.repeat_registrations(registrations),
        "top_projects": waitlist.top_projects(registrations),
        "message_lengths": waitlist.message_lengths(registrations).summary,
        "partners": partners.drop(columns="id"),
        # Deliveries made by one publish share created_at; their random ids must not order them.
        "deliveries": log.drop(columns=["id", "partner_id"])
        .sort_values(["created_at", "event_id", "partner_name"], kind="stable")
        .reset_index(drop=True),
        "attempts": attempts.drop(columns=["delivery_id", "partner_id"]),
        "states": deliveries.states(log),
        "success_rate": deliveries.success_rate(attempts),
        "attempts_to_success": deliveries.attempts_to_success(log),
        "latency": deliveries.latency_percentiles(attempts, "partner_name", resolution_ms=resolution),
        "latency_bands": deliveries.latency_bands(attempts, "partner_name", step_ms=resolution),
        "failure_reasons": deliveries.failure_reasons(attempts, "partner_name"),
        "time_to_delivery": deliveries.time_to_delivery(log, "partner_name"),
        "time_to_delivery_bands": deliveries.time_to_delivery_bands(log, "partner_name"),
        "retries_that_succeeded": deliveries.retries_that_succeeded(log),
        "action_items": deliveries.action_items(partners, log, attempts).drop(columns="command"),
    }


ANALYSES = [
    "registrations",
    "intent_mix",
    "over_time",
    "repeats",
    "top_projects",
    "message_lengths",
    "partners",
    "deliveries",
    "attempts",
    "states",
    "success_rate",
    "attempts_to_success",
    "latency",
    "latency_bands",
    "failure_reasons",
    "time_to_delivery",
    "time_to_delivery_bands",
    "retries_that_succeeded",
    "action_items",
]


@pytest.fixture(scope="module")
def tables(runs: list[tuple[Path, Summary]]) -> list[dict[str, pd.DataFrame]]:
    return [analyses(path) for path, _ in runs]


@pytest.mark.parametrize("name", ANALYSES)
def test_same_seed_same_analysis(tables: list[dict[str, pd.DataFrame]], name: str) -> None:
    """Two runs with one seed give equal frames, down to row order."""
    first, second = tables
    assert not first[name].empty
    assert_frame_equal(first[name], second[name])


def stored(path: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT email_key, intent FROM registrations").fetchall()


def test_registrations_went_through_the_endpoint(runs: list[tuple[Path, Summary]]) -> None:
    """Each valid submission is one row per (address, intent); every invalid one got 400, no row."""
    path, summary = runs[0]
    submissions = scenario.plan(SEED, **SIZES).submissions()
    valid = {(str(s.body["email"]).lower(), str(s.body["intent"])) for s in submissions if s.valid}
    invalid = [s for s in submissions if not s.valid]
    rows = stored(path)
    assert invalid
    assert summary.refused == {400: len(invalid)}
    assert summary.accepted == len(submissions) - len(invalid)
    assert sorted(rows) == sorted(valid)  # repeats stored once, refused ones absent
    assert len(rows) < summary.accepted  # some accepted submissions were repeats


def test_every_designed_fault_is_in_the_log(runs: list[tuple[Path, Summary]]) -> None:
    """500s, 503s, refused connections, timeouts and a 410 all happened, with their consequences."""
    path, summary = runs[0]
    attempts = load.load_attempts(path)
    log = load.load_deliveries(path)
    partners = load.load_partners(path).set_index("name")
    assert set(attempts["error_class"].dropna()) == DESIGNED_ERRORS  # no 401: signatures all verified
    assert set(attempts["outcome"]) == {"delivered", "retry", "failed", "paused"}
    assert set(log["status"]) == {"delivered", "pending", "failed"}
    assert partners.loc[scenario.GONE, "status"] == "paused"
    assert set(log.loc[log["status"].eq("pending"), "partner_name"]) == {scenario.GONE}
    assert set(log.loc[log["status"].eq("failed"), "partner_name"]) == {scenario.FLAKY}
    assert summary.attempts == len(attempts)
    assert summary.deliveries == len(log)


def test_durations_are_the_designed_delays_plus_transit(runs: list[tuple[Path, Summary]]) -> None:
    """Every attempt lasts what its answer is designed to take: a timeout exactly the timeout, an
    answer its delay plus the seeded transit, a refused connection nothing; so every duration falls
    in its latency step however loaded the machine that made the demo."""
    attempts = load.load_attempts(runs[0][0])
    timeouts = attempts.loc[attempts["error_class"].eq("timeout"), "duration_ms"]
    assert len(timeouts) and (timeouts == scenario.WEBHOOK_TIMEOUT * 1000).all()
    refused = attempts["error_class"].eq("connect")
    assert len(attempts[refused]) and (attempts.loc[refused, "duration_ms"] == 0).all()
    answered = attempts.loc[attempts["status_code"].notna(), "duration_ms"]
    low, high = (round(seconds * 1000) for seconds in scenario.TRANSIT)
    for designed in (0, scenario.PROMPT_REPLY, scenario.SLOW_REPLY):
        transit = answered - designed * 1000
        assert transit.between(low, high).any()
    designed_ms = {0, scenario.PROMPT_REPLY * 1000, scenario.SLOW_REPLY * 1000}
    step = scenario.LATENCY_RESOLUTION_MS
    assert set(answered // step * step) == designed_ms
    assert all(any(low <= ms - base <= high for base in designed_ms) for ms in answered)


def test_the_database_is_stamped_with_what_made_it(runs: list[tuple[Path, Summary]]) -> None:
    """user_version holds the fingerprint of the scenario, seed and sizes it was made from."""
    path, _ = runs[0]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        (journal,) = conn.execute("PRAGMA journal_mode").fetchone()
    assert version == files.fingerprint(SEED, **SIZES) == files.user_version(path)
    assert journal == "delete"  # one self-contained file


def test_the_worker_is_asked_only_when_something_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registrations make nothing due, so they cost no drain: every drain the driver asks for sends
    something, and there are far fewer drains than registrations."""
    sent: list[int] = []
    send_due = driver.send_due

    async def counted(worker: Worker) -> int:
        sent.append(await send_due(worker))
        return sent[-1]

    monkeypatch.setattr(driver, "send_due", counted)
    summary = asyncio.run(generate(tmp_path / "demo.db", SEED, registrations=200, events=20))
    assert summary.submissions == 200 and summary.attempts == sum(sent)
    assert all(sent), sent
    assert len(sent) < summary.events + summary.attempts


def test_write_refuses_to_reuse_a_partial_file(tmp_path: Path) -> None:
    """generate() starts from an empty database, never on top of an existing file."""
    path = tmp_path / "taken.db"
    path.write_bytes(b"")
    with pytest.raises(FileExistsError):
        asyncio.run(generate(path, SEED, **SIZES))
